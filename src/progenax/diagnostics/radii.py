"""Radii that summarise a cluster: half-mass and Lagrangian radii, 3D and projected.

Each is a mass-weighted quantile of the radii about a centre (the centre of mass
unless one is given, e.g. `density_centre(...)` or the origin), found by sorting
(`progenax._sort.radial_order`):
the gradient flows through the sorted radii and interpolates linearly between the
two stars that straddle the mass fraction.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._sort import radial_order
from .._types import Array, ArrayLike, Masses, Positions, Scalar
from ..sampling import safe_norm
from .centre import centre_of_mass


def _weighted_quantile(values: Array, weights: Array, fractions: Array) -> Array:
    """Quantiles of non-negative `values` (radii) weighted by `weights`."""
    order = radial_order(values)  # one integer key: ~6x faster than argsort on CPU at 1e6
    v = values[order]
    w = weights[order]
    # Mid-point cumulative fraction of each star: symmetric, so the quantile of
    # a fraction f and 1-f mirror each other.
    cum = (jnp.cumsum(w) - 0.5 * w) / jnp.sum(w)
    return jnp.interp(fractions, cum, v)


def lagrangian_radii(
    positions: Positions,
    masses: Masses,
    fractions: ArrayLike = (0.1, 0.25, 0.5, 0.75, 0.9),
    *,
    projected: bool = False,
    centre: ArrayLike | None = None,
) -> Array:
    """Radii enclosing the given mass fractions.

    `projected=True` uses the radius in the x-y plane (the observer looks along
    z). `centre` (3,) defaults to the centre of mass.
    """
    centre = centre_of_mass(positions, masses) if centre is None else jnp.asarray(centre, positions.dtype)
    x = positions - centre
    if projected:
        x = x[:, :2]
    r = safe_norm(x)
    return _weighted_quantile(r, masses, jnp.asarray(fractions, dtype=r.dtype))


def half_mass_radius(
    positions: Positions,
    masses: Masses,
    *,
    projected: bool = False,
    centre: ArrayLike | None = None,
) -> Scalar:
    """Radius (3D, or projected on x-y) enclosing half of the mass about `centre`."""
    return lagrangian_radii(positions, masses, (0.5,), projected=projected, centre=centre)[0]
