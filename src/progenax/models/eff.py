r"""The Elson, Fall & Freeman (1987) model, optionally truncated at `r_t`.

$\rho(r) \propto (1 + r^2/a^2)^{-(\gamma+1)/2}$ for $r \le r_t$ (the formulas,
series and the scale radius $a$ from $r_h$: `progenax.profiles.eff`). Radii by
inverse CDF of $M(<r)$. **Velocities come from the isotropic Jeans equation**:
each component is Gaussian with the local dispersion $\sigma(r)$, not the
model's DF, so a few stars may exceed the local escape speed. Positions stay
about the model centre (an untruncated model with gamma <= 5 has a centre of
mass of infinite variance).
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._fusion import materialize
from .._types import Array, ArrayLike
from ..profiles.eff import (
    TRUNCATED_HALF_MASS_MESSAGE,
    UNTRUNCATED_GAMMA_NOTE,
    eff_density,
    eff_mass_fraction,
    eff_sample_radii,
    eff_scale_radius,
    eff_velocity_dispersion,
    truncated_half_mass_unreachable,
    untruncated_gamma_floor,
)
from ..sampling import isotropic_directions, uniform_open
from ..units import G_PHYSICAL
from ..validation import ParameterChecks
from ._base import AbstractClusterModel, Interval, Parameter, optional_array


def untruncated_gamma(dtype) -> Interval:
    """gamma's support without r_t: finite mass needs gamma > 2, and a sample the
    dtype can hold needs gamma > `untruncated_gamma_floor(dtype)` (2.153 in
    float64, 2.544 in float32); with r_t any gamma > 0."""
    return Interval(untruncated_gamma_floor(dtype))


class EFF(AbstractClusterModel):
    """EFF model: surface-density slope `gamma`, 3D half-mass radius `r_h` (pc),
    truncation radius `r_t` (pc, or None for the infinite model)."""

    NAME: ClassVar[str] = "eff"
    BUILDER: ClassVar[str] = "eff_builder"
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = (
        Parameter(
            "gamma",
            Interval(0.0),
            3.0,
            "surface-density slope (> 2.153 untruncated in float64, > 2.544 in float32; > 0 with r_t)",
            audit=(3.0, (2.25, 12.0)),
        ),
        Parameter("r_h", Interval(0.0), 1.0, "3D half-mass radius", "pc", audit=(1.0, (1e-3, 1e3))),
        Parameter("r_t", Interval(0.0), None, "truncation radius (None: untruncated)", "pc"),
    )
    CENTRE_POSITIONS: ClassVar[bool] = False

    gamma: Array = eqx.field(converter=jnp.asarray)
    r_h: Array = eqx.field(converter=jnp.asarray)
    r_t: Array | None = eqx.field(default=None, converter=optional_array)
    total_mass: Array = eqx.field(default=1.0, converter=jnp.asarray)
    G: float = eqx.field(static=True, default=G_PHYSICAL)

    @classmethod
    def check_relations(cls, checks: ParameterChecks, values: dict[str, Any]) -> None:
        if values["r_t"] is None:
            dtype = values["gamma"].dtype
            note = UNTRUNCATED_GAMMA_NOTE.format(dtype=dtype)
            values["gamma"] = untruncated_gamma(dtype).check(checks, "gamma", values["gamma"], note)
        else:
            bad = truncated_half_mass_unreachable(values["r_h"], values["r_t"], values["gamma"])
            checks.condition(bad, TRUNCATED_HALF_MASS_MESSAGE)

    @classmethod
    def from_record(cls, params: dict[str, Any], total_mass=None, G: float = G_PHYSICAL):
        r_t = params.get("r_t")
        if r_t is not None and not isinstance(r_t, jax.core.Tracer) and not bool(jnp.isfinite(jnp.asarray(r_t))):
            params = {k: v for k, v in params.items() if k != "r_t"}  # recorded as inf: untruncated
        return super().from_record(params, total_mass, G)

    @property
    def scale_radius(self) -> Array:
        """Scale radius a (pc) that gives the half-mass radius r_h."""
        return eff_scale_radius(self.r_h, self.gamma, self.r_t)

    def mass_fraction(self, r: ArrayLike) -> Array:
        return eff_mass_fraction(r, self.gamma, self.scale_radius, self.r_t)

    def density(self, r: ArrayLike) -> Array:
        return eff_density(r, self.gamma, self.scale_radius, self.total_mass, self.r_t)

    def velocity_dispersion(self, r: ArrayLike) -> Array:
        """One-dimensional isotropic Jeans dispersion sigma(r), km/s."""
        return eff_velocity_dispersion(r, self.gamma, self.scale_radius, self.total_mass, self.G, self.r_t)

    def sample_phase_space(self, keys, n: int, dtype) -> tuple[Array, Array]:
        """Radii by inverse CDF; Gaussian velocities of the local Jeans dispersion
        (the fourth key, for velocity directions, is not used)."""
        k_r, k_rdir, k_v, _ = keys
        a = self.scale_radius
        radii = materialize(eff_sample_radii(uniform_open(k_r, (n,), dtype), self.gamma, a, self.r_t))
        positions = radii[:, None] * isotropic_directions(k_rdir, n, dtype)
        sigma = eff_velocity_dispersion(radii, self.gamma, a, self.total_mass, self.G, self.r_t)
        return positions, materialize(sigma)[:, None] * jax.random.normal(k_v, (n, 3), dtype)
