r"""The lowered isothermal family (King 1966, LIMEPY: Gieles & Zocchi 2015) as a model.

The isotropic DF $f \propto E_\gamma(g, \varepsilon)$ ($g = 0$ Woolley, 1 King,
2 Wilson, any $0 \le g < 3.5$) with central potential $W_0$, optionally with
Michie-type radial anisotropy beyond $r_a$ (King radii). The profile is solved
once when the model is made (`progenax.profiles.king.solve_king_profile`; a
model read back from a file solves it when first asked);
speeds come from the model's own DF (`progenax.kinematics.king_df`), so every
star is bound and the cluster is in equilibrium without rescaling.

**Scaling** to physical units: the length unit $L = r_h / \hat r_h$ (pc per King
radius) and the velocity scale $s = \sqrt{4\pi G M / (9 L \hat M_t)}$, hatted
quantities in King units, $M$ the cluster's mass (`velocity_scale`: the one
home of that formula).

**Anisotropic models** draw the speed from the marginal of the anisotropic DF at
the star's radius, then the cosine $\mu = v_r/v$ from its conditional density
$\propto e^{a\mu^2}$, $a = p^2 v^2/(2s^2)$, a random sign, and a uniform azimuth of
$v_t$ about the radial direction.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._fusion import materialize
from .._types import Array, ArrayLike
from ..kinematics.king_df import sample_radial_cosine, sample_speed_fraction, speed_table
from ..profiles.king import (
    G_MAX,
    W0_MAX,
    W0_MIN,
    KingProfile,
    king_potential,
    king_radius_of_potential,
    king_sample_radii,
    king_velocity_scale_squared,
    solve_king_profile,
)
from ..sampling import isotropic_directions, uniform_open
from ..units import G_PHYSICAL
from ..validation import as_float
from ._base import AbstractClusterModel, Interval, Parameter, RecordedModel

W0_SUPPORT = Interval(W0_MIN, W0_MAX, lower_inclusive=True, upper_inclusive=True)
MULTIMASS_KEYS = ("delta", "component_masses")
"""Recorded parameters that mark a multi-mass cluster (no single-mass model)."""


def _as_float(x):
    """A float array in `x`'s own floating dtype (`validation.as_float`)."""
    return None if x is None else as_float(x)


