"""The neighbour engine: one cell list (contiguous runs, no capacity to overflow).

`progenax.sph`, the mesh potential's short-range part and relaxation read
their neighbours through it.
"""

from .cells import CellList as CellList
from .cells import build_cell_list as build_cell_list
from .cells import candidate_counts as candidate_counts
from .cells import fold_candidates as fold_candidates

__all__ = ["CellList", "build_cell_list", "candidate_counts", "fold_candidates"]
