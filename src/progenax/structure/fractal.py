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

**Radial remap.** `remap_to_plummer` (used by `progenax.fractal_builder`) keeps the angular positions and the radial
order of the fractal and replaces each radius with that of a Plummer sphere at
the same enclosed mass: the stars are sorted once by radius about the fractal's
unweighted centroid, the mid-point cumulative mass fraction $\mu_k$ of the k-th
is computed, and its new radius is $r_k = a (\mu_k^{-2/3} - 1)^{-1/2}$ with
$a = r_h / 1.305$. The order depends only on the key and D (not on the masses,
so not on alpha), so the remap is continuous in r_h and alpha: the sort only
decides which star gets which target radius, and the gradient flows through
the target radii (to r_h, and to alpha via the masses in $\mu_k$).

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

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike, Key
from ..profiles.plummer import plummer_sample_radii, plummer_scale_radius

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


def _generation(cells, count, half, seed, threshold, chunk):
    """One generation: the live cells (the first `count` slots) divided, `chunk`
    parents at a time (so the work follows the live count), the surviving
    children packed at the front of a new array. Returns it and their number
    (beyond the array's end the rows are wrong: then the generation is not
    applied). Packing: a 1D scatter of child indices, then gathers (a scatter
    of whole rows costs ~100 ns a row on this CPU, a 1D one ~5 ns)."""
    slots = cells.shape[0]
    offsets = (0.5 * half) * jnp.asarray(_OFFSETS, cells.dtype)

    def step(state):
        i, offset, out = state
        parents = jax.lax.dynamic_slice_in_dim(cells, i * chunk, chunk)
        rows = i * chunk + jnp.arange(chunk)
        _, alive, _ = _survivors(parents, rows, count, half, seed, threshold)
        dest, k = _pack(alive)
        dest = jnp.where(alive, dest, 8 * chunk).reshape(-1)
        source = jnp.zeros(8 * chunk, jnp.int32).at[dest].set(jnp.arange(8 * chunk, dtype=jnp.int32), mode="drop")
        row, col = source // 8, source % 8
        vel = _noisy_velocity(parents, rows, half, seed)
        block = jnp.concatenate([parents[row, :3] + offsets[col], vel[row]], axis=1)
        block = jax.lax.optimization_barrier(block)  # kept out of the update: 0.38 -> 0.21 s for 10 chunks at 2e6 slots
        return i + 1, offset + k, jax.lax.dynamic_update_slice_in_dim(out, block, offset, 0)

    steps = (count + chunk - 1) // chunk
    out = jnp.zeros((slots + 8 * chunk, 6), cells.dtype)
    _, total, out = jax.lax.while_loop(lambda s: s[0] < steps, step, (jnp.int32(0), jnp.int32(0), out))
    return out[:slots], total


def _threshold(keys, n):
    """The largest t with at least n keys >= t (uint32; 0 when fewer than n are
    positive): a 32-step bitwise search, linear time, no sort."""

    def bit(i, t):
        trial = t | (jnp.uint32(1) << (31 - i).astype(jnp.uint32))
        return jnp.where(jnp.sum(keys >= trial) >= n, trial, t)

    return jax.lax.fori_loop(0, 32, bit, jnp.uint32(0))


def _place(cells, row, col, half, seed, counter):
    """Star positions: candidate `col` (0-7 a child of cell `row`, 8 the cell
    itself) jittered uniformly inside its cube by draws numbered `counter`."""
    offsets = jnp.asarray(np.vstack([_OFFSETS, np.zeros((1, 3))]), cells.dtype)[col]
    size = jnp.where(col < 8, 0.5 * half, half)[..., None]
    jitter = 2.0 * _uniform(seed, 1, 3 * counter[..., None] + jnp.arange(3, dtype=jnp.uint32), cells.dtype) - 1.0
    return cells[row, :3] + (0.5 * half) * offsets + size * jitter