class LoweredIsothermal(AbstractClusterModel):
    """A single-mass lowered-isothermal model: `W0`, `g`, `ra` (King radii, or None),
    3D half-mass radius `r_h` (pc). `profile_points` and `speed_table_size` are the
    grid sizes of the profile solve and the speed table (static). `King` is the
    g = 1 member under its own name."""

    NAME: ClassVar[str] = "limepy"
    BUILDER: ClassVar[str] = "limepy_builder"
    # No audit points: limepy_builder's entries are written out in audit.py
    # (with Q = 0.5, so that they share one compile of the builder).
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = (
        Parameter("W0", W0_SUPPORT, 6.0, "dimensionless central potential"),
        Parameter("g", Interval(0.0, G_MAX, lower_inclusive=True), 1.0, "truncation index (1: King)"),
        Parameter("ra", Interval(0.0), None, "anisotropy radius (None: isotropic)", "King radii"),
        Parameter("r_h", Interval(0.0), 1.0, "3D half-mass radius", "pc"),
        Parameter(
            "profile_points", Interval(64, lower_inclusive=True), 1024, "nodes of the profile solve", static=True
        ),
        # speed_table itself runs from 2 rows and 1 column; below 8 (a cell of 1/8 in
        # v / v_esc, 1/7 of W0 per row) the cubic-Hermite CDF is too coarse to be useful.
        Parameter(
            "speed_table_size",
            Interval(8, lower_inclusive=True),
            128,
            "rows and columns of the speed table",
            static=True,
        ),
    )
    CENTRE_POSITIONS: ClassVar[bool] = False
    DEFAULT_Q: ClassVar[float | None] = None

    W0: Array
    g: Array
    r_h: Array
    ra: Array | None
    profile: KingProfile | None
    """The solved profile; None in a model read back from a file
    (`solve=False`), which solves it on each use instead (12 s, un-jitted)."""
    total_mass: Array
    G: float = eqx.field(static=True)
    profile_points: int = eqx.field(static=True)
    speed_table_size: int = eqx.field(static=True)

    def __init__(
        self,
        W0=6.0,
        g=1.0,
        r_h=1.0,
        ra=None,
        total_mass=1.0,
        G=G_PHYSICAL,
        *,
        profile_points=1024,
        speed_table_size=128,
        solve=True,
    ):
        self.r_h = _as_float(r_h)
        dtype = self.r_h.dtype
        self.W0 = jnp.asarray(W0).astype(dtype)
        self.g = self.held_g(g, dtype)
        self.ra = None if ra is None else jnp.asarray(ra).astype(dtype)
        self.total_mass = jnp.asarray(total_mass)
        self.G = G
        self.profile_points, self.speed_table_size = int(profile_points), int(speed_table_size)
        self.profile = self.solve() if solve else None

    @staticmethod
    def held_g(g, dtype):
        """g as the model (and the multi-mass builder) holds it: a float array of
        `dtype` (differentiable); `King` holds a static 1."""
        return jnp.asarray(g).astype(dtype)

    @classmethod
    def from_record(cls, params: dict[str, Any], total_mass=None, G: float = G_PHYSICAL):
        """The model of a file: its profile is solved only when asked for."""
        if any(k in params for k in MULTIMASS_KEYS):
            return RecordedModel(cls.NAME, dict(params), total_mass, G)
        kw = {p.name: params[p.name] for p in cls.PARAMETERS if p.name in params}
        return cls(**kw, total_mass=1.0 if total_mass is None else total_mass, G=G, solve=False)

    def prepared(self) -> LoweredIsothermal:
        """The model with its profile solved (once), e.g. for a model read from a file."""
        if self.profile is not None:
            return self
        return eqx.tree_at(lambda m: m.profile, self, self.solve(), is_leaf=lambda x: x is None)

    def solve(self) -> KingProfile:
        """The profile of (W0, g, ra) on `profile_points` nodes (`solve_king_profile`)."""
        return solve_king_profile(self.W0, self.g, self.ra, num_points=self.profile_points)

    @property
    def solved(self) -> KingProfile:
        return self.solve() if self.profile is None else self.profile

    def record(self) -> dict[str, Array]:
        params = {"W0": self.W0, "r_h": self.r_h, "r_t": self.r_t, "g": self.g}
        if self.ra is not None:
            params["ra"] = self.ra
        return params

    # -- scales -------------------------------------------------------------------
    @property
    def length_unit(self) -> Array:
        """L = r_h / r_h(model): pc per King radius."""
        return self.r_h / self.solved.r_h

    @property
    def r_t(self) -> Array:
        """Tidal radius (pc)."""
        p = self.solved
        return p.r_t * (self.r_h / p.r_h)

    def velocity_scale(self) -> Array:
        r"""$s = \sqrt{4\pi G M / (9 L \hat M_t)}$ (km/s), the DF's velocity unit."""
        p = self.solved
        return jnp.sqrt(king_velocity_scale_squared(self.G, self.total_mass, self.r_h / p.r_h, p.total_mass))

    # -- the model's functions ------------------------------------------------------
    def dimensionless_potential(self, r: ArrayLike) -> Array:
        """W(r) >= 0 at radii r (pc); 0 beyond the tidal radius."""
        return jnp.maximum(king_potential(self.solved, jnp.asarray(r) / self.length_unit), 0.0)

    def density(self, r: ArrayLike) -> Array:
        """The solved profile's density at r (pc), zero beyond r_t."""
        p, L = self.solved, self.length_unit
        scale = self.total_mass / (p.total_mass * L**3)
        return scale * jnp.interp(jnp.asarray(r) / L, p.r, p.density, right=0.0)

    def mass_fraction(self, r: ArrayLike) -> Array:
        p = self.solved
        return jnp.interp(jnp.asarray(r) / self.length_unit, p.r, p.mass, right=p.total_mass) / p.total_mass

    def potential(self, r: ArrayLike) -> Array:
        """Phi(r) = -(G M / r_t + s^2 W(r)) inside r_t, -G M / r outside, (km/s)^2."""
        r = jnp.asarray(r)
        s = self.velocity_scale()
        outside = -self.G * self.total_mass / jnp.maximum(r, self.r_t)
        return outside - jnp.where(r < self.r_t, s**2 * self.dimensionless_potential(r), 0.0)

    def escape_speed_of_W(self, W: Array) -> Array:
        """v_e = s sqrt(2 W) (km/s, to the tidal boundary), zero-safe at W = 0."""
        pos = W > 0  # double where: sqrt'(0) never reaches a gradient
        return jnp.where(pos, jnp.sqrt(2.0 * jnp.where(pos, W, 1.0)), 0.0) * self.velocity_scale()

    def _speed_table(self):
        return speed_table(self.W0, self.g, num_W=self.speed_table_size, num_q=self.speed_table_size)

    def sample_speeds(self, key: Array, radii: Array) -> Array:
        """Isotropic DF speeds (km/s) at radii (pc)."""
        if self.ra is not None:
            raise ValueError("speeds at given radii need an isotropic model (ra=None)")
        W = self.dimensionless_potential(radii)
        u = uniform_open(key, radii.shape, radii.dtype)
        return sample_speed_fraction(self._speed_table(), W, u) * self.escape_speed_of_W(W)

    def sample_phase_space(self, keys, n: int, dtype) -> tuple[Array, Array]:
        positions, velocities = self._phase_space(keys, n, dtype)
        return positions.astype(dtype), velocities.astype(dtype)  # a float32 sample of a float64 model

    def _phase_space(self, keys, n: int, dtype) -> tuple[Array, Array]:
        k_r, k_rdir, k_v, k_vdir = keys
        r_model, W = king_sample_radii(self.solved, uniform_open(k_r, (n,), dtype))
        pos = W > 0  # double where: sqrt'(0) never reaches a gradient
        v_escape = jnp.where(pos, jnp.sqrt(2.0 * jnp.where(pos, W, 1.0)), 0.0)
        radii = materialize(r_model * self.length_unit)
        s = self.velocity_scale()
        if self.ra is not None:
            return self._anisotropic(k_rdir, k_v, r_model, W, radii, v_escape * s, dtype)
        q = sample_speed_fraction(self._speed_table(), W, uniform_open(k_v, (n,), dtype))
        speeds = materialize(q * v_escape * s)
        positions = radii[:, None] * isotropic_directions(k_rdir, n, dtype)
        return positions, speeds[:, None] * isotropic_directions(k_vdir, n, dtype)

    def _anisotropic(self, k_dir, k_v, r_model, W, radii, v_escape, dtype):
        """Positions and velocities from the anisotropic DF (see the module docstring)."""
        n = r_model.shape[0]
        k_q, k_mu, k_sign, k_psi = jax.random.split(k_v, 4)
        k_cos, k_phi = jax.random.split(k_dir)
        inv_ra2 = 1.0 / self.ra**2
        size = self.speed_table_size
        table = speed_table(
            self.W0,
            self.g,
            num_W=size,
            num_q=size,
            row_anisotropy=lambda Wi: king_radius_of_potential(self.solved, Wi) ** 2 * inv_ra2,
        )
        q = sample_speed_fraction(table, W, uniform_open(k_q, (n,), dtype))
        mu = sample_radial_cosine(r_model**2 * inv_ra2 * W * q**2, uniform_open(k_mu, (n,), dtype))
        sign = jnp.where(jax.random.bernoulli(k_sign, 0.5, (n,)), 1.0, -1.0).astype(dtype)
        tangential = 1.0 - mu * mu
        ok = tangential > 0  # double where: sqrt'(0) never reaches a gradient
        sin_mu = jnp.where(ok, jnp.sqrt(jnp.where(ok, tangential, 1.0)), 0.0)
        speeds = materialize(q * v_escape)
        v_r, v_t = speeds * sign * mu, speeds * sin_mu
        psi = jax.random.uniform(k_psi, (n,), dtype, 0.0, 2.0 * jnp.pi)
        cos_t = jax.random.uniform(k_cos, (n,), dtype, -1.0, 1.0)
        phi = jax.random.uniform(k_phi, (n,), dtype, 0.0, 2.0 * jnp.pi)
        sin_t = jnp.sqrt(jnp.clip(1.0 - cos_t**2, 0.0, 1.0))
        cos_p, sin_p = jnp.cos(phi), jnp.sin(phi)
        e_r = jnp.stack([sin_t * cos_p, sin_t * sin_p, cos_t], axis=-1)
        e_theta = jnp.stack([cos_t * cos_p, cos_t * sin_p, -sin_t], axis=-1)
        e_phi = jnp.stack([-sin_p, cos_p, jnp.zeros_like(phi)], axis=-1)
        velocities = (
            v_r[:, None] * e_r + (v_t * jnp.cos(psi))[:, None] * e_theta + (v_t * jnp.sin(psi))[:, None] * e_phi
        )
        return radii[:, None] * e_r, velocities
