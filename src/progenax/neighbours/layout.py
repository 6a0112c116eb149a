r"""The one table of cell-list layouts, by dimension.

A layout is the static shape of the neighbour search: cells of side at least
reach / `cells_per_reach` along y and z (each particle reads its
(2k + 1)^(d-1) rows), reach / `x_cells_per_reach` along x (each row's run is
trimmed to the kernel ball at that resolution), `chunk` candidate slots per
loop step, and `groups` workload groups (particles with similar candidate
counts share a trip count). Every pair sum in the library (SPH density,
relaxation, the mesh potential's short range) reads it; banded lists
(`neighbours.build_bands`, relaxation) take `BAND_LAYOUTS`: the same cells
with `BAND_GROUPS` groups, and in 2D the layout single lists had before
(2, 8, 16) (`layout_for(d, banded=True)`).

**Single lists**, measured with the SPH density loss's `value_and_grad`
(forward and gradient), the seed's workload of `benchmarks/sph.py` (periodic,
uniform h, 31 neighbours in 2D and 50 in 3D), float64, this project's 2-core
machine under a load of about 8 (times are 2-3x a quiet machine's; the
layouts of one row were timed in one process, their calls interleaved, best
of 5 at 1e5 and 3 at 1e6). Slots: pair slots evaluated per particle
(padding included); pairs: candidates read per particle.

    3D  (k, kx, chunk, groups)   1e5          1e6          slots  pairs
        (1,  4, 16,  8)           0.831 s     10.38 s      194    176
        (1,  8, 16,  8)           0.798 s     10.48 s      182    164
        (1, 16, 16,  8)  *        0.776 s      8.92 s      174    158
        (1, 32, 16,  8)             -          9.43 s      174    155
        (1,  8, 32,  8)           0.859 s        -         188    164
        (1,  8,  8,  8)           1.050 s        -         179    164
        (1,  8, 16, 16)           0.831 s        -         177    164
        (2,  8, 16,  8)           (a)            -         116    103
        (3,  8, 16,  8)             -            -         104     91
    2D  (2,  4, 16,  8)           0.181 s      6.08 s       62     49
        (2,  8, 16,  8)           0.168 s      5.42 s       56     46
        (2, 16, 16,  8)           0.174 s      5.82 s       54     44
        (1,  8, 16,  8)           0.167 s      5.63 s       68     56
        (3,  8, 16,  8)           0.212 s        -          54     42

The 2D layout then became (2, 16, 8, 16) *: half the chunk halves the
padding a particle pays to round its slots up to a chunk, and finer x cells
and twice the groups trim the rest, at the same speed. Quiet machine,
`python benchmarks/sph.py --dims 2 --baseline` (forward / gradient, slots
per particle for 31.4 neighbours; (2, 8, 16, 8) against (2, 16, 8, 16)):

    N     (2,  8, 16,  8)               (2, 16,  8, 16)
    1e4   0.0050 / 0.0105 s   56        0.0051 / 0.0110 s   49
    1e5   0.0317 / 0.0757 s   56        0.0331 / 0.0733 s   49
    1e6   0.440  / 0.818 s    53.4      0.424  / 0.846 s    48

(3D: chunk 8 or x cells of reach / 32 leave the slots at 168-171 against
176 and the times within 3%, so 3D keeps chunk 16.)

(a) 1.375 s against 1.242 s for (1, 4, 16, 8) in another process; in a
third, (2, 8, 32, 8) took 1.534 s against 1.112 s for (1, 4, 16, 8).

Finer x cells trim each row's run closer to the ball; finer y/z cells
(k = 2, 3) read far fewer pairs but cost one compare per run on every slot
(25 or 49 runs a particle in 3D, against 9): k = 2 was 1.1-1.4x slower in
3D in every trial. A windowed walk (w - 1 compares a slot, a step stopping
at the start of run r + w) did not recover it: (2, 8, 16, 8) with w = 6 took
0.787 s at 1e5 against 0.724 s for (1, 4, 16, 8), and 16.0 s at 1e6 against
10.5 s, so it was not kept.

**Banded lists**, measured with one relaxation step of a 100,000-star cluster
(8 bands, live particles only, density and loss-gradient passes; one process
per cluster, interleaved, best of 3, same load):

    3D  (k, kx, chunk, groups)   Plummer   King W0 = 9
        (1,  4, 16, 128)          3.81 s    3.90 s
        (1,  8, 16, 128)          3.21 s      -
        (1, 16, 16, 128)  *       2.63 s    3.09 s
        (2,  8, 16, 128)          3.00 s    3.85 s
        (2, 16, 16, 128)          2.43 s    4.00 s

so the banded lists share the single lists' cells: 306 slots a live
particle of the relaxed Plummer sphere, against 361 for (1, 4, 16, 128) and
174 for (2, 8, 16, 128) (the banded layout before the engine), for 58
neighbours; 100 steps took 169 s of CPU against 196 s for (1, 4, 16, 128),
the same 1.95% rms (`benchmarks/relax.py --case plummer`, both runs at
once). In 2D the single lists' chunk of 8 made a relaxation slower
(`benchmarks/relax.py --case box2d`, against (2, 8, 16, 128) in back-to-back
runs: 10,000 particles, 200 steps, 5.4 s against 5.0 s; 100,000 particles,
40 steps, 8.0 s against 7.2 s, for the same rms), so 2D banded lists keep
(2, 8, 16, 128).
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
    2: Layout(2, 16, 8, 16),
    3: Layout(1, 16, 16, 8),
}

# The most particles one workload group holds: the slot loop keeps (group,
# chunk) accumulators per component, which outgrow the cache beyond this.
# At N = 1e6 (density loss, value and gradient, float64, AMD EPYC 2 cores)
# 64 groups instead of 8 took 1.14 s against 1.24 s in 2D and 9.85 s against
# 10.70 s in 3D; below 131,072 particles the table's groups stand.
MAX_GROUP_SIZE = 16_384


def group_count(n: int, groups: int) -> int:
    """Workload groups of the slot loop for n particles: the layout's
    `groups`, more where a group would hold over `MAX_GROUP_SIZE`, at most n
    (`engine.fold` and `cells.slots_per_particle`). Gathered sums do not
    depend on it (padded slots add exact zeros); scattered parts are added
    in group order (round-off)."""
    return max(1, min(max(int(groups), -(-n // MAX_GROUP_SIZE)), n))


# Groups of a banded list's slot loop: particles outside a band have no work
# and a group costs its largest count times its size, so many small groups
# keep a band's padding small (empty groups cost a loop test).
BAND_GROUPS = 128

BAND_LAYOUTS = {
    1: LAYOUTS[1]._replace(groups=BAND_GROUPS),
    2: Layout(2, 8, 16, BAND_GROUPS),
    3: LAYOUTS[3]._replace(groups=BAND_GROUPS),
}


def layout_for(
    dim: int,
    *,
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int | None = None,
    banded: bool = False,
) -> Layout:
    """`LAYOUTS[dim]` (`BAND_LAYOUTS[dim]` if `banded`) with the given
    fields replaced (None keeps the default); every field must be a positive
    int (`ValueError` naming it)."""
    if dim not in LAYOUTS:
        raise ValueError(f"dim must be one of {sorted(LAYOUTS)}, got {dim}")
    given = {
        "cells_per_reach": cells_per_reach,
        "x_cells_per_reach": x_cells_per_reach,
        "chunk": chunk,
        "groups": groups,
    }
    layout = BAND_LAYOUTS[dim] if banded else LAYOUTS[dim]
    for name, value in given.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int (static), got {value!r}")
        layout = layout._replace(**{name: int(value)})
    return layout
