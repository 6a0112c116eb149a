"""Radii that summarise a cluster: half-mass and Lagrangian radii, 3D and projected.

Each is a mass-weighted quantile of the radii about a centre (the centre of mass
unless one is given, e.g. `density_centre(...)` or the origin), found by sorting the
squared radii (`progenax._sort.sort_by_radius`):
the gradient flows through the sorted radii and interpolates linearly between the
two stars that straddle the mass fraction.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._sort import sort_by_radius
from .._types import Array, ArrayLike, Masses, Positions, Scalar
from ..sampling import safe_sqrt
from ..validation import check_argument
from .centre import centre_of_mass


def squared_radii(positions: Positions, centre: Array) -> Array:
    """|x - centre|^2 of each star (the key every radial sort here orders)."""
    x = positions - centre
    return jnp.sum(x * x, axis=-1)


def _weighted_quantile(r2: Array, weights: Array, fractions: Array) -> Array:
    """Radii (square roots of the non-negative `r2`) enclosing `fractions` of the
    `weights`. Stars of weight 0 (a traced binary build's absent companions,
    a layout's padding) are no interpolation points, as in
    `ring.ring_weighted_quantiles`: each takes the knot of the nearest star
    of positive weight before it in radius (after it, for those inside the first)."""
    r2_sorted, w = sort_by_radius(r2, weights)
    radii = safe_sqrt(r2_sorted)
    # Mid-point cumulative fraction of each star: symmetric, so the quantile of
    # a fraction f and 1-f mirror each other.
    cum = (jnp.cumsum(w) - 0.5 * w) / jnp.sum(w)
    index = jnp.arange(w.shape[0])
    before = jax.lax.cummax(jnp.where(w > 0, index, -1))
    knot = jnp.where(before >= 0, before, jnp.argmax(w > 0))
    return jnp.interp(fractions, cum[knot], radii[knot])


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
    r2 = squared_radii(positions[:, :2], centre[:2]) if projected else squared_radii(positions, centre)
    fractions = check_argument("fractions", fractions, lower=0.0, upper=1.0, lower_inclusive=True, upper_inclusive=True)
    return _weighted_quantile(r2, masses, jnp.asarray(fractions, dtype=r2.dtype))


def half_mass_radius(
    positions: Positions,
    masses: Masses,
    *,
    projected: bool = False,
    centre: ArrayLike | None = None,
) -> Scalar:
    """Radius (3D, or projected on x-y) enclosing half of the mass about `centre`."""
    return lagrangian_radii(positions, masses, (0.5,), projected=projected, centre=centre)[0]
