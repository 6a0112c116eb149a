"""The one table of cell-list layouts, by dimension.

A layout is the static shape of the neighbour search: cells of side at least
reach / `cells_per_reach` along y and z (each particle reads its
(2k + 1)^(d-1) rows), reach / `x_cells_per_reach` along x (each row's run is
trimmed to the kernel ball at that resolution), `chunk` candidate slots per
loop step, and `groups` workload groups (particles with similar candidate
counts share a trip count). Chosen by measurement with `benchmarks/sph.py`
(uniform h) and `benchmarks/relax.py` (banded lists); every pair sum in the
library (SPH density, relaxation, the mesh potential's short range) reads it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Layout(NamedTuple):
    """Static layout of a cell list and its slot loop (see the module notes)."""

    cells_per_reach: int
    x_cells_per_reach: int
    chunk: int
    groups: int


LAYOUTS = {
    1: Layout(1, 4, 16, 8),
    2: Layout(2, 4, 16, 8),
    3: Layout(1, 4, 16, 8),
}


def layout_for(
    dim: int,
    *,
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int | None = None,
) -> Layout:
    """`LAYOUTS[dim]` with the given fields replaced (None keeps the default);
    every field must be a positive int (`ValueError` naming it)."""
    if dim not in LAYOUTS:
        raise ValueError(f"dim must be one of {sorted(LAYOUTS)}, got {dim}")
    given = {
        "cells_per_reach": cells_per_reach,
        "x_cells_per_reach": x_cells_per_reach,
        "chunk": chunk,
        "groups": groups,
    }
    layout = LAYOUTS[dim]
    for name, value in given.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int (static), got {value!r}")
        layout = layout._replace(**{name: int(value)})
    return layout
