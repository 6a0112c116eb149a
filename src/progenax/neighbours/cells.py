r"""Cell list with contiguous neighbour runs and an exact, data-sized slot loop.

Particles are binned into cells and sorted by cell id (x fastest), so every
cell, and every run of adjacent cells along x, is one contiguous range of the
sorted arrays. Cells have side at least `reach / cells_per_reach` along y and z
(k) and finer, `reach / x_cells_per_reach`, along x. A particle reads the
$(2k+1)^{d-1}$ rows of cells within k cells of its own along y and z, and in
each row only the run of cells the ball of radius `reach` about it touches
($x \pm \sqrt{\mathrm{reach}^2 - \mathrm{gap}^2}$, gap being the distance to
the row): the fine x cells trim the run close to the ball itself.

**Half shells** (`half=True`, open boundaries): each pair is listed once
instead of twice. A particle reads only the rows whose offset is
lexicographically positive (last axis first: $(o_{d-1}, \dots, o_1) > 0$)
and, in its own row, the particles sorted after it. A pair in rows $o$ apart
is read from the particle whose upper half-shell holds the other (offset
$o$ from one is $-o$ from the other), a pair in one row from the one sorted
first; rows and runs are trimmed to the ball as before, so every pair
closer than the reach is listed exactly once. In 3D with k = 1 a particle
reads 4 rows and half of its own instead of 9: about half the candidates,
for sums over pairs that a pair function weighs once (the mesh potential's
short range).

For periodic boxes every row is stored twice end to end (a candidate index
space of 2N entries), so a run that wraps around the box in x is still one
contiguous range and each particle has exactly one run per row.

The runs of one particle are laid end to end as a virtual list of
`total_i` candidates; slot $s$ of it maps to candidate index

$$ j(s) = s + \sum_r [s \ge c_r]\,\Delta_r, $$

with $c_r$ the start of run $r$ in the virtual list and $\Delta_r$ the jump in
offset between runs $r-1$ and $r$ (compares, no gather).

**No neighbour is ever dropped.** The engine's slot loop (`engine.fold`) walks
the slots in chunks with a `lax.while_loop` whose trip count, $\lceil \max_i
\mathrm{total}_i / \mathrm{chunk}\rceil$ per workload group, is computed
in-graph from the data: there is no capacity to overflow, inside `jit`, `scan`
or `vmap` alike. Padding is the difference between each particle's candidate
count and the largest one in its group, rounded up to a chunk.

The number of cells is bounded statically (`max_cells`, default 4N), so memory
is O(N) whatever the data: if the data spread too far for cells of the ideal
size, cells grow (more candidates per particle, still exact).
"""

from __future__ import annotations

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._mesh import vary_like
from .._sort import small_key_order
from .._types import Array
from .layout import group_count

# Cells slightly larger than reach / k, so that a pair at separation just under
# the reach is never k + 1 cells apart after rounding in floor().
_CELL_SAFETY = 1.0 + 1e-9
# Queries per block when only some particles are queries (`_query_runs`).
_QUERY_BLOCK = 4096
# Classes of loop steps the workload order can count (`_workload_order`), and
# the particles from which it does rather than sorting. The count compiles
# 0.25-0.3 s longer per list in a program (a relaxation's bands: 0.7 s at
# 1e5); from 2^16 particles on it saves a call 1.5 ms or more (2.5 ms at 1e5
# in 2D, a tenth of the density gradient; 35 ms at 1e6), so a loop of a few
# hundred calls (a relaxation, an HMC chain) pays for it.
_WORKLOAD_CLASSES = 16
_COUNTING_MIN_SIZE = 2**16


class CellList(eqx.Module):
    r"""Particles sorted by cell, with each one's candidate runs.

    - `order`: sorted slot -> original particle index, (N,).
    - `positions`: sorted positions, (d, N) (one row per axis).
    - `source`: candidate index -> sorted index, (2N,) for periodic boxes (every
      row stored twice), None for open boundaries (the identity).
    - `self_index`: each particle's own candidate index, (N,).
    - `run_start`, `run_jump`: each particle's runs as its virtual list (see
      the module notes), run-major, (S, N), with S = (2k+1)^(d-1),
      ((2k+1)^(d-1) + 1)/2 in half shells: the slot $c_r$ where run r
      starts and the jump $\Delta_r$ in candidate index there (an unused run
      is empty: it starts where the next one does).
    - `total`: each particle's number of candidates, (N,).
    - `by_workload`: sorted indices ordered by loop steps (`_workload_order`;
      ties in sorted order), so that particles with similar work share a loop.
    - `box`: periodic box lengths (d,), or None for open boundaries.
    """

    order: Array
    positions: Array
    source: Array | None
    self_index: Array
    run_start: Array
    run_jump: Array
    total: Array
    by_workload: Array
    box: Array | None

    @property
    def size(self) -> int:
        return self.order.shape[0]

    @property
    def dim(self) -> int:
        return self.positions.shape[0]

    @property
    def run_begin(self) -> Array:
        """First candidate index of each run, (N, S)."""
        return (self.run_start + jnp.cumsum(self.run_jump, axis=0)).T

    @property
    def run_length(self) -> Array:
        """Number of candidates in each run, (N, S)."""
        ends = jnp.concatenate([self.run_start[1:], self.total[None]], axis=0)
        return (ends - self.run_start).T


