r"""SPH pair functions on the neighbour engine, and banded pair sums.

The pair sums themselves (slot loop, gather and scatter parts, the reverse
pass) live in `progenax.neighbours`; this module holds the SPH pair functions
and the banded front end the relaxation uses:

- `density_pair(kernel, dim)`: $t^{\to i} = m_j W(|x_i - x_j|, h_i)$, a pure
  gather (the SPH density, self term included).
- `build_bands`, `pair_sum`: banded cell lists for per-particle smoothing
  lengths (`neighbours.bands`) and the engine's scatter-form sum over them.
"""

from __future__ import annotations

import functools

from .._types import Array
from ..neighbours import Bands, PairFunction, layout_for, make_pair_sum, safe_distance
from ..neighbours import build_bands as _build_bands
from .kernels import get_kernel

__all__ = ["Bands", "PairFunction", "build_bands", "density_pair", "pair_sum", "safe_distance"]


@functools.cache
def density_pair(kernel_name: str, dim: int) -> PairFunction:
    """The SPH density's pair function: $m_j W(r_{ij}, h_i)$ to the query
    (features "x", "m", "h"; m and h per particle or shared scalars)."""
    kernel = get_kernel(kernel_name)

    def pair(a_i, a_j, dx):
        return (a_j["m"] * kernel.value(safe_distance(dx), a_i["h"], dim),), None

    return pair


def build_bands(
    positions: Array,
    support: Array,
    *,
    box: Array | None = None,
    n_bands: int = 8,
    band_ratio: float = 2.0,
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int = 128,
    query: Array | None = None,
) -> Bands:
    """`neighbours.build_bands` with the layout given field by field
    (None: `neighbours.LAYOUTS`)."""
    layout = layout_for(
        positions.shape[1],
        cells_per_reach=cells_per_reach,
        x_cells_per_reach=x_cells_per_reach,
        chunk=chunk,
        groups=int(groups),
    )
    return _build_bands(positions, support, box=box, n_bands=n_bands, band_ratio=band_ratio, layout=layout, query=query)


@functools.cache
def _banded_sum(pair_fn: PairFunction, layout):
    return make_pair_sum(pair_fn, layout)


def pair_sum(
    pair_fn: PairFunction, bands: Bands, features: dict[str, Array], width: int, *, scatter: bool = False
) -> Array:
    """S (N, width) for `pair_fn` over the candidates of `bands`
    (`neighbours.make_pair_sum`, scatter form). `features` maps names to (N,)
    arrays or scalars and holds the positions as "x" (N, d). `width` and
    `scatter` are checked against what `pair_fn` returns. `pair_fn` must be
    hashable and defined once (module level or cached per configuration)."""
    out = _banded_sum(pair_fn, bands.layout)(bands, features)
    if out.shape[1] != int(width):
        raise ValueError(f"width must be the number of components pair_fn returns ({out.shape[1]}), got {width}")
    del scatter  # the engine reads the to-neighbour part from pair_fn itself
    return out
