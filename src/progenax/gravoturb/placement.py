r"""Fixed-shape sampling of particle positions from per-cell weights on a grid.

*Experimental.* The cells are taken in raster order (C order: x slowest, z
fastest), so consecutive cells are z-neighbours except at the end of a z-row.
The normalised cumulative weight $C_j$ along that order is a piecewise-linear
CDF of one variable; particle $i$ gets the stratified, sorted uniform

$$u_i = (i + U_i)/n, \qquad U_i \sim \mathcal U(0, 1),$$

its cell $j_i$ is the one with $C_{j-1} \le u_i < C_j$ (`searchsorted`), and its
fractional place in that cell's CDF interval,

$$f_i = \frac{u_i - C_{j_i - 1}}{C_{j_i} - C_{j_i - 1}} \in [0, 1),$$

is its z-offset inside the cell. Its x- and y-offsets are independent uniforms.
The z-coordinate $(i_z + f_i)\Delta$ is therefore continuous in $u_i$ and in the
weights across the face between two z-neighbours, and jumps only at the end of
a row.

**Differentiability (partial).** The gradient with respect to the weights flows
through $f_i$ (the z-coordinate: the slope of the inverse CDF along the raster),
exactly where the particle stays in its cell. The cell choice $j_i$ is piecewise
constant: x and y carry no gradient, z has a kink when a particle crosses a
z-face and a jump at the end of a row. Observables that depend on a few
particles (a half-mass radius about a fixed centre) are differentiable almost
everywhere; sums over all particles see a kink with probability that grows with
n. No rejection, no loops: shapes are fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array, Key
from ..sampling import safe_divide


def stratified_uniforms(key: Key, n: int, dtype=None) -> Array:
    """n sorted uniforms, one in each of the n equal sub-intervals of [0, 1)."""
    dtype = dtype or jnp.result_type(float)
    jitter = jax.random.uniform(key, (n,), dtype)
    return (jnp.arange(n, dtype=dtype) + jitter) / n


def raster_inverse_cdf(weights: Array, u: Array) -> tuple[Array, Array]:
    """Cell index (flat, C order) and fractional offset in [0, 1] of each uniform `u`.

    `weights`: (g, g, g) non-negative, not all zero. Zero-weight cells are
    never chosen. The offset is differentiable in the weights (module docstring).
    """
    w = weights.reshape(-1)
    total = jnp.sum(w)
    inclusive = jnp.cumsum(w)
    cdf = jax.lax.stop_gradient(inclusive / inclusive[-1])
    cell = jnp.clip(jnp.searchsorted(cdf, jax.lax.stop_gradient(u), side="right"), 0, w.shape[0] - 1)
    below = inclusive[cell] - w[cell]
    offset = safe_divide(u * total - below, w[cell])
    return cell, jnp.clip(offset, 0.0, 1.0)


def cell_positions(key: Key, weights: Array, n: int, box_size: Array) -> tuple[Array, Array]:
    """n positions in the cube [-L/2, L/2)^3 drawn in proportion to `weights`.

    **Returns:** `(positions, cell)`: (n, 3) positions (units of `box_size`) and
    the flat index of each particle's cell.
    """
    grid = weights.shape[0]
    dtype = weights.dtype
    k_u, k_xy = jax.random.split(key)
    u = stratified_uniforms(k_u, n, dtype)
    cell, offset = raster_inverse_cdf(weights, u)
    ix, iy, iz = jnp.unravel_index(cell, (grid, grid, grid))
    xy_offset = jax.random.uniform(k_xy, (n, 2), dtype)
    index = jnp.stack(
        [ix.astype(dtype) + xy_offset[:, 0], iy.astype(dtype) + xy_offset[:, 1], iz.astype(dtype) + offset], axis=-1
    )
    spacing = box_size / grid
    return (index * spacing - 0.5 * box_size), cell
