r"""The Plummer (1911) sphere.

$$\rho(r) = \frac{3M}{4\pi a^3}\left(1 + \frac{r^2}{a^2}\right)^{-5/2},\qquad
M(<r) = M \frac{r^3}{(r^2 + a^2)^{3/2}},\qquad
\Phi(r) = -\frac{G M}{\sqrt{r^2 + a^2}}.$$

The 3D half-mass radius is $r_h = a\,(2^{2/3} - 1)^{-1/2} \approx 1.305\,a$, the
projected one equals $a$, and the one-dimensional isotropic velocity dispersion is
$\sigma^2(r) = G M / (6\sqrt{r^2 + a^2})$.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._types import Array, ArrayLike

HALF_MASS_FACTOR = 1.0 / (2.0 ** (2.0 / 3.0) - 1.0) ** 0.5
"""r_h / a for the Plummer sphere (about 1.3048)."""


def plummer_scale_radius(r_h: ArrayLike) -> Array:
    """Plummer radius a from the 3D half-mass radius r_h."""
    return jnp.asarray(r_h) / HALF_MASS_FACTOR


def plummer_density(r: ArrayLike, total_mass: ArrayLike, a: ArrayLike) -> Array:
    """Mass density at radius r (mass / length^3)."""
    r, a = jnp.asarray(r), jnp.asarray(a)
    return 3.0 * total_mass / (4.0 * jnp.pi * a**3) * (1.0 + (r / a) ** 2) ** (-2.5)


def plummer_mass_fraction(r: ArrayLike, a: ArrayLike) -> Array:
    """M(<r) / M."""
    r, a = jnp.asarray(r), jnp.asarray(a)
    return r**3 / (r**2 + a**2) ** 1.5


def plummer_potential(r: ArrayLike, total_mass: ArrayLike, a: ArrayLike, G: ArrayLike) -> Array:
    """Gravitational potential Phi(r) (negative)."""
    return -G * total_mass / jnp.sqrt(jnp.asarray(r) ** 2 + jnp.asarray(a) ** 2)


def plummer_escape_speed_squared(r_squared: ArrayLike, total_mass: ArrayLike, a: ArrayLike, G: ArrayLike) -> Array:
    r"""$v_e^2 = -2\Phi = 2GM/\sqrt{r^2 + a^2}$ at squared radius `r_squared`.

    Taking $r^2$ keeps a square root of $|x|^2$ (and its infinite derivative at
    the centre) out of callers that hold squared radii, e.g. the projected
    likelihoods' $R^2 + a^2$.
    """
    return 2.0 * G * total_mass / jnp.sqrt(jnp.asarray(r_squared) + jnp.asarray(a) ** 2)


def plummer_velocity_dispersion(r: ArrayLike, total_mass: ArrayLike, a: ArrayLike, G: ArrayLike) -> Array:
    """One-dimensional isotropic velocity dispersion sigma(r)."""
    return jnp.sqrt(G * total_mass / (6.0 * jnp.sqrt(jnp.asarray(r) ** 2 + jnp.asarray(a) ** 2)))


def plummer_sample_radii(u: ArrayLike, a: ArrayLike) -> Array:
    r"""Radii by exact inversion of M(<r): $r = a\,(u^{-2/3} - 1)^{-1/2}$, u in (0, 1)."""
    u = jnp.asarray(u)
    return jnp.asarray(a) * (u ** (-2.0 / 3.0) - 1.0) ** -0.5
