r"""The model layer's contract: what a cluster model is and what it declares.

A model is an `equinox.Module` whose fields are its physical parameters (lengths
in pc) plus the cluster's `total_mass` (Msun) and `G` (pc Msun^-1 (km/s)^2 by
default), so that `density(r)` (Msun pc^-3), `enclosed_mass(r)` (Msun) and
`potential(r)` ((km/s)^2) are the cluster's own (`total_mass` is the drawn
stars' mass, unweighted: callers that weight stars, relaxation and the plot,
pass the weighted mass with `with_mass`). Each model class declares
its parameters once, in `PARAMETERS`: their supports (checked eagerly, or
under `jit` through `equinox.error_if`), defaults, units and the values the
gradient audit uses. Builders, the command line, the audit, relaxation, the
quick-look plot and the inference priors all read these declarations; nothing
outside `progenax.models` switches on a model's name.

A spherical model needs only `mass_fraction`, `density` and `potential`:
radii then come from a numerical inverse of $M(<r)$ and isotropic speeds from
the generic Eddington inversion of its own DF (`progenax.models.eddington`).
Models with closed forms (Plummer's DF, the lowered isothermal family's own DF)
override the samplers. A model that declares `ANISOTROPY_RADIUS` (an `ra` field)
is drawn from its Osipkov-Merritt DF when `ra` is set
(`osipkov_merritt.sample_osipkov_merritt`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, ArrayLike
from ..sampling import isotropic_directions, safe_norm, uniform_open
from ..units import G_PHYSICAL
from ..validation import ParameterChecks, check_scalar, check_static_int, deferred_checks
from .eddington import radii_from_mass_fraction, sample_eddington_speeds
from .osipkov_merritt import sample_osipkov_merritt


class NoAnalyticFormError(NotImplementedError, ValueError):
    """A model lacks what was asked of it (a density, a potential, a sampler)."""


REGISTRY: dict[str, type[AbstractClusterModel]] = {}
"""Model name -> class, filled as each model's module is imported."""


def optional_array(x):
    """A field converter: None stays None, anything else becomes an array."""
    return None if x is None else jnp.asarray(x)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A support: lower < x < upper, each end open or closed, either may be None."""

    lower: float | None = None
    upper: float | None = None
    lower_inclusive: bool = False
    upper_inclusive: bool = False

    def check(self, checks: ParameterChecks, name: str, value: ArrayLike, note: str = "") -> Array:
        """`value` as a float array, its range check (finite, in the interval)
        recorded in `checks`; `note` is appended to the message."""
        return checks.range(
            name,
            value,
            note=note,
            lower=self.lower,
            upper=self.upper,
            lower_inclusive=self.lower_inclusive,
            upper_inclusive=self.upper_inclusive,
        )

    def describe(self) -> str:
        lo = "(-inf" if self.lower is None else ("[" if self.lower_inclusive else "(") + f"{self.lower:g}"
        hi = "inf)" if self.upper is None else f"{self.upper:g}" + ("]" if self.upper_inclusive else ")")
        return f"{lo}, {hi}"


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One declared parameter of a model.

    - `name`: the keyword (also the builder keyword and the `--flag` of the
      command line); `doc`: one line; `unit`: e.g. "pc" or "" (dimensionless).
    - `support`: the `Interval` of allowed values.
    - `default`: the builder default (None: optional, absent by default).
    - `static`: a Python int fixed at trace time (a grid size), not traced; its
      support's (inclusive) lower end is the smallest allowed value.
    - `audit`: `(value, (low_edge, high_edge))` for the gradient audit, or None
      for a parameter the audit skips (static ones).
    """

    name: str
    support: Interval
    default: Any
    doc: str
    unit: str = ""
    static: bool = False
    audit: tuple[float, tuple[float, float]] | None = None


ANISOTROPY_RADIUS = Parameter("ra", Interval(0.0), None, "Osipkov-Merritt anisotropy radius (None: isotropic)", "pc")
r"""The Osipkov-Merritt `ra` (pc) of a spherical model drawn by the generic sampler:
a model that lists it in `PARAMETERS` (with an `ra` field, None by default) is
drawn from $f(Q)$, $Q = \mathcal E - L^2/(2r_a^2)$ (`osipkov_merritt.sample_osipkov_merritt`)."""


