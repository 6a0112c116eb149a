r"""The Plummer (1911) sphere as a model: closed-form profile and DF.

$\rho(r) = \frac{3M}{4\pi a^3}(1 + r^2/a^2)^{-5/2}$, $M(<r) = M r^3/(r^2 + a^2)^{3/2}$,
$\Phi(r) = -GM/\sqrt{r^2 + a^2}$, with $a = r_h\sqrt{2^{2/3} - 1}$ (the
formulas: `progenax.profiles.plummer`). Radii invert $M(<r)$ exactly; speeds
come from the isotropic DF $f(E) \propto (-E)^{7/2}$ by inverse CDF of
$q = v/v_e$ (`progenax.kinematics.plummer_df`).

**Anisotropy.** With `ra` (pc) the Osipkov-Merritt DF $f(Q)$,
$Q = \mathcal E - L^2/(2r_a^2)$, by the generic inversion of the augmented density
(`progenax.models.osipkov_merritt.sample_osipkov_merritt`). In Henon-like units
$G = M = a = 1$, $\rho_Q = \frac{3}{4\pi}[(1 - a^2/r_a^2)\Psi^5 + (a^2/r_a^2)\Psi^3]$,
so $f(Q) \propto (1 - a^2/r_a^2)\,\Gamma(6)/\Gamma(9/2)\,Q^{7/2}
+ (a^2/r_a^2)\,\Gamma(4)/\Gamma(5/2)\,Q^{3/2}$, non-negative on $0 \le Q \le 1$ iff
$r_a \ge 0.75\,a$ (Merritt 1985): the consistency limit `anisotropy_limit`.
"""

from __future__ import annotations

from typing import Any, ClassVar

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
from ..validation import ParameterChecks
from ._base import ANISOTROPY_RADIUS, AbstractClusterModel, Interval, Parameter, optional_array

PLUMMER_LIMIT = 0.75
"""The Osipkov-Merritt consistency limit, r_a / a (module docstring)."""


class Plummer(AbstractClusterModel):
    """The Plummer sphere of 3D half-mass radius `r_h` (pc)."""

    NAME: ClassVar[str] = "plummer"
    BUILDER: ClassVar[str] = "plummer_builder"
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = (
        Parameter("r_h", Interval(0.0), 1.0, "3D half-mass radius", "pc", audit=(1.0, (1e-3, 1e3))),
        ANISOTROPY_RADIUS,
    )

    r_h: Array = eqx.field(converter=jnp.asarray)
    total_mass: Array = eqx.field(default=1.0, converter=jnp.asarray)
    G: float = eqx.field(static=True, default=G_PHYSICAL)
    ra: Array | None = eqx.field(default=None, converter=optional_array)

    @classmethod
    def check_relations(cls, checks: ParameterChecks, values: dict[str, Any]) -> None:
        ra = values.get("ra")
        if ra is None:
            return
        limit = PLUMMER_LIMIT * plummer_scale_radius(values["r_h"])
        bad = ra < limit
        # Under an eager jax.grad `bad` is concrete while ra and the limit are tracers.
        traced = any(isinstance(v, jax.core.Tracer) for v in (bad, ra, limit))
        shown = "" if traced else f" = {float(limit):.6g} pc, got ra = {float(ra):.6g}"
        checks.condition(
            bad,
            f"ra must be >= 0.75 a (the Osipkov-Merritt consistency limit of the Plummer model, a = 0.766 r_h){shown}",
        )

    def anisotropy_limit(self) -> Array:
        """The smallest consistent Osipkov-Merritt radius, 0.75 a (pc)."""
        return PLUMMER_LIMIT * self.scale_radius

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
        self._check_isotropic()
        q = materialize(sample_speed_fraction(jax.random.uniform(key, radii.shape, radii.dtype)))
        return self.escape_speed(radii) * q
