"""Small gradient-safe functions the models share."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array
from ..sampling import hermite_cell

SERIES_SWITCH = 1e-2  # |pL| below: 7-term series, truncation error < 3e-19 relative


def one_minus_exp_over(p: Array, L: Array) -> Array:
    """(1 - e^{pL}) / p for L <= 0, smooth in p through p = 0 (equal to -L there)."""
    z = p * L
    small = jnp.abs(z) < SERIES_SWITCH
    p_safe = jnp.where(small, 1.0, p)
    series = 1.0 + z * (1 / 2 + z * (1 / 6 + z * (1 / 24 + z * (1 / 120 + z * (1 / 720 + z / 5040)))))
    # Below z = -1, 1 - e^z: jax differentiates expm1 as expm1(z) + 1, which cancels there.
    far = z < -1.0
    one_minus = jnp.where(far, 1.0 - jnp.exp(jnp.where(far, z, -1.0)), -jnp.expm1(jnp.where(small, 0.0, z)))
    return jnp.where(small, -L * series, one_minus / p_safe)


def hermite(values: Array, slopes: Array, first: float, step: float, x: Array) -> Array:
    """Cubic Hermite interpolant of a uniform table at x (clamped to the table)."""
    z = jnp.clip((x - first) / step, 0.0, values.shape[0] - 1.0)
    k = jnp.clip(jnp.floor(jax.lax.stop_gradient(z)), 0, values.shape[0] - 2).astype(jnp.int32)
    return hermite_cell(z - k, step, values[k], values[k + 1], slopes[k], slopes[k + 1])
