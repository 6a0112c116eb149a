"""The neighbour engine: one cell list, one pair-sum engine, one reverse pass.

- `build_cell_list` (cells.py): particles sorted by cell, each one's candidates
  as contiguous runs, no capacity to overflow; `build_bands` (bands.py): one
  list per band of support radius.
- `make_pair_sum(pair_fn, layout, pullback=...)` (engine.py): the function
  summing a pair function over the candidates, gather and scatter parts, with
  the one hand-written reverse pass (O(N) residuals): autodiff of the pair
  function inside the loop, or the pair's own analytic pullback.
- `LAYOUTS` / `layout_for` (layout.py): the one layout table, by dimension
  (banded lists: `BAND_LAYOUTS`, `BAND_GROUPS` groups); `group_count`: the
  groups a slot loop runs, more for large N (`MAX_GROUP_SIZE`).
- `image_shift`, `minimum_image`, `separation`, `safe_distance`, `unsort` (geometry.py).

`progenax.sph` (density, relaxation) and the mesh potential's short-range
part are pair functions on it.
"""

from .bands import Bands as Bands
from .bands import band_index as band_index
from .bands import build_bands as build_bands
from .cells import CellList as CellList
from .cells import build_cell_list as build_cell_list
from .cells import candidate_counts as candidate_counts
from .cells import slots_per_particle as slots_per_particle
from .engine import PairFunction as PairFunction
from .engine import PairPullback as PairPullback
from .engine import each_list as each_list
from .engine import fold as fold
from .engine import make_pair_sum as make_pair_sum
from .geometry import image_shift as image_shift
from .geometry import minimum_image as minimum_image
from .geometry import safe_distance as safe_distance
from .geometry import separation as separation
from .geometry import unsort as unsort
from .layout import BAND_GROUPS as BAND_GROUPS
from .layout import BAND_LAYOUTS as BAND_LAYOUTS
from .layout import LAYOUTS as LAYOUTS
from .layout import MAX_GROUP_SIZE as MAX_GROUP_SIZE
from .layout import Layout as Layout
from .layout import group_count as group_count
from .layout import layout_for as layout_for

__all__ = [
    # cell lists
    "Bands",
    "CellList",
    "band_index",
    "build_bands",
    "build_cell_list",
    "candidate_counts",
    "slots_per_particle",
    # the engine
    "PairFunction",
    "PairPullback",
    "each_list",
    "fold",
    "make_pair_sum",
    # geometry
    "image_shift",
    "minimum_image",
    "safe_distance",
    "separation",
    "unsort",
    # layouts
    "BAND_GROUPS",
    "BAND_LAYOUTS",
    "LAYOUTS",
    "Layout",
    "MAX_GROUP_SIZE",
    "group_count",
    "layout_for",
]
