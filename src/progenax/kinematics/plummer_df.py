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

import functools

import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..sampling import inverse_cdf_from_quantiles, quantile_table

# Coefficients of sin(2k theta), k = 1..5, in 14 pi F(theta) - 28 theta.
_SIN_COEFFS = (14.0, -4.0, -13.0 / 3.0, -1.5, -0.2)


def speed_fraction_cdf(theta: Array) -> Array:
    """F(theta): fraction of stars with q = v / v_e below sin(theta).

    Works on NumPy arrays (returning NumPy) as well as JAX arrays.
    """
    xp = np if isinstance(theta, np.ndarray) else jnp
    s1, c1 = xp.sin(2.0 * theta), xp.cos(2.0 * theta)
    s, c = s1, c1
    total = 28.0 * theta
    for coeff in _SIN_COEFFS:
        total = total + coeff * s
        s, c = s * c1 + c * s1, c * c1 - s * s1  # sin/cos of the next multiple angle
    return total / (14.0 * np.pi)


@functools.cache
def _theta_quantiles(size: int) -> np.ndarray:
    return quantile_table(speed_fraction_cdf, 0.0, 0.5 * np.pi, size)


def _end_cell_guess(k: Array, w: Array, lo: Array, hi: Array) -> Array:
    """First guess in end cell k (the first or the last) at fraction w of the cell.

    F ~ sin^3(theta) as q -> 0 and 1 - F ~ cos^9(theta) as q -> 1 (to relative
    order q^2 and cos^2 respectively).
    """
    first = jnp.arcsin(jnp.sin(hi) * w ** (1.0 / 3.0))
    last = jnp.arccos(jnp.cos(lo) * (1.0 - w) ** (1.0 / 9.0))
    return jnp.where(k == 0, first, last)


def sample_speed_fraction(u: Array, *, table_size: int = 1024, num_steps: int = 3) -> Array:
    """q = v / v_e for uniform u in (0, 1), exact to float precision.

    A table of the F^{-1}(k / table_size) brackets each u (bracket found by
    floor(u * table_size), no search); from the secant guess, 2 safeguarded-Newton
    steps reach |F(theta) - u| < 1e-15 for every u in float64 (measured over
    1e5 draws, `tests/test_sampling.py`), so the default of 3 leaves a margin.
    """
    theta = inverse_cdf_from_quantiles(
        speed_fraction_cdf, u, _theta_quantiles(table_size), num_steps=num_steps, end_guess=_end_cell_guess
    )
    return jnp.sin(theta)
