r"""Speeds from the Plummer sphere's isotropic distribution function.

The Plummer DF is $f(E) \propto (-E)^{7/2}$. At a radius with escape speed
$v_e = \sqrt{-2\Phi}$ the speed in units of $v_e$, $q = v / v_e$, has density
$g(q) \propto q^2 (1 - q^2)^{7/2}$ on [0, 1]. With $q = \sin\theta$,
$g\,dq \propto \sin^2\theta\cos^8\theta\,d\theta$, whose Fourier series integrates in
closed form:

$$F(\theta) = \frac{28\theta + 14\sin 2\theta - 4\sin 4\theta - \tfrac{13}{3}\sin 6\theta
 - \tfrac{3}{2}\sin 8\theta - \tfrac{1}{5}\sin 10\theta}{14\pi}.$$

Speeds are drawn by inverting $F$ (a table bracket, then safeguarded Newton): exact,
no rejection, the same cost for every star.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._types import Array
from ..sampling import inverse_cdf

# Coefficients of sin(2k theta), k = 1..5, in 14 pi F(theta) - 28 theta.
_SIN_COEFFS = (14.0, -4.0, -13.0 / 3.0, -1.5, -0.2)


def speed_fraction_cdf(theta: Array) -> Array:
    """F(theta): fraction of stars with q = v / v_e below sin(theta)."""
    s1, c1 = jnp.sin(2.0 * theta), jnp.cos(2.0 * theta)
    s, c = s1, c1
    total = 28.0 * theta
    for coeff in _SIN_COEFFS:
        total = total + coeff * s
        s, c = s * c1 + c * s1, c * c1 - s * s1  # sin/cos of the next multiple angle
    return total / (14.0 * jnp.pi)


def sample_speed_fraction(u: Array, *, table_size: int = 512, num_steps: int = 4) -> Array:
    """q = v / v_e for uniform u in (0, 1) (exact to float precision).

    A table of `table_size` nodes in theta brackets each u within one cell
    (width ~0.003 rad); from the secant guess, 3 safeguarded-Newton steps reach
    |F(theta) - u| < 1e-15 for every u in float64 (measured over 2e5 draws), so
    the default of 4 leaves a margin.
    """
    grid = jnp.linspace(0.0, 0.5 * jnp.pi, table_size, dtype=u.dtype)
    theta = inverse_cdf(speed_fraction_cdf, u, grid, num_steps=num_steps)
    return jnp.sin(theta)
