r"""Fractal star clusters: the box fractal of Goodwin & Whitworth (2004).

**The fractal.** A cube $[-1, 1]^3$ holds one parent. Each generation splits
every cell into $2^3$ children at the centres of its sub-cubes (offsets
$\pm 2^{-g}$ per axis at generation $g$); a child survives with probability
$2^{D - 3}$, so on average $2^D$ of the 8 survive and the surviving leaves after
$G$ generations trace a set of fractal dimension $D$ ($D = 3$ fills the cube).
Each child inherits its parent's velocity plus a Gaussian random component whose
size halves each generation ($\sigma_g = 2^{-g}$, root $\sigma_0 = 1$), which
gives a velocity structure like GW04's: nearby stars move coherently. Leaves are
jittered uniformly inside their last cell, and only leaves whose cell centre
lies in the unit sphere are taken while there are enough of them (GW04 cut a
sphere from the cube).

**Fixed shapes, level by level, exactly n stars, no rejection loop.** Only the
living cells of the current generation are kept, packed at the front of an
array of $T = 2n$ slots (the cells of a generation share one half-side). A
generation is applied only while it leaves between 1 and $T - 1$ living cells,
so its children always fit. It divides the live cells a chunk of 4096 at a
time (a `while_loop` over ceil(live / 4096) chunks, so the work follows the
live count and the early generations of a sparse fractal cost almost
nothing) and packs the survivors with a prefix sum and a 1D scatter, never a
sort. The first generation that would reach $T$ living cells (or leave none)
is the last: its children are drawn once more, after the loop, from the same
random bits, and the n stars are the top n of (surviving child with its cell
centre inside the unit sphere, surviving child outside, living parent inside,
living parent outside), random within each class, chosen by a 32-step bitwise
threshold search on 32-bit keys (linear time, no sort; ties at the threshold,
about one in $2^{29}$ keys, go in slot order). At least $T \ge 2n$ children
survive in the usual case; should fewer than n candidates exist (a lineage
dying out, or the $G = \lceil \log_2(16n) / 1.6 \rceil$ generations running out
at tiny n), the rest are more stars in the last living cells, jittered over
the whole cell, so exactly n stars come back for any n and key. Random
thinning of a growing tree would clump it (like a critical branching
process): living cells are never thinned between generations, only the final
leaves are sampled. Nothing differentiable enters the loops (D is behind
`stop_gradient`), so the data-sized `while_loop` is allowed here.

**Random numbers.** `jax.random` gives one two-word seed per generation (and
one for the selection); inside, every draw is a counter-based 32-bit hash
(lowbias32, applied twice) of the slot index under that seed, so a draw of
any subset of slots costs only that subset and reproduces the same bits (the
last generation's redraw), and it compiles to a few integer operations
(threefry costs ~0.7 s of compile per call site and ~60 ns a number on this
CPU). Velocity noise: Box-Muller in float32 arithmetic from 24-bit uniforms
(tails to 6.6 sigma).

**On a device mesh** of D devices (in this paragraph D counts devices;
`box_fractal_share`, inside `jax.shard_map`): every
device grows the top of the tree alike, from the same seeds, on an array of
`TOP_CELLS_PER_DEVICE` D slots, until the next generation would overflow it
(or the growth stops); device d then takes the living cells (d c / D) to
((d + 1) c / D) - 1 of its c, in slot order, and grows them on its own array
of twice its share of T (T/2 on four devices). Slots keep their numbers in
the whole generation (device d's first is the sum of the counts before it,
an `all_gather` of D counts), so every hash draws the bits it draws on one
device, and a generation is applied or stops by the global counts (`psum`):
the tree is the one-device tree, split. The threshold search counts the
keys of all devices (`psum`), the chosen ones are ranked in slot order (a
prefix sum of the devices' counts, then a binary search for a rank), and
the buffer of device e's n / D output rows passes once around the ring
(D - 1 `ppermute` steps of n / D rows), each device filling the rows whose
candidate (or repeated living cell) it holds: the stars are `box_fractal`'s,
bit for bit, n / D to a device, and no device holds more than
O(n / D + `TOP_CELLS_PER_DEVICE` D) rows. Unless a device's part overflows
its array: then the growth stops there on all devices (the stars come from
a coarser generation, with fewer candidates: still exactly n / D rows of
distinct stars, but not the one-device cluster). That needs one device to
hold twice the mean share of a generation; the share is the sum of the
subtrees of its K >= `TOP_CELLS_PER_DEVICE` / 8 (in practice 170 to 340 on
eight devices) cells, each of relative spread ~0.55 at fractal dimension 1.6, so its own
relative spread is ~0.55 / sqrt(K) < 0.05 (measured over 30 keys on eight
devices at n = 2e4 and 1e5, dimensions 1.6 and 2.6: the largest device held 1.07
times the mean): 20 standard deviations, never seen.

**Radial remap.** `remap_to_plummer` (used by `progenax.fractal_builder`) keeps the angular positions and the radial
order of the fractal and replaces each radius with that of a Plummer sphere at
the same enclosed mass: the stars are sorted once by radius about the fractal's
unweighted centroid, the mid-point cumulative mass fraction $\mu_k$ of the k-th
is computed, and its new radius is $r_k = a (\mu_k^{-2/3} - 1)^{-1/2}$ with
$a = r_h / 1.305$. The order depends only on the key and D (not on the masses,
so not on alpha), so the remap is continuous in r_h and alpha: the sort only
decides which star gets which target radius, and the gradient flows through
the target radii (to r_h, and to alpha via the masses in $\mu_k$).
`remap_to_plummer_share` does the same for a share of a set over a device
mesh: the centroid and centres of mass by `psum`, each star's enclosed mass
from the whole set (`progenax.diagnostics.ring.ring_mass_inside`).

**Differentiability of D (partial).** D enters only through the survival draws
$u < 2^{D-3}$, which are piecewise constant in D: a small change of D flips no
draw, or flips one and moves a whole subtree. The pathwise derivative is
therefore zero (the threshold is behind `stop_gradient`, so it is exactly 0, not
NaN); statistics of the cluster change with D only in expectation over keys.
To fit D, use finite differences of key-averaged statistics, or simulation-based
inference. r_h, alpha and Q are fully differentiable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._mesh import check_divides, ring_permutation, vary_like
from .._sort import float_order, largest_passing
from .._types import Array, ArrayLike, Key
from ..diagnostics.ring import ring_mass_inside
from ..profiles.plummer import plummer_sample_radii, plummer_scale_radius
from ..validation import check_count, check_range, check_scalar

D_MIN, D_MAX = 1.6, 3.0

_OFFSETS = np.array([[sx, sy, sz] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0) for sz in (-1.0, 1.0)])
_CHUNK = 4096  # parent cells per step of a generation


def fractal_generations(n: int) -> int:
    """Most generations G for n stars (static): enough to grow `2 n` survivors at
    D = 1.6 (2^(1.6 G) >= 16 n), at least 2."""
    return max(2, math.ceil(math.log2(16 * n) / D_MIN))


def _mix(x):
    """lowbias32 (C. Wellons): a 32-bit integer hash with low avalanche bias."""
    x = (x ^ (x >> 16)) * jnp.uint32(0x7FEB352D)
    x = (x ^ (x >> 15)) * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _bits(seed, stream: int, counter):
    """Counter-based uint32 bits of `stream` under the two-word `seed`, one per
    entry of the uint32 array `counter` (a slot index): any subset of a draw
    costs only that subset, and a draw of any shape is a prefix of a larger
    one. A few integer operations to compile and run, where threefry costs
    ~0.7 s of compile per call site and ~60 ns a number on this CPU."""
    a = _mix(seed[0] ^ jnp.uint32((0x9E3779B9 * (stream + 1)) & 0xFFFFFFFF))
    return _mix(_mix(counter ^ a) ^ seed[1])


def _counter(shape):
    return jax.lax.broadcasted_iota(jnp.uint32, (math.prod(shape),), 0).reshape(shape)


def _uniform(seed, stream: int, counter, dtype):
    """Uniform in (0, 1) from 32 random bits."""
    return (_bits(seed, stream, counter).astype(dtype) + 0.5) * 2.0**-32


def _normal(seed, stream: int, counter, dtype):
    """Standard normal by Box-Muller (streams `stream`, `stream + 1`), in
    float32 arithmetic (float64 logarithms and cosines cost ~100 ns each on
    this CPU; the noise needs no more than 24 bits) and tails to 6.6 sigma."""
    u1 = (_bits(seed, stream, counter) >> 8).astype(jnp.float32) * 2.0**-24 + 2.0**-25
    u2 = (_bits(seed, stream + 1, counter) >> 8).astype(jnp.float32) * 2.0**-24
    return (jnp.sqrt(-2.0 * jnp.log(u1)) * jnp.cos(2.0 * jnp.pi * u2)).astype(dtype)


def _survivors(parents, rows, count, half, seed, threshold):
    """Centres (m, 8, 3), survival (m, 8) and bits (whose top 24 decided it;
    the rest order the survivors at random) of the children of the cells
    `parents` (m, 6) in slots `rows`, those below `count` live."""
    bits = _bits(seed, 0, 8 * rows.astype(jnp.uint32)[:, None] + jnp.arange(8, dtype=jnp.uint32))
    alive = ((bits >> 8) < threshold) & (rows < count)[:, None]
    offsets = (0.5 * half) * jnp.asarray(_OFFSETS, parents.dtype)
    return parents[:, None, :3] + offsets[None], alive, bits


def _noisy_velocity(parents, rows, half, seed):
    """Velocities of the cells `parents` in slots `rows` with their own noise
    (sigma = their half-side)."""
    counter = 3 * rows.astype(jnp.uint32)[:, None] + jnp.arange(3, dtype=jnp.uint32)
    return parents[:, 3:] + half * _normal(seed, 1, counter, parents.dtype)


def _pack(mask):
    """Destinations of the True entries of a (rows, k) mask, packed in row-major
    order (a prefix sum over rows, a constant triangular product within), and
    their count."""
    per_row = jnp.sum(mask, axis=1, dtype=jnp.int32)
    start = jnp.cumsum(per_row) - per_row
    k = mask.shape[1]
    within = (mask.astype(jnp.float32) @ jnp.asarray(np.triu(np.ones((k, k))), jnp.float32)).astype(jnp.int32)
    return start[:, None] + within - 1, jnp.sum(per_row, dtype=jnp.int32)


def _generation(cells, count, half, seed, threshold, chunk, first=0):
    """One generation: the live cells (the first `count` slots, whose slot
    numbers in the whole tree start at `first`) divided, `chunk` parents at a
    time (so the work follows the live count), the surviving children packed
    at the front of a new array. Returns it and their number (beyond the
    array's end the rows are wrong: then the generation is not applied).
    Packing: a 1D scatter of child indices, then gathers (a scatter of whole
    rows costs ~100 ns a row on this CPU, a 1D one ~5 ns)."""
    slots = cells.shape[0]
    offsets = (0.5 * half) * jnp.asarray(_OFFSETS, cells.dtype)

    def step(state):
        i, offset, out = state
        parents = jax.lax.dynamic_slice_in_dim(cells, i * chunk, chunk)
        rows = first + i * chunk + jnp.arange(chunk)
        _, alive, _ = _survivors(parents, rows, first + count, half, seed, threshold)
        dest, k = _pack(alive)
        dest = jnp.where(alive, dest, 8 * chunk).reshape(-1)
        source = jnp.zeros(8 * chunk, jnp.int32).at[dest].set(jnp.arange(8 * chunk, dtype=jnp.int32), mode="drop")
        row, col = source // 8, source % 8
        vel = _noisy_velocity(parents, rows, half, seed)
        block = jnp.concatenate([parents[row, :3] + offsets[col], vel[row]], axis=1)
        block = jax.lax.optimization_barrier(block)  # kept out of the update: 0.38 -> 0.21 s for 10 chunks at 2e6 slots
        return i + 1, offset + k, jax.lax.dynamic_update_slice_in_dim(out, block, offset, 0)

    steps = (count + chunk - 1) // chunk
    start = (jnp.int32(0), jnp.int32(0), jnp.zeros((slots + 8 * chunk, 6), cells.dtype))
    _, total, out = jax.lax.while_loop(lambda s: s[0] < steps, step, vary_like(start, cells, count))
    return out[:slots], total


class _Reductions(NamedTuple):
    """How the devices holding parts of the tree combine a per-device int:
    `total` (sum), `most` (maximum), `before` (sum over the devices before
    this one, which numbers the slots of the whole tree)."""

    total: Callable
    most: Callable
    before: Callable


_ONE_DEVICE = _Reductions(lambda x: x, lambda x: x, jnp.zeros_like)


def _mesh_reductions(axis_name: str, n_devices: int) -> _Reductions:
    """`_Reductions` over the mesh axis `axis_name` (inside `shard_map`)."""

    def before(x):
        every = jax.lax.all_gather(x, axis_name)
        return jnp.sum(jnp.where(jnp.arange(n_devices) < jax.lax.axis_index(axis_name), every, 0), dtype=x.dtype)

    return _Reductions(lambda x: jax.lax.psum(x, axis_name), lambda x: jax.lax.pmax(x, axis_name), before)


class _Tree(NamedTuple):
    """The living cells of one generation (or this device's part of them)."""

    cells: Array  # (slots, 6): centres and velocities, the live ones first
    count: Array  # live cells in this array
    first: Array  # slot number of cells[0] in the whole generation
    half: Array  # their half-side
    next: Array  # the generation to apply next (the stopping one once `stopped`)
    stopped: Array  # growth is over
    full: Array  # generation `next` would leave more than `slots` cells here (but fewer than T in all)


def _root(slots: int, dtype) -> _Tree:
    """The parent cell (its own noise is added when it divides)."""
    f = jnp.asarray(False)
    return _Tree(jnp.zeros((slots, 6), dtype), jnp.int32(1), jnp.int32(0), jnp.asarray(1.0, dtype), jnp.int32(0), f, f)


def _whole_chunks(rows: int) -> int:
    """`rows` rounded up to whole chunks of `min(_CHUNK, rows)`."""
    chunk = min(_CHUNK, rows)
    return -(-rows // chunk) * chunk


def _grow(tree: _Tree, seeds, threshold, target: int, reduce: _Reductions) -> _Tree:
    """Apply generations `tree.next`, `tree.next + 1`, ... (the last seed is the
    selection's): each only while it leaves between 1 and `target - 1` living
    cells in all (else `stopped`) and at most `slots - 1` on every device
    (else `full`)."""
    slots = tree.cells.shape[0]
    chunk = min(_CHUNK, slots)

    def level(tree, xs):
        seed, g = xs
        active = ~tree.stopped & ~tree.full & (g == tree.next)
        count = jnp.where(active, tree.count, 0)
        new, alive = _generation(tree.cells, count, tree.half, seed, threshold, chunk, tree.first)
        total = reduce.total(alive)
        fits = (total > 0) & (total < target)
        accept = active & fits & (reduce.most(alive) < slots)
        grown = _Tree(new, alive, reduce.before(alive), 0.5 * tree.half, g + 1, tree.stopped, tree.full)
        tree = jax.tree_util.tree_map(lambda a, b: jnp.where(accept, a, b), grown, tree)
        return tree._replace(stopped=tree.stopped | (active & ~fits), full=tree.full | (active & fits & ~accept)), None

    xs = (seeds[:-1], jnp.arange(seeds.shape[0] - 1, dtype=jnp.int32))
    return jax.lax.scan(level, tree, xs)[0]


def _threshold(keys, n, total=_ONE_DEVICE.total):
    """The largest t with at least n keys >= t (uint32; 0 when fewer than n are
    positive), the keys counted over the devices by `total`: a 32-step bitwise
    search, linear time, no sort."""

    return largest_passing(lambda t: total(jnp.sum(keys >= t)) >= n, 32, jnp.uint32(0))


def _place(centres, col, half, seed, counter):
    """Star positions: candidate `col` (0-7 a child of the cell at `centres`,
    8 the cell itself) jittered uniformly inside its cube by draws numbered
    `counter`."""
    offsets = jnp.asarray(np.vstack([_OFFSETS, np.zeros((1, 3))]), centres.dtype)[col]
    size = jnp.where(col < 8, 0.5 * half, half)[..., None]
    jitter = 2.0 * _uniform(seed, 1, 3 * counter[..., None] + jnp.arange(3, dtype=jnp.uint32), centres.dtype) - 1.0
    return centres + (0.5 * half) * offsets + size * jitter


def _candidate_keys(seed, tree: _Tree, final_seed, threshold):
    """Selection keys (slots, 9) of the candidates: (surviving child of the
    stopping generation whose jittered position is inside the unit sphere,
    outside, living cell inside, outside) in the top 3 bits, 29 random bits
    below; 0 for no candidate. Candidate (row, col) is number 9 row + col,
    rows numbered in the whole tree."""
    cells, slots = tree.cells, tree.cells.shape[0]
    rows = tree.first + jnp.arange(slots)
    _, alive, bits = _survivors(cells, rows, tree.first + tree.count, tree.half, final_seed, threshold)
    number = (9 * rows[:, None] + jnp.arange(9)).astype(jnp.uint32)
    inside = jnp.sum(_place(cells[:, None, :3], jnp.arange(9), tree.half, seed, number) ** 2, axis=-1) <= 1.0
    live = jnp.concatenate([tree.stopped & alive, (jnp.arange(slots) < tree.count)[:, None]], axis=1)
    classes = jnp.where(live, 1 + inside + jnp.where(jnp.arange(9) < 8, 2, 0), 0).astype(jnp.uint32)
    noise = jnp.concatenate([bits, _bits(seed, 0, rows.astype(jnp.uint32)[:, None])], axis=1)
    return jnp.where(classes > 0, (classes << 29) | (noise >> 3), 0)


def _stars(parents, number, slot, taken, half, seed, final_seed, one_device_slots: int):
    """Stars in output slots `slot`: candidate `number` (9 row + col) of the
    cells `parents` (their rows); a star past the `taken` chosen ones repeats
    a living cell with fresh jitter."""
    row, col = number // 9, number % 9
    counter = jnp.where(slot < taken, number, 9 * one_device_slots + slot).astype(jnp.uint32)
    positions = _place(parents[:, :3], col, half, seed, counter)
    noise = 3 * slot.astype(jnp.uint32)[:, None] + jnp.arange(3, dtype=jnp.uint32)
    own = (0.5 * half) * _normal(seed, 2, noise, parents.dtype)
    return positions, _noisy_velocity(parents, row, half, final_seed) + own


def _select(seeds, tree: _Tree, threshold, n):
    """The n stars: the top n candidates (`_candidate_keys`), random within a
    class; then repeats in the living cells. Ties at the threshold (keys are
    29 random bits: about one in 2^29) go in slot order."""
    seed, final_seed = seeds[-1], seeds[jnp.where(tree.stopped, tree.next, 0)]
    target = tree.cells.shape[0]
    keys = _candidate_keys(seed, tree, final_seed, threshold)
    chosen = (keys >= _threshold(keys, n)) & (keys > 0)
    dest, taken = _pack(chosen)
    flat = jnp.where(chosen, dest, n).reshape(-1)
    source = jnp.zeros(n, jnp.int32).at[flat].set(jnp.arange(9 * target, dtype=jnp.int32), mode="drop")
    slot = jnp.arange(n)
    taken = jnp.minimum(taken, n)
    again = 9 * ((slot - taken) % jnp.maximum(tree.count, 1)) + 8  # a living cell again
    source = jnp.where(slot < taken, source, again)
    return _stars(tree.cells[source // 9], source, slot, taken, tree.half, seed, final_seed, target)


def _settings(key, n: int, D, dtype):
    """dtype, T = 2n living cells at most, the survival threshold on 24 bits,
    and the seeds (one a generation, the selection's last)."""
    dtype = dtype or jnp.result_type(float)
    survival = jax.lax.stop_gradient(2.0 ** (jnp.asarray(D, dtype) - 3.0))
    threshold = jnp.round(survival * 2.0**24).astype(jnp.uint32)  # survive: top 24 bits below it
    seeds = jax.random.bits(key, (fractal_generations(n) + 1, 2), jnp.uint32)
    return dtype, max(2 * n, 8), threshold, seeds


def box_fractal(key: Key, n: int, D: ArrayLike, *, dtype=None) -> tuple[Array, Array]:
    """n positions (in the unit sphere while enough leaves lie there) and velocities of a GW04 box fractal.

    See the module docstring. Positions are in units of the cube's half-side,
    velocities in units of the root dispersion. Piecewise constant in D (no
    gradient, see the module docstring). `n` >= 1 (static); D a scalar in
    [`D_MIN`, `D_MAX`] = [1.6, 3] (the generations are sized for D >= 1.6;
    `ValueError` otherwise, at run time under `jit`).

    **Returns:** `(positions, velocities)`, each (n, 3).
    """
    n = check_count("n", n)
    check_scalar("D", D)
    D = check_range("D", D, lower=D_MIN, upper=D_MAX, lower_inclusive=True, upper_inclusive=True)
    dtype, target, threshold, seeds = _settings(key, n, D, dtype)
    tree = _grow(_root(_whole_chunks(target), dtype), seeds, threshold, target, _ONE_DEVICE)
    return _select(seeds, tree, threshold, n)


def _split(top: _Tree, slots: int, n_devices: int, d) -> _Tree:
    """Device d's part of the replicated `top`: its living cells (d c / D) to
    ((d + 1) c / D) in slot order, in an array of `slots`."""
    lo, hi = d * top.count // n_devices, (d + 1) * top.count // n_devices
    most = -(-top.cells.shape[0] // n_devices)
    part = jax.lax.dynamic_slice_in_dim(jnp.pad(top.cells, ((0, most), (0, 0))), lo, most)
    cells = jnp.zeros((slots, 6), top.cells.dtype).at[:most].set(part)
    return top._replace(cells=cells, count=hi - lo, first=lo, full=jnp.asarray(False))


def _route(fill, rows: int, dtype, axis_name: str, n_devices: int):
    """Every device's `rows` output rows, each filled by the device that
    holds its source: the buffer of device e's rows starts on e + 1, is
    filled there (`fill(buffers, e)`) and passed on around the ring, D - 1
    `ppermute` steps, and e fills its own part last."""
    d = jax.lax.axis_index(axis_name)
    ring = ring_permutation(n_devices, 1)  # each device's buffer moves on to the next

    def visit(buffers, j):
        return jax.lax.ppermute(fill(buffers, (d - 1 - j) % n_devices), axis_name, ring), None

    start = vary_like((jnp.zeros((rows, 6), dtype), jnp.zeros(rows, jnp.int32)), d)
    buffers, _ = jax.lax.scan(visit, start, jnp.arange(n_devices - 1))
    return fill(buffers, d)


def _select_share(seeds, tree: _Tree, threshold, n: int, axis_name: str, n_devices: int, one_device_slots: int):
    """`_select` over the mesh: the threshold counts every device's keys, the
    chosen candidates are ranked in slot order of the whole tree (a prefix
    sum over the devices), and device d receives ranks d n/D to
    (d + 1) n/D - 1 (`_route`): the stars, bit for bit, of one device's
    `_select` of the same tree."""
    reduce = _mesh_reductions(axis_name, n_devices)
    seed, final_seed = seeds[-1], seeds[jnp.where(tree.stopped, tree.next, 0)]
    keys = _candidate_keys(seed, tree, final_seed, threshold)
    chosen = (keys >= _threshold(keys, n, reduce.total)) & (keys > 0)
    per_row = jnp.sum(chosen, axis=1, dtype=jnp.int32)
    ends = jnp.cumsum(per_row)  # chosen in rows up to each
    taken = jnp.minimum(reduce.total(ends[-1]), n)
    before, count = reduce.before(ends[-1]), jnp.maximum(reduce.total(tree.count), 1)
    rows = n // n_devices

    def fill(buffers, e):
        slot = e * rows + jnp.arange(rows, dtype=jnp.int32)
        rank = slot - before  # among this device's chosen
        own_chosen = (slot < taken) & (rank >= 0) & (rank < ends[-1])
        row = jnp.minimum(jnp.searchsorted(ends, rank, side="right"), tree.cells.shape[0] - 1)
        col = jnp.argmax(jnp.cumsum(chosen[row], axis=1) > (rank - ends[row] + per_row[row])[:, None], axis=1)
        again = (slot - taken) % count - tree.first  # a living cell again
        own_again = (slot >= taken) & (again >= 0) & (again < tree.count)
        row, col = jnp.where(own_chosen, row, again), jnp.where(own_chosen, col, 8)
        mine = own_chosen | own_again
        parents, number = buffers
        row = jnp.where(mine, row, 0)
        return (
            jnp.where(mine[:, None], tree.cells[row], parents),
            jnp.where(mine, 9 * (tree.first + row) + col, number).astype(jnp.int32),
        )

    parents, number = _route(fill, rows, tree.cells.dtype, axis_name, n_devices)
    slot = jax.lax.axis_index(axis_name) * rows + jnp.arange(rows, dtype=jnp.int32)
    return _stars(parents, number, slot, taken, tree.half, seed, final_seed, one_device_slots)


TOP_CELLS_PER_DEVICE = 1024
"""`box_fractal_share`: the replicated top of the tree grows to at most this many living cells per device."""


def _device_slots(target: int, n_devices: int) -> int:
    """Slots of a device's part of the tree: twice its share of T (T itself
    on one or two devices, where no part can overflow), whole chunks, and
    room for its cells of the top."""
    most = -(-_whole_chunks(min(target, TOP_CELLS_PER_DEVICE * n_devices)) // n_devices)
    return _whole_chunks(max(min(target, -(-2 * target // n_devices)), most))


def box_fractal_share(
    key: Key, n: int, D: ArrayLike, axis_name: str, n_devices: int, *, dtype=None
) -> tuple[Array, Array]:
    """This device's rows of `box_fractal(key, n, D)` (n / `n_devices`), inside `jax.shard_map` over `axis_name`.

    Every device holds O(n / `n_devices`) rows (see the module docstring, "On a device
    mesh"): the same stars as `box_fractal` on one device, bit for bit, unless
    a device's part of the tree would overflow its array first (then the
    growth stops a generation early on all, the stars are one generation
    coarser; it takes a device holding twice its share of a generation, never
    seen). `key` and `D` are the same on every device; n must be a multiple of
    `n_devices`.

    **Returns:** `(positions, velocities)`, each (n / `n_devices`, 3): rows
    d n / `n_devices` to (d + 1) n / `n_devices` - 1 of the n on device d.
    """
    check_divides(n, n_devices)
    dtype, target, threshold, seeds = _settings(key, n, D, dtype)
    top = _root(_whole_chunks(min(target, TOP_CELLS_PER_DEVICE * n_devices)), dtype)
    top = _grow(top, seeds, threshold, target, _ONE_DEVICE)
    tree = _split(top, _device_slots(target, n_devices), n_devices, jax.lax.axis_index(axis_name))
    tree = _grow(tree, seeds, threshold, target, _mesh_reductions(axis_name, n_devices))
    tree = tree._replace(stopped=tree.stopped | tree.full)  # an overflow ends the growth
    return _select_share(seeds, tree, threshold, n, axis_name, n_devices, _whole_chunks(target))


def _remap(x, masses, a, iterations: int, total, fractions):
    """`remap_to_plummer` with its sums over the stars completed by `total`
    (the identity on one device, `psum` over a mesh) and `fractions(r2)`
    giving the radial order of the squared radii `r2` about the centroid and
    the mid-point enclosed mass fractions in that order."""
    centroid = total(jnp.sum(x, axis=0)) / total(jnp.asarray(x.shape[0], x.dtype))
    order, mu = fractions(jnp.sum((x - centroid) ** 2, axis=-1))
    radii = jnp.zeros_like(mu).at[order].set(plummer_sample_radii(mu, a))

    def remap(_, x):
        x = x - 1.5 * total(jnp.sum(masses[:, None] * x, axis=0)) / total(jnp.sum(masses))
        r2 = jnp.sum(x**2, axis=-1)
        pos = r2 > 0
        r = jnp.sqrt(jnp.where(pos, r2, 1.0))
        direction = jnp.where(pos[:, None], x / r[:, None], jnp.array([1.0, 0.0, 0.0], x.dtype))
        return direction * radii[:, None]

    return jax.lax.fori_loop(0, iterations, remap, x)


def remap_to_plummer(positions: Array, masses: Array, r_h: Array, iterations: int = 24) -> Array:
    """Keep directions and radial order; radii of a Plummer sphere at equal enclosed mass.

    The radial order is taken once, about the unweighted centroid of
    `positions` (independent of the masses, so the result is continuous in
    them), and fixes each star's target radius. The directions are then taken
    `iterations` times about a centre moved 1.5 times the current centre of
    mass (over-relaxed: with the order fixed, a plain shift shrinks a lopsided
    fractal's offset only ~10% a pass), so that the remapped cluster's centre
    of mass ends up at the remap centre and its half-mass radius at r_h.
    Measured (D = 1.6, Kroupa masses, `fractal_builder`'s streams): 24 passes
    leave offsets of 4e-10 to 2e-5 r_h at n = 1000 and 5000, and 0.9% r_h
    (half-mass radius 0.8% high) for the most lopsided case seen (n = 12,345,
    key 5; 8 plain passes left 11%). Gradients flow through the radii, centres and directions (only the
    sort order is constant).
    """
    a = plummer_scale_radius(r_h)

    def fractions(r2):
        order = float_order(r2)
        m_sorted = masses[order]
        return order, (jnp.cumsum(m_sorted) - 0.5 * m_sorted) / jnp.sum(m_sorted)

    return _remap(positions.astype(jnp.result_type(positions, a)), masses, a, iterations, lambda s: s, fractions)


def remap_to_plummer_share(
    positions: Array, masses: Array, r_h: Array, axis_name: str, n_devices: int, iterations: int = 24
) -> Array:
    """`remap_to_plummer` of the whole set for this device's rows, inside `jax.shard_map` over `axis_name`.

    The centroid and the centres of mass are `psum`s over the mesh; each
    star's enclosed mass is the whole set's (`ring_mass_inside`: the other
    shares passed once around the ring), so the result is the one-device
    remap's but for the order of the additions (and stars at exactly the same
    radius on two devices, a set of measure zero). Gradients as there: through
    the radii (r_h and every device's masses), centres and directions, in a
    `shard_map` with its type check on (the default; with `check_vma=False`
    a `psum` transposes to another `psum`: gradients D times too large).
    """
    a = plummer_scale_radius(r_h)
    total = _mesh_reductions(axis_name, n_devices).total

    def fractions(r2):
        order, _, inside = ring_mass_inside(r2, masses, axis_name, n_devices)
        m_sorted = masses[order]
        return order, (inside + 0.5 * m_sorted) / total(jnp.sum(masses))

    return _remap(positions.astype(jnp.result_type(positions, a)), masses, a, iterations, total, fractions)