class AbstractClusterModel(eqx.Module):
    r"""A cluster's model: its density, mass, potential and how to sample it.

    **Subclasses define** the class variables `NAME` (registry key) and
    `PARAMETERS` (tuple of `Parameter`), the fields named in `PARAMETERS` plus
    `total_mass` and `G` (one of them `r_h`, the 3D half-mass radius in pc: the
    builders take their dtype from it and the generic samplers' grids scale
    with it), and the methods `mass_fraction(r)` ($M(<r)/M$),
    `density(r)` and `potential(r)`. They may override `sample_radii`,
    `sample_speeds` and `sample_phase_space` where a closed form exists, and
    `record()` to add derived quantities to the builder's `params`.
    """

    NAME: ClassVar[str] = ""
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = ()
    BUILDER: ClassVar[str] = "model_builder"
    """The exported builder that draws this model. A model without a named
    builder of its own is drawn by `model_builder`, and the gradient audit
    then checks its declared parameters (their `audit` values) through it."""
    DEFAULT_Q: ClassVar[float | None] = 0.5
    """The virial ratio the command line scales to by default (None: the DF's own
    equilibrium velocities, for models sampled from their DF without rescaling)."""
    CENTRE_POSITIONS: ClassVar[bool] = True
    """Whether builders move positions to the centre of mass (False for models
    whose centre of mass has a heavy-tailed scatter: they stay about the model
    centre at the origin)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("NAME"):  # its own name: a subclass does not take its parent's entry
            REGISTRY[cls.NAME] = cls

    # -- declared parameters --------------------------------------------------
    @property
    def name(self) -> str:
        return self.NAME

    @classmethod
    def parameter(cls, name: str) -> Parameter:
        for p in cls.PARAMETERS:
            if p.name == name:
                return p
        raise KeyError(f"model {cls.NAME!r} has no parameter {name!r}")

    @classmethod
    def checked(cls, checks: ParameterChecks, **values) -> dict[str, Any]:
        """Validate builder arguments against the declared supports.

        Traced parameters are checked through `checks` (eagerly when concrete,
        under `jit` at run time) and must be finite; a None value of an
        optional parameter stays None (inf is refused: None is how to leave it
        out, and the message says so); unknown names raise `TypeError`.
        """
        known = {p.name: p for p in cls.PARAMETERS}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise TypeError(f"model {cls.NAME!r} takes no parameter(s) {unknown}; it takes {sorted(known)}")
        out = {}
        for name, p in known.items():
            value = values.get(name, p.default)
            if p.static:
                out[name] = check_static_int(name, value, int(p.support.lower))
            elif value is None:
                out[name] = value
            else:
                check_scalar(name, value)
                note = f"; to leave it out pass {name}=None ({p.doc})" if p.default is None else ""
                out[name] = p.support.check(checks, name, value, note)
        cls.check_relations(checks, out)
        return out

    @classmethod
    def check_relations(cls, checks: ParameterChecks, values: dict[str, Any]) -> None:
        """Constraints between parameters (none by default); override to add them."""

    def record(self) -> dict[str, Array]:
        """The parameters a builder records in `InitialConditions.params`."""
        return {
            p.name: getattr(self, p.name) for p in self.PARAMETERS if not p.static and getattr(self, p.name) is not None
        }

    @classmethod
    def from_record(cls, params: dict[str, Any], total_mass=None, G: float = G_PHYSICAL):
        """The model from recorded `params` (the declared parameters it finds there)."""
        kw = {p.name: params[p.name] for p in cls.PARAMETERS if p.name in params}
        mass = jnp.asarray(1.0 if total_mass is None else total_mass)
        return cls(**kw, total_mass=mass, G=G)

    def prepared(self) -> AbstractClusterModel:
        """The model with anything it computes lazily computed now (a model read
        from a file solves its profile here), for use in many calls or a loop."""
        return self

    def with_mass(self, total_mass: ArrayLike) -> AbstractClusterModel:
        """The same model for a cluster of total mass `total_mass` (Msun)."""
        return eqx.tree_at(lambda m: m.total_mass, self, jnp.asarray(total_mass))

    # -- the model's functions --------------------------------------------------
    def mass_fraction(self, r: ArrayLike) -> Array:
        r"""$M(<r)/M$ (dimensionless)."""
        raise NoAnalyticFormError(f"model {self.name!r} has no analytic enclosed mass")

    def density(self, r: ArrayLike) -> Array:
        r"""Mass density $\rho(r)$, Msun pc^-3 for the model's `total_mass`."""
        raise NoAnalyticFormError(
            f"model {self.name!r} has no analytic density: pass target= (a constant or a callable rho(x))"
        )

    def potential(self, r: ArrayLike) -> Array:
        r"""Gravitational potential $\Phi(r) < 0$ in (km/s)^2, zero at infinity."""
        raise NoAnalyticFormError(f"model {self.name!r} has no analytic potential")

    def enclosed_mass(self, r: ArrayLike) -> Array:
        """$M(<r)$ in Msun."""
        return self.total_mass * self.mass_fraction(r)

    def escape_speed(self, r: ArrayLike) -> Array:
        r"""$v_e(r) = \sqrt{-2\Phi(r)}$ in km/s."""
        return jnp.sqrt(-2.0 * self.potential(r))

    # -- sampling ---------------------------------------------------------------
    def sample_radii(self, key: Array, n: int, dtype) -> Array:
        """n radii (pc) distributed as the model's mass, by inverse CDF of M(<r)."""
        return radii_from_mass_fraction(self, uniform_open(key, (n,), dtype))

    @property
    def outer_radius(self) -> Array | None:
        """The radius (pc) where the density ends (None: it never does); the
        generic sampler's grids stop there (`progenax.models.eddington`)."""
        return None

    @property
    def anisotropy_radius(self) -> Array | None:
        """The Osipkov-Merritt radius (pc) of a model that declares `ANISOTROPY_RADIUS`; None: isotropic."""
        return getattr(self, "ra", None) if ANISOTROPY_RADIUS in self.PARAMETERS else None

    def _check_isotropic(self) -> None:
        if self.anisotropy_radius is not None:
            raise ValueError(f"speeds at given radii need an isotropic model (ra=None); {self.name!r} has ra set")

    def sample_speeds(self, key: Array, radii: Array) -> Array:
        """Speeds (km/s) at `radii` from the model's isotropic DF (Eddington inversion)."""
        self._check_isotropic()
        return sample_eddington_speeds(self, key, radii)

    def sample_phase_space(self, keys: tuple[Array, Array, Array, Array], n: int, dtype) -> tuple[Array, Array]:
        """Positions (pc) and velocities (km/s) of n stars about the model centre.

        `keys` = (radii, position directions, speeds, velocity directions). With
        `ra` set, velocities from the Osipkov-Merritt DF (same keys: the speed key
        draws the pseudo-speed, the velocity-direction key its direction).
        Returned in `dtype` (a float64 model sampled in float32 computes in
        float64).
        """
        k_r, k_rdir, k_v, k_vdir = keys
        radii = self.sample_radii(k_r, n, dtype)
        directions = isotropic_directions(k_rdir, n, dtype, stored=True)
        positions = radii[:, None] * directions
        ra = self.anisotropy_radius
        if ra is not None:
            velocities = sample_osipkov_merritt(self, ra, (k_v, k_vdir), radii, directions)
        else:
            velocities = self.sample_speeds(k_v, radii)[:, None] * isotropic_directions(k_vdir, n, dtype, stored=True)
        return positions.astype(dtype), velocities.astype(dtype)


