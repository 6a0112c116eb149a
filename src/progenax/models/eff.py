r"""The Elson, Fall & Freeman (1987) model, optionally truncated at `r_t`.

$\rho(r) \propto (1 + r^2/a^2)^{-(\gamma+1)/2}$ for $r \le r_t$ (the formulas,
series and the scale radius $a$ from $r_h$: `progenax.profiles.eff`). Radii by
inverse CDF of $M(<r)$. **Velocities come from the model's isotropic DF**, the
generic Eddington inversion of its density in its potential
(`progenax.models.eddington`), or with `ra` (pc) from its Osipkov-Merritt DF;
every star is bound. The potential, with $p = (\gamma - 1)/2$, $q = r/a$:

$$\Phi(r) = -\frac{G M(<r)}{r} - 4\pi G\int_r^{r_t}\rho\,r'\,dr'
= -\frac{G M(<r)}{r} - 2\pi G\rho_0 a^2\,(1+q^2)^{-p}\,\frac{1 - e^{-p\Delta}}{p},$$

$\Delta = \ln\frac{1+q_t^2}{1+q^2}$ ($e^{-p\Delta} = 0$ untruncated, $-GM/r$ beyond
$r_t$), smooth in $\gamma$ through $\gamma = 1$. **A truncated model** has a density
jump at $r_t$, which no non-negative isotropic DF reproduces (Eddington's formula
gains $-\rho(r_t)/[2(\mathcal E - \Psi_t)^{3/2}]$ there); its stars take the DF of the
continuous part ($f = 0$ for $\mathcal E \le \Psi(r_t)$: no orbit leaves $r_t$),
whose density falls below the model's in the outermost shells (docs/builders.md).
Positions stay about the model centre (an untruncated model with gamma <= 5 has a
centre of mass of infinite variance).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from .._compile import at_top_level
from .._fusion import materialize
from .._types import Array, ArrayLike
from ..profiles.eff import (
    TRUNCATED_HALF_MASS_MESSAGE,
    UNTRUNCATED_GAMMA_NOTE,
    eff_density,
    eff_density_norm,
    eff_mass_fraction,
    eff_sample_radii,
    eff_scale_radius,
    eff_velocity_dispersion,
    log1p_square,
    truncated_half_mass_unreachable,
    untruncated_gamma_floor,
)
from ..sampling import uniform_open
from ..units import G_PHYSICAL
from ..validation import ParameterChecks, without_checks
from ._base import ANISOTROPY_RADIUS, AbstractClusterModel, Interval, Parameter, optional_array
from ._math import hermite, one_minus_exp_over


def untruncated_gamma(dtype) -> Interval:
    """gamma's support without r_t: finite mass needs gamma > 2, and a sample the
    dtype can hold needs gamma > `untruncated_gamma_floor(dtype)` (2.153 in
    float64, 2.544 in float32); with r_t any gamma > 0."""
    return Interval(untruncated_gamma_floor(dtype))


def _one_program_when_eager(method):
    """`method(model, *arrays)` compiled as one program, once per shape, when called
    outside any transformation (a user's loop over `model.density(r)`): run
    op by op, its loops (the scale-radius solve, the series' Horner scan)
    close over new functions at every call, and JAX compiled each anew (25 ms
    to 0.29 s) and kept every program: the process grew by 3 MB a call and
    ran out of memory maps after about 700. Inside a builder's trace nothing
    changes. The model's parameters were checked when it was made."""
    compiled = jax.jit(without_checks(method))

    @functools.wraps(method)
    def call(self, *arrays: ArrayLike) -> Array:
        return compiled(self, *map(jnp.asarray, arrays)) if at_top_level() else method(self, *arrays)

    call.compiled = compiled  # its cache, for tests
    return call


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
        ANISOTROPY_RADIUS,
    )
    CENTRE_POSITIONS: ClassVar[bool] = False

    gamma: Array = eqx.field(converter=jnp.asarray)
    r_h: Array = eqx.field(converter=jnp.asarray)
    r_t: Array | None = eqx.field(default=None, converter=optional_array)
    total_mass: Array = eqx.field(default=1.0, converter=jnp.asarray)
    G: float = eqx.field(static=True, default=G_PHYSICAL)
    ra: Array | None = eqx.field(default=None, converter=optional_array)

    @classmethod
    def check_relations(cls, checks: ParameterChecks, values: dict[str, Any]) -> None:
        if values["r_t"] is None:
            dtype = values["gamma"].dtype
            note = UNTRUNCATED_GAMMA_NOTE.format(dtype=dtype)
            values["gamma"] = untruncated_gamma(dtype).check(checks, "gamma", values["gamma"], note)
        else:
            r_h, r_t, gamma = values["r_h"], values["r_t"], values["gamma"]
            bad = truncated_half_mass_unreachable(r_h, r_t, gamma)
            message = TRUNCATED_HALF_MASS_MESSAGE
            if not any(isinstance(v, jax.core.Tracer) for v in (r_h, r_t, gamma)):
                message += f"; got r_h = {float(r_h):.6g}, r_t = {float(r_t):.6g}, gamma = {float(gamma):.6g}"
            checks.condition(bad, message)

    @classmethod
    def from_record(cls, params: dict[str, Any], total_mass=None, G: float = G_PHYSICAL):
        r_t = params.get("r_t")
        if r_t is not None and not isinstance(r_t, jax.core.Tracer) and not bool(jnp.isfinite(jnp.asarray(r_t))):
            params = {k: v for k, v in params.items() if k != "r_t"}  # recorded as inf: untruncated
        return super().from_record(params, total_mass, G)

    @property
    @_one_program_when_eager
    def scale_radius(self) -> Array:
        """Scale radius a (pc) that gives the half-mass radius r_h."""
        return eff_scale_radius(self.r_h, self.gamma, self.r_t)

    def profile(self) -> EFFProfile:
        """The model with its scale radius solved once: what every function and
        sampler below evaluates (each solve of `a` in a graph costs compile time)."""
        a = self.scale_radius
        # The parameters were checked when the model was made: checks of a here
        # would fire before theirs under jit (gamma near 2 makes a non-finite).
        norm = without_checks(eff_density_norm)(self.gamma, a, self.r_t)
        return EFFProfile(self.gamma, self.r_h, a, self.r_t, self.total_mass, self.G, norm, self.ra)

    @property
    def outer_radius(self) -> Array | None:
        return self.r_t

    @_one_program_when_eager
    def mass_fraction(self, r: ArrayLike) -> Array:
        return self.profile().mass_fraction(r)

    @_one_program_when_eager
    def density(self, r: ArrayLike) -> Array:
        return self.profile().density(r)

    @_one_program_when_eager
    def potential(self, r: ArrayLike) -> Array:
        """Phi(r) in (km/s)^2 (module docstring)."""
        return self.profile().potential(r)

    @_one_program_when_eager
    def velocity_dispersion(self, r: ArrayLike) -> Array:
        """One-dimensional isotropic Jeans dispersion sigma(r), km/s."""
        return eff_velocity_dispersion(r, self.gamma, self.scale_radius, self.total_mass, self.G, self.r_t)

    def sample_radii(self, key: Array, n: int, dtype) -> Array:
        return self.profile().sample_radii(key, n, dtype)

    def sample_speeds(self, key: Array, radii: Array) -> Array:
        return self.profile().tabulated().sample_speeds(key, radii)

    def sample_phase_space(self, keys, n: int, dtype) -> tuple[Array, Array]:
        """Radii by the closed-form inverse of M(<r), velocities from the DF
        (isotropic, or Osipkov-Merritt with `ra`), through `profile().tabulated()`."""
        return self.profile().tabulated().sample_phase_space(keys, n, dtype)


class EFFProfile(AbstractClusterModel):
    """An EFF model with its scale radius `a` (pc) given (`EFF.profile`); not
    registered: builders and files name the `EFF` model."""

    PARAMETERS: ClassVar[tuple[Parameter, ...]] = (ANISOTROPY_RADIUS,)

    gamma: Array
    r_h: Array
    a: Array
    r_t: Array | None
    total_mass: Array
    G: float = eqx.field(static=True)
    density_norm: Array
    """The density's Beta-function normaliser m_t (`eff_density_norm`), computed
    once: each evaluation, differentiated, costs compile time."""
    ra: Array | None = None
    mass_table: tuple[Array, Array, Array] | None = None
    """(step, m, dm/dx) of M(<r)/M on x = ln(r/r_h) from `_TABLE_FIRST` (`tabulated`), or None."""

    @property
    def outer_radius(self) -> Array | None:
        return self.r_t

    def tabulated(self) -> EFFProfile:
        """The profile whose M(<r) is a cubic Hermite table of the series (4901 nodes,
        step 0.01 in ln r, exact slopes dm/dx = 4 pi r^3 rho / M: 1e-10 relative)
        instead of the 64-term series at every point: what the DF sampler evaluates
        at ~2e5 points, twice differentiated (most of eff_builder's compile)."""
        return eqx.tree_at(lambda p: p.mass_table, self, _mass_table(self), is_leaf=lambda v: v is None)

    def mass_fraction(self, r: ArrayLike) -> Array:
        return _radial_mass_fraction(jnp.asarray(r), self)

    def density(self, r: ArrayLike) -> Array:
        return eff_density(r, self.gamma, self.a, self.total_mass, self.r_t, norm=self.density_norm)

    def potential(self, r: ArrayLike) -> Array:
        return _radial_potential(jnp.asarray(r), self)

    def _potential(self, r: Array) -> Array:
        a, gamma = self.a, jnp.asarray(self.gamma)
        pos = r > 0  # double where: M(<r)/r -> 0 at r = 0
        inner = jnp.where(pos, self.mass_fraction(r) / jnp.where(pos, r, 1.0), 0.0)
        p = 0.5 * (gamma - 1.0)
        q2 = (r / a) ** 2
        if self.r_t is None:
            outer = jnp.exp(-p * jnp.log1p(q2)) / p
        else:
            q2 = jnp.minimum(q2, (self.r_t / a) ** 2)
            L = jnp.log1p(q2) - jnp.log1p((self.r_t / a) ** 2)  # -Delta <= 0
            outer = jnp.exp(-p * jnp.log1p(q2)) * one_minus_exp_over(p, L)
        rho0 = self.density(jnp.zeros((), r.dtype))
        return -self.G * (self.total_mass * inner + 2.0 * jnp.pi * rho0 * a**2 * outer)

    def sample_radii(self, key: Array, n: int, dtype) -> Array:
        """Radii (pc) by the closed-form inverse of M(<r) (`eff_sample_radii`)."""
        return materialize(eff_sample_radii(uniform_open(key, (n,), dtype), self.gamma, self.a, self.r_t))


# -- radial derivatives in closed form ---------------------------------------------
# The generic DF differentiates the potential and the mass twice in r (forward
# mode), then the builder's gradient differentiates all of it once more: through
# the 64-term series of M(<r) that is most of eff_builder's compile. In r the
# derivatives are closed forms, dM/dr = 4 pi r^2 rho and dPhi/dr = G M(<r) / r^2,
# so the series is differentiated only in the parameters (forward mode, r fixed).


def _parameter_tangent(fn, r, profile, d_profile):
    """fn(r, profile) and its tangent in the parameters (none when all are symbolic zeros)."""
    leaves = jax.tree_util.tree_leaves(d_profile, is_leaf=lambda t: isinstance(t, SymbolicZero))
    if all(isinstance(t, SymbolicZero) for t in leaves):
        return fn(r, profile), None
    d_profile = jax.tree_util.tree_map(
        lambda t, p: jnp.zeros_like(p) if isinstance(t, SymbolicZero) else t,
        d_profile,
        profile,
        is_leaf=lambda t: isinstance(t, SymbolicZero),
    )
    return jax.jvp(lambda q: fn(r, q), (profile,), (d_profile,))


def _with_radial(value, d_param, slope, dr):
    tangent = slope * (jnp.zeros_like(value) if isinstance(dr, SymbolicZero) else dr)
    return value, tangent if d_param is None else tangent + d_param


_TABLE_FIRST, _TABLE_LAST, _TABLE_NODES = -12.0, 37.0, 4901  # the DF's points lie in [-10, 36]


@without_checks
def _mass_table(profile: EFFProfile) -> tuple[Array, Array, Array]:
    """(step, m, dm/dx) on the nodes of `EFFProfile.tabulated` (the builder checked
    the parameters: the profile functions' own checks are dropped, `without_checks`)."""
    dtype = jnp.result_type(profile.r_h, float)
    end = _TABLE_LAST if profile.r_t is None else jnp.log(profile.r_t / profile.r_h)
    step = (end - _TABLE_FIRST) / (_TABLE_NODES - 1)
    r = profile.r_h * jnp.exp(_TABLE_FIRST + step * jnp.arange(_TABLE_NODES, dtype=dtype))
    if profile.r_t is not None:
        r = jnp.minimum(r, profile.r_t)  # the last node is r_t itself, inside
    m = _mass_fraction_series(r, profile)
    # dm/dx = 4 pi r^3 rho / M = (2 / m_t) q^3 (1 + q^2)^(-(gamma+1)/2), q = r/a, in
    # logarithms: r^3 overflows float32 beyond 7e12 r_h, inside the table (to e^37 r_h).
    q = r / profile.a
    log_dm = 3.0 * jnp.log(q) - 0.5 * (profile.gamma + 1.0) * log1p_square(q)
    dm = 2.0 / profile.density_norm * jnp.exp(log_dm)
    return step, m, dm


@without_checks
def _mass_fraction_series(r: Array, profile: EFFProfile) -> Array:
    if profile.mass_table is None:
        return eff_mass_fraction(r, profile.gamma, profile.a, profile.r_t)
    step, m, dm = profile.mass_table
    pos = r > 0  # double where: ln r at r = 0
    x = jnp.log(jnp.where(pos, r, profile.r_h) / profile.r_h)
    inside = hermite(m, dm, _TABLE_FIRST, step, x)
    core = m[0] * jnp.exp(3.0 * (jnp.minimum(x, _TABLE_FIRST) - _TABLE_FIRST))  # M ~ r^3 below the table
    value = jnp.where(x < _TABLE_FIRST, core, inside)
    if profile.r_t is not None:
        value = jnp.where(r >= profile.r_t, 1.0, value)
    return jnp.where(pos, value, 0.0)


_radial_mass_fraction = jax.custom_jvp(_mass_fraction_series)


@without_checks
def _radial_mass_fraction_jvp(primals, tangents):
    r, profile = primals
    dr, d_profile = tangents
    value, d_param = _parameter_tangent(_mass_fraction_series, r, profile, d_profile)
    slope = 4.0 * jnp.pi * r**2 * profile.density(r) / profile.total_mass
    return _with_radial(value, d_param, slope, dr)


_radial_mass_fraction.defjvp(_radial_mass_fraction_jvp, symbolic_zeros=True)


@without_checks
def _potential_formula(r: Array, profile: EFFProfile) -> Array:
    return profile._potential(r)


_radial_potential = jax.custom_jvp(_potential_formula)


@without_checks
def _radial_potential_jvp(primals, tangents):
    r, profile = primals
    dr, d_profile = tangents
    value, d_param = _parameter_tangent(_potential_formula, r, profile, d_profile)
    pos = r > 0  # double where: G M(<r) / r^2 -> 0 at r = 0
    # In q = r / a, then / a^2: the DF differentiates this slope twice more, and
    # the powers of 1/r^2 that gives overflowed float32 (r^-8 at e^-10 r_h for
    # r_h = 0.01 pc: the float32 gradient in r_h was NaN); q is near 1 there.
    q_safe = jnp.where(pos, r / profile.a, 1.0)
    slope = jnp.where(pos, profile.G * profile.total_mass * profile.mass_fraction(r) / q_safe**2 / profile.a**2, 0.0)
    return _with_radial(value, d_param, slope, dr)


_radial_potential.defjvp(_radial_potential_jvp, symbolic_zeros=True)