def _select(seed, cells, count, half, final_seed, stopped, threshold, n):
    """The n stars: the top n of (surviving child of the last generation whose
    jittered position is inside the unit sphere, outside, living cell inside,
    outside), random within a class; then repeats in the living cells. Ties at
    the threshold (keys are 29 random bits: about one in 2^29) go in slot order."""
    target, dtype = cells.shape[0], cells.dtype
    rows = jnp.arange(target)
    _, alive, bits = _survivors(cells, rows, count, half, final_seed, threshold)
    grid = _counter((target, 9))  # candidate (row, col) is number 9 row + col
    inside = jnp.sum(_place(cells, grid // 9, grid % 9, half, seed, grid) ** 2, axis=-1) <= 1.0
    live = jnp.concatenate([stopped & alive, (rows < count)[:, None]], axis=1)
    classes = jnp.where(live, 1 + inside + jnp.where(jnp.arange(9) < 8, 2, 0), 0).astype(jnp.uint32)
    noise = jnp.concatenate([bits, _bits(seed, 0, _counter((target, 1)))], axis=1)
    keys = jnp.where(classes > 0, (classes << 29) | (noise >> 3), 0)
    chosen = (keys >= _threshold(keys, n)) & (keys > 0)
    dest, taken = _pack(chosen)
    flat = jnp.where(chosen, dest, n).reshape(-1)
    source = jnp.zeros(n, jnp.int32).at[flat].set(jnp.arange(9 * target, dtype=jnp.int32), mode="drop")
    slot = jnp.arange(n)
    first = slot < jnp.minimum(taken, n)
    source = jnp.where(first, source, 9 * ((slot - taken) % jnp.maximum(count, 1)) + 8)  # a living cell again
    counter = jnp.where(first, source, 9 * target + slot).astype(jnp.uint32)  # repeats: fresh jitter
    row, col = source // 9, source % 9
    positions = _place(cells, row, col, half, seed, counter)
    own = (0.5 * half) * _normal(seed, 2, _counter((n, 3)), dtype)
    velocities = _noisy_velocity(cells[row], row, half, final_seed) + own
    return positions, velocities


def box_fractal(key: Key, n: int, D: ArrayLike, *, dtype=None) -> tuple[Array, Array]:
    """n positions (in the unit sphere while enough leaves lie there) and velocities of a GW04 box fractal.

    See the module docstring. Positions are in units of the cube's half-side,
    velocities in units of the root dispersion. Piecewise constant in D (no
    gradient, see the module docstring).

    **Returns:** `(positions, velocities)`, each (n, 3).
    """
    dtype = dtype or jnp.result_type(float)
    target = max(2 * n, 8)
    survival = jax.lax.stop_gradient(2.0 ** (jnp.asarray(D, dtype) - 3.0))
    threshold = jnp.round(survival * 2.0**24).astype(jnp.uint32)  # survive: top 24 bits below it
    chunk = min(_CHUNK, target)
    slots = -(-target // chunk) * chunk  # whole chunks
    generations = fractal_generations(n)
    seeds = jax.random.bits(key, (generations + 1, 2), jnp.uint32)  # one per generation, one to select

    def level(carry, xs):
        cells, count, half, last, stopped = carry
        seed, g = xs
        new, n_alive = _generation(cells, jnp.where(stopped, 0, count), half, seed, threshold, chunk)
        accept = ~stopped & (n_alive > 0) & (n_alive < target)
        cells, count = jnp.where(accept, new, cells), jnp.where(accept, n_alive, count)
        half = jnp.where(accept, 0.5 * half, half)
        return (cells, count, half, jnp.where(stopped | accept, last, g), ~accept), None

    # Cells: centre and velocity (the root's own noise is added when it divides);
    # the live count, their half-side, the generation that stopped the growth.
    start = (jnp.zeros((slots, 6), dtype), jnp.int32(1), jnp.asarray(1.0, dtype), jnp.int32(0), jnp.asarray(False))
    xs = (seeds[:generations], jnp.arange(generations, dtype=jnp.int32))
    (cells, count, half, last, stopped), _ = jax.lax.scan(level, start, xs)
    return _select(seeds[generations], cells, count, half, seeds[last], stopped, threshold, n)


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
    x = positions.astype(jnp.result_type(positions, a))
    order = jnp.argsort(jnp.sum((x - jnp.mean(x, axis=0)) ** 2, axis=-1))
    m_sorted = masses[order]
    mu = (jnp.cumsum(m_sorted) - 0.5 * m_sorted) / jnp.sum(m_sorted)
    radii = jnp.zeros_like(mu).at[order].set(plummer_sample_radii(mu, a))

    def remap(_, x):
        x = x - 1.5 * jnp.sum(masses[:, None] * x, axis=0) / jnp.sum(masses)
        r2 = jnp.sum(x**2, axis=-1)
        pos = r2 > 0
        r = jnp.sqrt(jnp.where(pos, r2, 1.0))
        direction = jnp.where(pos[:, None], x / r[:, None], jnp.array([1.0, 0.0, 0.0], x.dtype))
        return direction * radii[:, None]

    return jax.lax.fori_loop(0, iterations, remap, x)