def _static_cells_per_axis(n: int, dim: int, k: int, kx: int, max_cells: int | None) -> tuple[int, ...]:
    """Upper bounds on the cells per axis, with about kx/k times more along x."""
    budget = max(4 * n, 1) if max_cells is None else int(max_cells)
    rest = max(int(np.floor((budget * k / kx) ** (1.0 / dim) + 1e-9)), 1)
    along_x = max(budget // rest ** (dim - 1), 1)
    return (along_x,) + (rest,) * (dim - 1)


def _grid(positions: Array, reach: Array, box: Array | None, per_reach: Array, n_max: Array, query: Array | None):
    """Cell side per axis, cells per axis (traced ints) and the lower corner.

    Open boundaries: the grid covers the queries' bounding box widened by the
    reach (all particles when `query` is None); sources outside it are too far
    from every query to matter.
    """
    ideal = reach / per_reach * _CELL_SAFETY
    if box is not None:
        counts = jnp.clip(jnp.floor(box / ideal), 1, n_max).astype(jnp.int32)
        return box / counts, counts, jnp.zeros_like(box)
    if query is None:
        lo = jnp.min(positions, axis=0)
        hi = jnp.max(positions, axis=0)
    else:
        any_query = jnp.any(query)
        inf = jnp.asarray(jnp.inf, positions.dtype)
        lo = jnp.min(jnp.where(query[:, None], positions, inf), axis=0) - reach
        hi = jnp.max(jnp.where(query[:, None], positions, -inf), axis=0) + reach
        lo, hi = jnp.where(any_query, lo, 0.0), jnp.where(any_query, hi, 0.0)
    extent = hi - lo
    side = jnp.maximum(ideal, extent / n_max * _CELL_SAFETY)
    counts = jnp.clip(jnp.floor(extent / side).astype(jnp.int32) + 1, 1, n_max)
    return side, counts, lo


def _row_offsets(dim: int, k: int, half: bool = False) -> list[tuple[int, ...]]:
    """Offsets along axes 1..d-1 of the rows a particle reads; with `half`, the
    own row (all zeros) and those lexicographically positive from the last axis."""
    offsets = list(itertools.product(range(-k, k + 1), repeat=dim - 1))
    if half:
        offsets = [o for o in offsets if o[::-1] >= (0,) * (dim - 1)]
    return offsets


def _offset_is_distinct(offset: int, count: Array, k: int) -> Array:
    """Whether a row offset names a row not already read (periodic grids with
    fewer than 2k + 1 cells along an axis would otherwise read a row twice)."""
    full = count >= 2 * k + 1
    return full | ((offset >= -((count - 1) // 2)) & (offset <= count // 2))


def _gap_to_row(offset: int, frac: Array, side: Array) -> Array:
    """Distance from a particle at fraction `frac` of its cell to the band of
    cells `offset` rows away along one axis."""
    if offset > 0:
        return (offset - frac) * side
    if offset < 0:
        return (-offset - 1 + frac) * side
    return jnp.zeros_like(frac)


def _sort_by_cell(cell: Array, n_cells: int) -> tuple[Array, Array]:
    """Sorted cell ids and the permutation that sorts them.

    XLA's CPU sort of one primitive array is about five times faster than its
    sort of (key, payload) pairs (0.05 s against 0.23 s at N = 1e6), so the
    particle index is packed into the low bits of one integer key when the
    width allows: 64 bits with x64 enabled, 32 bits when n_cells * N fits.
    """
    n = cell.shape[0]
    index = jnp.arange(n, dtype=jnp.int32)
    if jax.config.jax_enable_x64:
        key = jax.lax.sort((cell.astype(jnp.int64) << 32) | index.astype(jnp.int64))
        return (key >> 32).astype(jnp.int32), (key & 0xFFFFFFFF).astype(jnp.int32)
    if (n_cells + 1) * n < 2**31:
        key = jax.lax.sort(cell * n + index)
        return key // n, key % n
    return jax.lax.sort((cell, index), num_keys=1)


def build_cell_list(
    positions: Array,
    reach: Array,
    *,
    box: Array | None = None,
    cells_per_reach: int = 1,
    x_cells_per_reach: int = 4,
    max_cells: int | None = None,
    chunk: int = 16,
    query: Array | None = None,
    query_reach: Array | None = None,
    half: bool = False,
) -> CellList:
    """Sort `positions` (N, d) into cells and list every particle's candidate runs.

    Every pair closer than `reach` (a traced scalar: the largest kernel
    support) is among the candidates, in both directions. `box` is None (open)
    or the periodic lengths (d,). Static knobs: `cells_per_reach` (k: cells of
    side ≥ reach/k along y, z, reading ±k rows), `x_cells_per_reach` (finer x
    cells trim each row's run) and `max_cells` (bound on the number of cells).

    Optional, for grids that serve one band of smoothing lengths: `query`
    (N,) bool selects the particles whose runs are listed (the others get
    none; every particle is still a source), and `query_reach` (N,) ≤ `reach`
    trims each query's runs to its own ball. Every source closer than its
    query's reach is then a candidate of that query.

    `half` (static, open boundaries only): half shells (see the module
    notes), each pair closer than the reach listed once, from one of its two
    particles. With `query`, that holds for the pairs of two queries; a
    source that is no query is read only by the queries in whose upper
    half-shell it lies (give such sources no weight).
    """
    n, dim = positions.shape
    if half and box is not None:
        raise ValueError("half shells (half=True) need open boundaries (box=None)")
    k, kx = int(cells_per_reach), int(x_cells_per_reach)
    n_max = _static_cells_per_axis(n, dim, k, kx, max_cells)
    per_reach = jnp.asarray((kx,) + (k,) * (dim - 1), positions.dtype)
    periodic = box is not None
    side, counts, lo = _grid(positions, reach, box, per_reach, jnp.asarray(n_max), query)
    raw = jnp.floor((positions - lo) / side).astype(jnp.int32)
    coords = jnp.mod(raw, counts) if periodic else jnp.clip(raw, 0, counts - 1)
    strides = jnp.concatenate([jnp.ones(1, jnp.int32), jnp.cumprod(counts)[:-1]])
    cell = jnp.sum(coords * strides, axis=1)
    n_cells = int(np.prod(n_max))
    if query is not None and not periodic:
        # Sources off the (query-sized) grid go to a void cell past the last
        # row: sorted to the end, never inside a run.
        on_grid = jnp.all((raw >= 0) & (raw < counts), axis=1)
        cell = jnp.where(on_grid, cell, n_cells)

    sorted_cell, order = _sort_by_cell(cell, n_cells + 1)
    sorted_positions = positions[order].T
    sorted_coords = coords[order]
    # Fraction of its cell each particle sits at, along each axis, in [0, 1].
    wrapped = sorted_positions.T if box is None else jnp.mod(sorted_positions.T, box)
    frac = jnp.clip((wrapped - lo) / side - sorted_coords, 0.0, 1.0)
    # cell_start[c] = number of particles in cells < c.
    per_cell = jnp.zeros(n_cells + 2, jnp.int32).at[sorted_cell + 1].add(1, indices_are_sorted=True)
    cell_start = jnp.cumsum(per_cell, dtype=jnp.int32)

    rows = _RowIndex(cell_start, counts[0], periodic)
    own_reach = reach if query_reach is None else query_reach[order]
    sorted_index = jnp.arange(n, dtype=jnp.int32)
    if query is None:
        after = sorted_index if half else None
        begin, length = _candidate_runs(sorted_coords, frac, side, own_reach, counts, strides, rows, k, after)
    else:
        own_reach = jnp.broadcast_to(own_reach, (n,))
        begin, length = _query_runs(query[order], sorted_coords, frac, side, own_reach, counts, strides, rows, k, half)
    own_row = sorted_cell // counts[0]
    self_index = rows.start(own_row) + sorted_index if periodic else sorted_index
    source = None
    if periodic:
        # Row r of the doubled layout holds its particles twice: at
        # R_r + i (first copy) and R_r + len_r + i (second copy).
        second = self_index + rows.length(own_row)
        source = jnp.zeros(2 * n, jnp.int32).at[self_index].set(sorted_index, unique_indices=True)
        source = source.at[second].set(sorted_index, unique_indices=True)
    run_start, run_jump, total = _virtual_list(begin, length)
    # At most 2N / chunk + 1 steps: the doubled periodic layout.
    by_workload = _workload_order(-(-total // chunk), 2 * n // chunk + 2)
    return CellList(order, sorted_positions, source, self_index, run_start, run_jump, total, by_workload, box)


def _workload_order(steps: Array, max_steps: int) -> Array:
    """Sorted indices ordered by loop steps (each in [0, `max_steps`)), ties in
    sorted order, so memory locality is kept within a workload group.

    XLA's sort is single-threaded. When the positive steps span at most
    `_WORKLOAD_CLASSES - 1` values, as they do for uniform or adaptive
    smoothing lengths, they are counted instead (`small_key_order`; with
    the test of the span, 23 ms against the sort's 58 ms at N = 1e6, 0.3
    against 2.7 ms at 1e5), with the particles of no candidate (steps 0:
    a band's non-queries) in a class of their own: the same order.
    Otherwise, and below `_COUNTING_MIN_SIZE` particles, it is the sort.
    """

    def by_sort():
        return _sort_by_cell(steps, max_steps)[1]

    if steps.shape[0] < _COUNTING_MIN_SIZE:
        return by_sort()
    top = jnp.max(steps)
    low = jnp.min(jnp.where(steps > 0, steps, top))
    classes = jnp.where(steps > 0, steps - low + 1, 0)
    return jax.lax.cond(top - low < _WORKLOAD_CLASSES - 1, lambda: small_key_order(classes, _WORKLOAD_CLASSES), by_sort)


def _virtual_list(begin: Array, length: Array) -> tuple[Array, Array, Array]:
    """Runs (first candidate index, length; (S, N) each) laid end to end:
    the slot where each run starts, the jump in candidate index there
    ((S, N) each) and the candidates in all (N,). Done once per build, run by
    run (S is static), so the slot loop of every pair sum reads them ready."""
    # Kept in memory first: fused into the running sums below, each run's
    # bounds (gathers of `cell_start`) would be recomputed by every later run.
    begin, length = jax.lax.optimization_barrier((begin, length))
    starts, jumps = [], []
    start = jnp.zeros_like(length[0])
    offset = jnp.zeros_like(begin[0])
    for run_begin, run_length in zip(begin, length):
        starts.append(start)
        jumps.append(run_begin - start - offset)
        offset = run_begin - start
        start = start + run_length
    return jnp.stack(starts), jnp.stack(jumps), start


class _RowIndex:
    """Candidate indices of cells within rows of the grid.

    Open boundaries: cell (row r, column c) starts at cell_start[r nx + c].
    Periodic: each row is doubled; column c in [0, 2 nx] of row r starts at
    R_r + cell_start[r nx + c] for c <= nx and at R_r + len_r +
    cell_start[r nx + c - nx] beyond, with R_r the row's first sorted index
    and len_r its number of particles.
    """

    def __init__(self, cell_start: Array, nx: Array, periodic: bool):
        self.cell_start, self.nx, self.periodic = cell_start, nx, periodic

    def start(self, row: Array) -> Array:
        return self.cell_start[row * self.nx]

    def length(self, row: Array) -> Array:
        return self.cell_start[(row + 1) * self.nx] - self.start(row)

    def span(self, row: Array, first: Array, last: Array) -> tuple[Array, Array]:
        """Candidate index range [begin, end) of columns first..last of a row."""
        base = row * self.nx
        if not self.periodic:
            return self.cell_start[base + first], self.cell_start[base + last + 1]
        row_start = self.cell_start[base]
        row_length = self.cell_start[base + self.nx] - row_start

        def column_start(column):
            first_copy = column <= self.nx
            within = self.cell_start[base + jnp.where(first_copy, column, column - self.nx)]
            return row_start + within + jnp.where(first_copy, 0, row_length)

        return column_start(first), column_start(last + 1)


def _candidate_runs(coords, frac, side, reach, counts, strides, rows: _RowIndex, k, after=None):
    """First candidate index and length of each particle's run in each row,
    run-major: (S, N) each.

    Rows farther than `reach` from the particle are empty, and each row's run
    covers only the cells that the ball of radius `reach` about the particle
    reaches in that row: x ± sqrt(reach² - gap²), gap being the distance to the
    row band along y and z. `after`: the particles' sorted indices, for half
    shells (open boundaries): the upper rows only, and the own row's run
    from the next particle on.
    """
    n, dim = coords.shape
    cx, nx = coords[:, 0], counts[0]
    begins, lengths = [], []
    for offsets in _row_offsets(dim, k, half=after is not None):
        row = jnp.zeros(n, jnp.int32)
        valid = jnp.ones(n, bool)
        gap2 = jnp.zeros(n, side.dtype)
        for axis, off in enumerate(offsets, start=1):
            r = coords[:, axis] + off
            if rows.periodic:
                valid &= _offset_is_distinct(off, counts[axis], k)
                r = jnp.mod(r, counts[axis])
                # On a grid too small to tell images apart, do not trim.
                trim = counts[axis] >= 2 * k + 1
            else:
                valid &= (r >= 0) & (r < counts[axis])
                trim = True
            gap = _gap_to_row(off, frac[:, axis], side[axis])
            gap2 = gap2 + jnp.where(trim, gap * gap, 0.0)
            row = row + jnp.clip(r, 0, counts[axis] - 1) * (strides[axis] // nx)
        valid &= gap2 < reach * reach
        half_width = jnp.sqrt(jnp.maximum(reach * reach - gap2, 0.0)) / side[0]  # reach: scalar or (N,)
        lo = cx + jnp.floor(frac[:, 0] - half_width).astype(jnp.int32)
        hi = cx + jnp.floor(frac[:, 0] + half_width).astype(jnp.int32)
        if rows.periodic:
            width = hi - lo + 1
            full_row = width >= nx
            lo = jnp.where(full_row, 0, jnp.where(lo < 0, lo + nx, lo))
            hi = jnp.where(full_row, nx - 1, lo + width - 1)
        else:
            lo, hi = jnp.maximum(lo, 0), jnp.minimum(hi, nx - 1)
        begin, end = rows.span(row, lo, hi)
        if after is not None and not any(offsets):
            begin = after + 1
            end = jnp.maximum(end, begin)
        begins.append(begin)
        lengths.append(jnp.where(valid, end - begin, 0))
    return jnp.stack(begins), jnp.stack(lengths)


def _query_runs(is_query, coords, frac, side, reach, counts, strides, rows: _RowIndex, k, half=False):
    """`_candidate_runs` for the queries only (sorted order; others get empty runs;
    `half`: half shells).

    A band of a banded list often holds a small fraction of the particles, and
    listing runs is most of a build (25 rows per particle in 3D), so the
    queries are gathered in blocks of `_QUERY_BLOCK` and only those blocks are
    computed: a loop of ceil(queries / block) trips, decided in-graph.
    """
    n = is_query.shape[0]
    block = min(_QUERY_BLOCK, n)
    # Sorted indices of the queries, then n (out of range: dropped) as padding.
    index = jnp.nonzero(is_query, size=n + block, fill_value=n)[0].astype(jnp.int32)
    n_runs = len(_row_offsets(coords.shape[1], k, half))

    def one_block(b, runs):
        ids = jax.lax.dynamic_slice(index, (b * block,), (block,))
        at = jnp.minimum(ids, n - 1)
        after = at if half else None
        begin, length = _candidate_runs(coords[at], frac[at], side, reach[at], counts, strides, rows, k, after)
        return tuple(r.at[:, ids].set(v, mode="drop", unique_indices=True) for r, v in zip(runs, (begin, length)))

    empty = vary_like(jnp.zeros((n_runs, n), jnp.int32), coords, reach)
    trips = (jnp.sum(is_query, dtype=jnp.int32) + block - 1) // block
    return jax.lax.fori_loop(0, trips, one_block, (empty, empty))


def candidate_counts(cells: CellList) -> Array:
    """Number of candidates (pairs examined, self included) of each particle, sorted order."""
    return cells.total


def slots_per_particle(cells: CellList, chunk: int, groups: int = 8) -> Array:
    """Mean pair slots `engine.fold` evaluates per particle (padding included)."""
    n = cells.size
    groups = group_count(n, groups)
    counts = candidate_counts(cells)[cells.by_workload]
    size = -(-n // groups)
    bounds = [min(g * size, n) for g in range(groups + 1)]
    # The last groups are empty when `groups` does not divide n (as in `engine.fold`).
    pairs = [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    # In floats: a clustered set's slots overflow int32 (2e5 stars of a Plummer core).
    steps = [(-(-jnp.max(counts[lo:hi]) // chunk)).astype(jnp.result_type(float)) for lo, hi in pairs]
    slots = [(hi - lo) * chunk * s for (lo, hi), s in zip(pairs, steps)]
    return sum(slots) / n
