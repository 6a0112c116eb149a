r"""The Plummer (1911) sphere as a model: closed-form profile and DF.

$\rho(r) = \frac{3M}{4\pi a^3}(1 + r^2/a^2)^{-5/2}$, $M(<r) = M r^3/(r^2 + a^2)^{3/2}$,
$\Phi(r) = -GM/\sqrt{r^2 + a^2}$, with $a = r_h\sqrt{2^{2/3} - 1}$ (the
formulas: `progenax.profiles.plummer`). Radii invert $M(<r)$ exactly; speeds
come from the isotropic DF $f(E) \propto (-E)^{7/2}$ by inverse CDF of
$q = v/v_e$ (`progenax.kinematics.plummer_df`).
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._fusion import materialize
from .._types import Array, ArrayLike
from ..kinematics.plummer_df import sample_speed_fraction
from ..profiles.plummer import (
    plummer_density,
    plummer_escape_speed_squared,
    plummer_mass_fraction,
    plummer_potential,
    plummer_sample_radii,
    plummer_scale_radius,
)
from ..sampling import uniform_open
from ..units import G_PHYSICAL
from ._base import AbstractClusterModel, Interval, Parameter


class Plummer(AbstractClusterModel):
    """The Plummer sphere of 3D half-mass radius `r_h` (pc)."""

    NAME: ClassVar[str] = "plummer"
    BUILDER: ClassVar[str] = "plummer_builder"
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = (
        Parameter("r_h", Interval(0.0), 1.0, "3D half-mass radius", "pc", audit=(1.0, (1e-3, 1e3))),
    )

    r_h: Array = eqx.field(converter=jnp.asarray)
    total_mass: Array = eqx.field(default=1.0, converter=jnp.asarray)
    G: float = eqx.field(static=True, default=G_PHYSICAL)

    @property
    def scale_radius(self) -> Array:
        """Plummer radius a (pc)."""
        return plummer_scale_radius(self.r_h)

    def mass_fraction(self, r: ArrayLike) -> Array:
        return plummer_mass_fraction(r, self.scale_radius)

    def density(self, r: ArrayLike) -> Array:
        return plummer_density(r, self.total_mass, self.scale_radius)

    def potential(self, r: ArrayLike) -> Array:
        return plummer_potential(r, self.total_mass, self.scale_radius, self.G)

    def escape_speed(self, r: ArrayLike) -> Array:
        return jnp.sqrt(plummer_escape_speed_squared(jnp.asarray(r) ** 2, self.total_mass, self.scale_radius, self.G))

    def sample_radii(self, key: Array, n: int, dtype) -> Array:
        return materialize(plummer_sample_radii(uniform_open(key, (n,), dtype), self.scale_radius))

    def sample_speeds(self, key: Array, radii: Array) -> Array:
        q = materialize(sample_speed_fraction(jax.random.uniform(key, radii.shape, radii.dtype)))
        return self.escape_speed(radii) * q