class RecordedModel(AbstractClusterModel):
    """A cluster without an analytic model (fractal, gravoturbulent, or a file from
    an unknown builder): its name and parameters only. Asking it for a density,
    potential or samples raises `NoAnalyticFormError` naming the model."""

    label: str = eqx.field(static=True)
    params: dict[str, Array]
    total_mass: Array | None = None
    G: float = eqx.field(static=True, default=G_PHYSICAL)

    @property
    def name(self) -> str:
        return self.label

    def record(self) -> dict[str, Array]:
        return dict(self.params)

    def sample_radii(self, key, n, dtype):
        raise NoAnalyticFormError(f"model {self.name!r} cannot be sampled (no analytic model)")

    def sample_speeds(self, key, radii):
        raise NoAnalyticFormError(f"model {self.name!r} has no distribution function to draw speeds from")

    def sample_phase_space(self, keys, n, dtype):
        raise NoAnalyticFormError(f"model {self.name!r} cannot be sampled (no analytic model)")


def as_model(model: AbstractClusterModel | str) -> AbstractClusterModel:
    """A model as it is, or a bare name as a `RecordedModel` (containers built by hand)."""
    return RecordedModel(model, {}) if isinstance(model, str) else model


def density_at(model: AbstractClusterModel, x: Array) -> Array:
    """The model's density at positions x (..., 3) about the origin."""
    return model.density(safe_norm(x))


@deferred_checks
def prepared_density(model: AbstractClusterModel, total_mass: ArrayLike, radii: Array):
    """`model.prepared().with_mass(total_mass)` and its density at `radii`, in
    one program (eagerly, a King model's profile solve and density are a few
    hundred small operations, each compiled on its first call: 0.75 s; its
    checks are kept out of the program, so a compilation cache keeps it).
    Raises `NoAnalyticFormError` for a model without a density (fractal,
    multi-mass). Returns (prepared model, density)."""
    prepared = model.prepared().with_mass(total_mass)
    return prepared, prepared.density(radii)


def is_spherical(model: AbstractClusterModel | None) -> bool:
    """Whether a cluster's model is one of the registered (spherical) models,
    including a multi-mass King/LIMEPY recorded by name. A fractal or
    gravoturbulent cluster, or a file without a model, is not: its potential
    energy needs a method that works for substructure."""
    if model is None:
        return False
    return model.name in REGISTRY if isinstance(model, RecordedModel) else True


def model_from_record(name: str, params: dict[str, Any], total_mass=None, G: float = G_PHYSICAL):
    """Rebuild the model named `name` from recorded parameters (file readers).

    Registered models take the parameters they declare (others are provenance:
    the IMF, Q); an unknown name, or parameters the model cannot be rebuilt from,
    give a `RecordedModel`.
    """
    cls = REGISTRY.get(name)
    if cls is not None:
        try:
            return cls.from_record(params, total_mass, G)
        except (KeyError, TypeError):
            pass  # the file lacks the model's parameters: keep what it has
    return RecordedModel(name, dict(params), total_mass, G)
