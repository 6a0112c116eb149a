r"""Fixed-shape, continuous sampling of particle positions from per-cell weights on a grid.

*Experimental.* The weights $w_{ijk}$ of a $g^3$ grid define a smooth density:
between two neighbouring cell centres a value moves from one centre's to the
other's along the quintic smoothstep $S(f) = 6f^5 - 15f^4 + 10f^3$ ($S$, $S'$ and $S''$
match at the centres, so the density is $C^2$), and it is constant from the
outermost centres to the faces of the cube. In cell units ($t \in [0, g]$ along
each axis, centres at $t = i + \tfrac12$),

$$\rho(t_x, t_y, t_z) = \sum_{ijk} w_{ijk}\,\psi_i(t_x)\,\psi_j(t_y)\,\psi_k(t_z),$$

with $\psi_i$ the smoothstep hat of centre $i$ ($1 - S(|t - t_i|)$ within one cell,
clamped at the ends): a partition of unity with $\int \psi_i = 1$, so every cell
keeps its total weight, and the marginals and conditionals have the same form
in their last variable:

- $t_x$ from the marginal with node values $W_i = \sum_{jk} w_{ijk}$;
- $t_y$ given $t_x$: node values $\sum_i \psi_i(t_x) V_{ij}$, $V_{ij} = \sum_k w_{ijk}$;
- $t_z$ given $(t_x, t_y)$: node values $\sum_{ij} \psi_i(t_x)\psi_j(t_y) w_{ijk}$.

This is the Knothe–Rosenblatt rearrangement of $\rho$: one uniform per
coordinate goes through the inverse CDF of each 1D density in turn
(`smooth_quantile`). On a segment of length $h$ between node values $a$ and $b$
the mass up to the fraction $\tau$ is $h\,[a\tau + (b - a) I(\tau)]$ with
$I(\tau) = \int_0^\tau S = \tau^6 - 3\tau^5 + \tfrac52\tau^4$ ($I(1) = \tfrac12$: the
segment masses are those of linear interpolation); $\tau$ comes from a fixed
bisection and `progenax.sampling.solve_increasing` (safeguarded Newton), with
its implicit-function gradient. The x-uniforms are
stratified, $u_i = (i + U_i)/n$, so the count of particles with $t_x < T$ is
within one of $n F_x(T)$.

**Differentiability.** The map from (uniforms, weights) to positions is $C^2$
wherever the density is positive: the segment choice (`stop_gradient`) only
decides which formula is used, and the formulas meet with two derivatives at
the centres. Any smooth all-particle observable (such as $\sum m|x|^2$) is
therefore smooth in the weights, and central differences at any small step
agree with autodiff. A gap of zero density inside a 1D conditional (hard
thresholds) makes the map jump across it; inside the cloud the weights are
positive. Positions can lie up to one cell outside the cells of positive weight
(the interpolation towards a zero centre). No rejection, no loops: shapes are
fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array, Key
from ..sampling import solve_increasing

# The in-segment solve: BISECTION_STEPS halvings of [0, 1] (a bracket of 2^-40),
# then NEWTON_STEPS safeguarded-Newton steps with the implicit gradient. Bisection
# first because next to a (nearly) zero node the mass starts like tau^4 and Newton
# alone converges only linearly there; the tests check the inverse to 1e-12.
BISECTION_STEPS = 40
NEWTON_STEPS = 3


def smoothstep(f: Array) -> Array:
    r"""$S(f) = 6f^5 - 15f^4 + 10f^3$: 0 and 1 at the ends with zero first and second derivatives."""
    return f**3 * (10.0 + f * (-15.0 + 6.0 * f))


def _smoothstep_integral(f: Array) -> Array:
    r"""$I(f) = \int_0^f S = f^6 - 3f^5 + \tfrac52 f^4$."""
    return f**4 * (2.5 + f * (-3.0 + f))


def stratified_uniforms(key: Key, n: int, dtype=None, first: int | Array = 0, total: int | None = None) -> Array:
    """n sorted uniforms, one in each of the sub-intervals `first` to
    `first + n - 1` of [0, 1) cut into `total` (default n) equal ones."""
    dtype = dtype or jnp.result_type(float)
    jitter = jax.random.uniform(key, (n,), dtype)
    return (first + jnp.arange(n, dtype=dtype) + jitter) / (n if total is None else total)


def centre_interpolation(t: Array, grid: int) -> tuple[Array, Array]:
    r"""Lower centre index $i_0$ and weight $S(f)$ of the interpolation between cell
    centres at cell coordinate `t` in $[0, g]$: a value is $(1 - S)\,v_{i_0} + S\,v_{i_0 + 1}$
    (constant beyond the outermost centres)."""
    c = jnp.clip(t - 0.5, 0.0, grid - 1.0)
    i0 = jnp.clip(jnp.floor(jax.lax.stop_gradient(c)), 0, grid - 2).astype(jnp.int32)
    return i0, smoothstep(c - i0)


def _nodes(grid: int, dtype) -> tuple[Array, Array]:
    """Node positions 0, 1/2, 3/2, ..., g - 1/2, g and the g + 1 segment lengths."""
    t = jnp.concatenate([jnp.zeros(1, dtype), jnp.arange(grid, dtype=dtype) + 0.5, jnp.full(1, grid, dtype)])
    return t, jnp.diff(t)


def _segment_fraction(a: Array, b: Array, q: Array) -> Array:
    r"""$\tau \in [0, 1]$ with $a\tau + (b - a) I(\tau) = q$, for $0 \le q \le (a + b)/2$."""

    def mass(tau):
        return a * tau + (b - a) * _smoothstep_integral(tau)

    a0, b0, q0 = (jax.lax.stop_gradient(x) for x in (a, b, q))

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        below = a0 * mid + (b0 - a0) * _smoothstep_integral(mid) < q0
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, BISECTION_STEPS, halve, (jnp.zeros_like(q0), jnp.ones_like(q0)))
    # Rolled: unrolled, XLA fused each Newton step with the steps before it
    # and recomputed them (a 1e6-star gas cloud took 5.1 s, rolled 1.5 s).
    return solve_increasing(mass, q, lo, hi, num_steps=NEWTON_STEPS, unroll=False)


def smooth_quantile(values: Array, u: Array) -> Array:
    r"""Inverse CDF of the smoothstep-interpolated density with node values `values` at the cell centres.

    **Arguments:** `values` (..., g) non-negative, not all zero in a row, one row
    per `u`, or (g,) shared by every `u`; `u` (...,) in [0, 1].

    **Returns:** (...,) the cell coordinate $t \in [0, g]$ with $F(t) = u$, where
    $F$ is the normalised integral of the density (constant beyond the outermost
    centres). Differentiable in `values` and `u` (module docstring); zero-weight
    segments are never chosen.
    """
    grid = values.shape[-1]
    t_nodes, h = _nodes(grid, values.dtype)
    f = jnp.concatenate([values[..., :1], values, values[..., -1:]], axis=-1)
    a, b = f[..., :-1], f[..., 1:]
    area = 0.5 * h * (a + b)
    cumulative = jnp.cumsum(area, axis=-1)
    target = u * cumulative[..., -1]
    ends, t_stop = jax.lax.stop_gradient(cumulative), jax.lax.stop_gradient(target)
    if values.ndim == 1:  # one density for every u: a shared table
        seg = jnp.minimum(jnp.searchsorted(ends, t_stop, side="right"), grid)

        def pick(x):
            return x[seg]
    else:
        seg = jnp.minimum(jnp.sum(ends <= t_stop[..., None], axis=-1), grid)[..., None]

        def pick(x):
            return jnp.take_along_axis(jnp.broadcast_to(x, area.shape), seg, axis=-1)[..., 0]

    a_s, b_s, h_s = pick(a), pick(b), pick(h)
    q = jnp.clip((target - (pick(cumulative) - pick(area))) / h_s, 0.0, 0.5 * (a_s + b_s))
    return pick(t_nodes[:-1]) + _segment_fraction(a_s, b_s, q) * h_s


def knothe_rosenblatt(weights: Array, u: Array) -> tuple[Array, Array]:
    r"""Cell coordinates of the uniforms `u` under the Knothe–Rosenblatt map of the interpolated density.

    **Arguments:** `weights` (g, g, g) non-negative, not all zero; `u` (n, 3) in [0, 1].

    **Returns:** `(t, density)`: (n, 3) coordinates in cell units ($[0, g]$, x, y, z)
    and (n,) the interpolated density $\rho(t)$ there, in weight per cell volume.
    """
    grid = weights.shape[0]
    t_x = smooth_quantile(jnp.sum(weights, axis=(1, 2)), u[:, 0])
    ix, sx = centre_interpolation(t_x, grid)
    rows = jnp.sum(weights, axis=2)
    columns = (1.0 - sx)[:, None] * rows[ix] + sx[:, None] * rows[ix + 1]  # (n, g): y-nodes given x
    t_y = smooth_quantile(columns, u[:, 1])
    iy, sy = centre_interpolation(t_y, grid)
    # z-nodes given (x, y): the mix of four z-lines, (n, g) (never the (n, g, g) planes).
    wx0, wx1 = (1.0 - sx)[:, None], sx[:, None]
    lines = (1.0 - sy)[:, None] * (wx0 * weights[ix, iy] + wx1 * weights[ix + 1, iy])
    lines = lines + sy[:, None] * (wx0 * weights[ix, iy + 1] + wx1 * weights[ix + 1, iy + 1])
    t_z = smooth_quantile(lines, u[:, 2])
    iz, sz = centre_interpolation(t_z, grid)
    at = jnp.arange(u.shape[0])
    density = (1.0 - sz) * lines[at, iz] + sz * lines[at, iz + 1]
    return jnp.stack([t_x, t_y, t_z], axis=-1), density


def smooth_positions(
    key: Key, weights: Array, n: int, box_size: Array, first: int | Array = 0, total: int | None = None
) -> tuple[Array, Array]:
    """n positions in the cube [-L/2, L/2]^3 drawn from the interpolated density of `weights`
    (rows `first` to `first + n - 1` of `total`, default n: one device's share
    of the stratified x-uniforms).

    **Returns:** `(positions, density)`: (n, 3) positions (units of `box_size`) and
    the (n,) interpolated weight density at each, in weight per cell volume (its
    integral over the cube, in cells, is the sum of the weights).
    """
    grid = weights.shape[0]
    dtype = weights.dtype
    k_x, k_yz = jax.random.split(key)
    x_uniforms = stratified_uniforms(k_x, n, dtype, first, total)
    u = jnp.concatenate([x_uniforms[:, None], jax.random.uniform(k_yz, (n, 2), dtype)], -1)
    t, density = knothe_rosenblatt(weights, u)
    return t * (box_size / grid) - 0.5 * box_size, density
