r"""Fractal star clusters: the box fractal of Goodwin & Whitworth (2004).

**The fractal.** A cube $[-1, 1]^3$ holds one parent. Each generation splits
every cell into $2^3$ children at the centres of its sub-cubes (offsets
$\pm 2^{-g}$ per axis at generation $g$); a child survives with probability
$2^{D - 3}$, so on average $2^D$ of the 8 survive and the surviving leaves after
$G$ generations trace a set of fractal dimension $D$ ($D = 3$ fills the cube).
Each child inherits its parent's velocity plus a Gaussian random component whose
size halves each generation ($\sigma_g = 2^{-g}$, root $\sigma_0 = 1$), which
gives a velocity structure like GW04's: nearby stars move coherently. Leaves are
jittered uniformly inside their last cell, and stars outside the unit sphere are
dropped (GW04 cut a sphere from the cube).

**Fixed shapes, exactly n stars, no rejection loop.** The cells live in
fixed-shape arrays of at most `capacity` $= 16n$ slots. Each cell records how
many generations its lineage survived (`depth`); dead cells are not removed,
only ranked last. A generation is applied (with `where`, the shapes do not
change) only while fewer than $2n$ cells are alive; after that the cells stay
as they are. So between $2n$ and $16n$ cells survive, which always fit in the
capacity: live cells are never thinned at random between generations (random
thinning of a growing tree would clump it, like a critical branching
process). At most $G = \lceil \log_2(16n) / 1.6 \rceil$ generations (static)
are needed, for the sparsest allowed fractal, $D = 1.6$; denser fractals stop
growing earlier, at a coarser cell size. Finally the n stars are the
top-n cells by (depth, inside the unit sphere, random): surviving leaves inside
the sphere first; should too few survive (a lineage dying out early, or tiny n),
the deepest partial lineages fill the rest, so exactly n stars come back for
any n and key.

**Radial remap.** `remap_to_plummer` (used by `progenax.fractal_builder`) keeps the angular positions and the radial
order of the fractal and replaces each radius with that of a Plummer sphere at
the same enclosed mass: the stars are sorted by radius about their centre of
mass, the mid-point cumulative mass fraction $\mu_k$ of the k-th is computed,
and its new radius is $r_k = a (\mu_k^{-2/3} - 1)^{-1/2}$ with
$a = r_h / 1.305$. The sort only decides which star gets which target radius;
the gradient flows through the target radii (to r_h, and to alpha via the
masses in $\mu_k$), never through the permutation.

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


def fractal_generations(n: int) -> int:
    """Most generations G for n stars (static): enough to grow `2 n` survivors at
    D = 1.6 (2^(1.6 G) >= 16 n), at least 2."""
    return max(2, math.ceil(math.log2(16 * n) / D_MIN))


def _generation(cells, key, step, survival, capacity, target):
    """One subdivision of every cell (applied only while < target cells are alive).

    `cells` = (pos, vel, alive, depth, size) with m slots; returns
    min(8 m, capacity) slots (parents padded with empty slots when not applied).
    """
    pos, vel, alive, depth, size = cells
    dtype = pos.dtype
    k_v, k_s, k_keep = jax.random.split(key, 3)
    m = pos.shape[0]
    c_pos = (pos[:, None, :] + step * jnp.asarray(_OFFSETS, dtype)[None]).reshape(8 * m, 3)
    c_vel = jnp.repeat(vel, 8, axis=0) + step * jax.random.normal(k_v, (8 * m, 3), dtype)
    c_alive = jnp.repeat(alive, 8) & (jax.random.uniform(k_s, (8 * m,), dtype) < survival)
    parent_depth = jnp.repeat(depth, 8)
    c_depth = jnp.where(parent_depth < 0, -1, parent_depth + c_alive)
    c_size = jnp.broadcast_to(jnp.asarray(step, dtype), (8 * m,))
    children = (c_pos, c_vel, c_alive, c_depth, c_size)
    if 8 * m > capacity:
        score = c_depth.astype(dtype) + jax.random.uniform(k_keep, (8 * m,), dtype)
        keep = jax.lax.top_k(score, capacity)[1]
        children = tuple(a[keep] for a in children)
    width = children[0].shape[0]
    pad = width - m
    parents = (
        jnp.pad(pos, ((0, pad), (0, 0))),
        jnp.pad(vel, ((0, pad), (0, 0))),
        jnp.pad(alive, (0, pad)),
        jnp.pad(depth, (0, pad), constant_values=-1),
        jnp.pad(size, (0, pad), constant_values=1.0),
    )
    grow = jnp.sum(alive) < target
    return tuple(jnp.where(grow.reshape((1,) * c.ndim), c, p) for c, p in zip(children, parents))


def box_fractal(key: Key, n: int, D: ArrayLike, *, dtype=None) -> tuple[Array, Array]:
    """n positions in the unit sphere and velocities of a GW04 box fractal.

    See the module docstring. Positions are in units of the cube's half-side,
    velocities in units of the root dispersion. Piecewise constant in D (no
    gradient, see the module docstring).

    **Returns:** `(positions, velocities)`, each (n, 3).
    """
    dtype = dtype or jnp.result_type(float)
    target = max(2 * n, 8)
    capacity = 8 * target
    survival = jax.lax.stop_gradient(2.0 ** (jnp.asarray(D, dtype) - 3.0))
    key, k_root = jax.random.split(key)
    cells = (
        jnp.zeros((1, 3), dtype),
        jax.random.normal(k_root, (1, 3), dtype),
        jnp.ones((1,), bool),
        jnp.zeros((1,), jnp.int32),  # generations survived; -1 marks an empty slot
        jnp.ones((1,), dtype),  # half-side of each cell
    )
    # Every generation works on the full capacity (empty slots padded in from
    # the start), so one scan body serves all of them: shapes never change.
    cells = (
        jnp.pad(cells[0], ((0, capacity - 1), (0, 0))),
        jnp.pad(cells[1], ((0, capacity - 1), (0, 0))),
        jnp.pad(cells[2], (0, capacity - 1)),
        jnp.pad(cells[3], (0, capacity - 1), constant_values=-1),
        jnp.pad(cells[4], (0, capacity - 1), constant_values=1.0),
    )
    generations = fractal_generations(n)
    keys = jax.random.split(key, generations + 1)
    steps = 2.0 ** -jnp.arange(1, generations + 1, dtype=dtype)

    def body(c, xs):
        return _generation(c, xs[0], xs[1], survival, capacity, target), None

    cells, _ = jax.lax.scan(body, cells, (keys[:generations], steps))
    pos, vel, alive, depth, size = cells
    k_j, k_pick = jax.random.split(keys[-1])
    pos = pos + size[:, None] * jax.random.uniform(k_j, pos.shape, dtype, -1.0, 1.0)
    inside = jnp.sum(pos**2, axis=-1) <= 1.0
    score = 2.0 * depth.astype(dtype) + inside.astype(dtype) + jax.random.uniform(k_pick, depth.shape, dtype)
    pick = jax.lax.top_k(score, n)[1]
    return pos[pick], vel[pick]


def remap_to_plummer(positions: Array, masses: Array, r_h: Array, iterations: int = 8) -> Array:
    """Keep directions and radial order; radii of a Plummer sphere at equal enclosed mass.

    Repeated `iterations` times about the current centre of mass, so that the
    remapped cluster's centre of mass (which the clumpy angular distribution
    moves off the first centre) ends up at the remap centre: each pass shrinks
    the offset about 7-fold (measured at n = 1000, D = 1.6), so 8 passes take
    an offset of 0.5 r_h below 1e-6 r_h. Gradients flow through the centres
    and directions too (only the sort order is constant).
    """
    a = plummer_scale_radius(r_h)

    def remap(_, x):
        x = x - jnp.sum(masses[:, None] * x, axis=0) / jnp.sum(masses)
        r2 = jnp.sum(x**2, axis=-1)
        pos = r2 > 0
        r = jnp.sqrt(jnp.where(pos, r2, 1.0))
        direction = jnp.where(pos[:, None], x / r[:, None], jnp.array([1.0, 0.0, 0.0], x.dtype))
        order = jnp.argsort(jnp.where(pos, r, 0.0))
        m_sorted = masses[order]
        mu = (jnp.cumsum(m_sorted) - 0.5 * m_sorted) / jnp.sum(m_sorted)
        target = plummer_sample_radii(mu, a)
        radii = jnp.zeros_like(target).at[order].set(target)
        return direction * radii[:, None]

    x = jax.lax.fori_loop(0, iterations, remap, positions.astype(jnp.result_type(positions, a)))
    return x
