r"""Inverse-CDF sampling with fixed-iteration root finders.

No `while_loop`, no rejection: every sample costs the same fixed number of steps,
so the samplers vmap, jit and differentiate.

`solve_increasing(F, target, lo, hi)` finds $x$ with $F(x) = t$ for an increasing
$F$ by a safeguarded Newton iteration (Newton steps that leave the bracket fall back
to the secant of the bracket, which always stays inside it). The gradient with respect to
anything `F` closes over, and to `t`, is the implicit-function-theorem slope

$$\frac{\partial x}{\partial\theta} = -\frac{\partial_\theta F(x,\theta) - \partial_\theta t}{\partial_x F(x,\theta)},$$

obtained by one extra Newton step on the converged root with the iteration itself
outside autodiff.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from ._types import Array


def _value_and_slope(F: Callable[[Array], Array], x: Array) -> tuple[Array, Array]:
    """F(x) and dF/dx elementwise (F acts elementwise on x)."""
    f, df = jax.jvp(F, (x,), (jnp.ones_like(x),))
    return f, df


def safe_divide(num: Array, den: Array) -> Array:
    """num / den, with 0 where den == 0 (double-where: no NaN in gradients)."""
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def solve_increasing(
    F: Callable[[Array], Array],
    target: Array,
    lo: Array,
    hi: Array,
    *,
    num_steps: int = 40,
) -> Array:
    r"""Solve $F(x) = t$ for increasing elementwise $F$ on the bracket [lo, hi].

    **Arguments:**

    - `F`: increasing elementwise function; may close over traced parameters.
    - `target`: the values $t$ (any shape broadcast with lo, hi).
    - `lo`, `hi`: bracket with $F(lo) \le t \le F(hi)$.
    - `num_steps`: fixed number of safeguarded-Newton steps (static). Newton
      converges quadratically once inside its basin; the secant fallback at
      least linearly. From a table bracket a few steps reach machine precision
      (see the tests); from a wide bracket use more.

    **Returns:** $x$ with the implicit-function gradient described in the module.
    """
    target = jnp.asarray(target)
    lo, hi, target = jnp.broadcast_arrays(jnp.asarray(lo), jnp.asarray(hi), target)
    t = jax.lax.stop_gradient(target)

    def secant(a, fa, b, fb):
        """Linear interpolation of the bracket: always inside it."""
        w = jnp.clip(safe_divide(t - fa, fb - fa), 0.0, 1.0)
        return a + w * (b - a)

    def step(carry, _):
        x, a, fa, b, fb = carry
        f, df = _value_and_slope(F, x)
        below = f < t
        a, fa = jnp.where(below, x, a), jnp.where(below, f, fa)
        b, fb = jnp.where(below, b, x), jnp.where(below, fb, f)
        newton = x - safe_divide(f - t, df)
        # Closed bracket: a converged x (f == t, newton == x == b) must stay put.
        inside = (newton >= a) & (newton <= b) & (df > 0)
        x = jnp.where(inside, newton, secant(a, fa, b, fb))
        return (x, a, fa, b, fb), None

    a0 = jax.lax.stop_gradient(lo)
    b0 = jax.lax.stop_gradient(hi)
    fa0, fb0 = jax.lax.stop_gradient(F(a0)), jax.lax.stop_gradient(F(b0))
    init = (secant(a0, fa0, b0, fb0), a0, fa0, b0, fb0)
    (root, *_), _ = jax.lax.scan(step, init, None, length=num_steps)
    # The iteration's own derivative is discarded (and dead-code eliminated).
    root = jax.lax.stop_gradient(root)
    # One Newton step on the converged root carries the implicit gradient: its
    # value is root (F(root) = t to solver precision), its derivative -F_theta/F_x.
    f, df = _value_and_slope(F, root)
    return root - safe_divide(f - target, jax.lax.stop_gradient(df))


def tabulated_bracket(grid: Array, values: Array, targets: Array) -> tuple[Array, Array]:
    """Bracket targets between consecutive nodes of an increasing table.

    `values[k] = F(grid[k])` increasing; returns (lo, hi) nodes around each target,
    clipped to the table's ends. The index choice is piecewise constant; gradients
    never flow through it (the root solve supplies them).
    """
    k = jnp.clip(jnp.searchsorted(values, targets, side="right"), 1, grid.shape[0] - 1)
    return grid[k - 1], grid[k]


def inverse_cdf(
    cdf: Callable[[Array], Array],
    u: Array,
    grid: Array,
    *,
    num_steps: int = 8,
) -> Array:
    """Sample $x = F^{-1}(u)$ of an increasing `cdf` using a table to bracket.

    The table `cdf(grid)` gives each target a bracket one grid cell wide, then
    `num_steps` safeguarded-Newton steps polish it to machine precision. Gradients
    with respect to what `cdf` closes over follow the implicit-function theorem.
    """
    table = jax.lax.stop_gradient(cdf(grid))
    lo, hi = tabulated_bracket(grid, table, jax.lax.stop_gradient(u))
    return solve_increasing(cdf, u, lo, hi, num_steps=num_steps)


def uniform_open(key: Array, shape: tuple[int, ...], dtype=None) -> Array:
    """Uniform variates in the open interval (0, 1): never exactly 0 or 1.

    Inverse CDFs with infinite support (radii of untruncated profiles) diverge at
    u = 1; shifting by half a unit in the last place keeps them finite.
    """
    dtype = dtype or jnp.result_type(float)
    tiny = jnp.finfo(dtype).eps
    return jax.random.uniform(key, shape, dtype, minval=tiny, maxval=1.0 - tiny)


def isotropic_directions(key: Array, n: int, dtype=None) -> Array:
    r"""n unit vectors uniform on the sphere: $\cos\theta \sim U(-1,1)$, $\phi \sim U(0,2\pi)$."""
    dtype = dtype or jnp.result_type(float)
    k1, k2 = jax.random.split(key)
    cos_t = jax.random.uniform(k1, (n,), dtype, -1.0, 1.0)
    phi = jax.random.uniform(k2, (n,), dtype, 0.0, 2.0 * jnp.pi)
    sin_t = jnp.sqrt(jnp.clip(1.0 - cos_t**2, 0.0, 1.0))
    return jnp.stack([sin_t * jnp.cos(phi), sin_t * jnp.sin(phi), cos_t], axis=-1)
