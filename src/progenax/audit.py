r"""Gradient audit: every builder's differentiable parameters, checked.

Each `AuditEntry` names a builder, one of its differentiable parameters, the point
at which the gradient is checked, two values near the ends of the allowed range,
and a scalar observable of the built cluster. The default observable is

$$O = \sum_i m_i |x_i|^2 + \sum_i m_i |v_i|^2,$$

which sees positions, velocities and masses at once. An entry may name another
observable from `OBSERVABLES` (for gas, or where the default would see every
particle's piecewise-constant cell choice) and builders inside submodules by a
dotted name ("gravoturb.star_builder"). `run_audit()` compares
`jax.grad` of the observable with a central finite difference in float64 (relative
step `1e-5`), and checks the gradient is finite at both range ends. A "full"
entry passes when the relative error is at most `FULL_TOLERANCE`; a "partial"
entry (a parameter with piecewise-constant decisions inside, documented with its
reason) only needs finite gradients.

`progenax audit` prints the table; the test suite fails if an exported builder
has no entry or a full entry fails.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .binaries import BinaryPopulation, LogNormalPeriod, PowerLawEccentricity, PowerLawMassRatio
from .builders import plummer_builder
from .diagnostics import half_mass_radius
from .gravoturb import dense_gas_fraction
from .models import REGISTRY as MODELS

FULL_TOLERANCE = 1e-5
FD_RELATIVE_STEP = 1e-5
AUDIT_N = 256
AUDIT_SEED = 0


@dataclasses.dataclass(frozen=True)
class AuditEntry:
    """One differentiable parameter of one builder.

    - `builder`: the exported builder's name, e.g. "plummer_builder".
    - `parameter`: keyword of the builder.
    - `value`: where the gradient is compared with finite differences.
    - `edges`: values near the two ends of the allowed range (finiteness check).
    - `kwargs`: other numeric keyword arguments for the builder (n is `AUDIT_N`).
    - `status`: "full" or "partial"; `reason` says why a partial one is partial.
    - `static`: keyword arguments passed as they are (not traced), e.g. `grid`.
    - `observable`: a key of `OBSERVABLES` ("default" unless said).
    """

    builder: str
    parameter: str
    value: float
    edges: tuple[float, float]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    status: str = "full"
    reason: str = ""
    static: dict[str, Any] = dataclasses.field(default_factory=dict)
    observable: str = "default"


@dataclasses.dataclass(frozen=True)
class AuditRow:
    builder: str
    parameter: str
    autodiff: float
    finite_difference: float
    relative_error: float
    edges_finite: bool
    status: str
    reason: str
    setting: str = ""

    @property
    def passed(self) -> bool:
        if not self.edges_finite or not jnp.isfinite(self.autodiff):
            return False
        return self.status == "partial" or self.relative_error <= FULL_TOLERANCE


REGISTRY: list[AuditEntry] = []


def register(*entries: AuditEntry) -> None:
    REGISTRY.extend(entries)


def default_observable(ic) -> jax.Array:
    s = ic.state
    m = s.masses * ic.weights
    return jnp.sum(m * jnp.sum(s.positions**2, -1)) + jnp.sum(m * jnp.sum(s.velocities**2, -1))


def half_mass_radius_observable(ic) -> jax.Array:
    """3D half-mass radius about the origin (the model centre): depends on the
    few stars at the median only, not on every star's cell choice."""

    s = ic.state
    return half_mass_radius(s.positions, s.masses * ic.weights, centre=jnp.zeros(3, s.positions.dtype))


def gas_field_observable(cloud) -> jax.Array:
    """Gas on its grid: the mass fraction above s_t (soft, kappa = 10) plus the
    mass-weighted mean square velocity of the grid in units of c_s^2."""

    field = cloud.field
    m = field.cell_mass_weights()
    v2 = jnp.sum(field.velocity**2, axis=-1) / cloud.params["sound_speed"] ** 2
    return dense_gas_fraction(field, kappa=10.0) + jnp.sum(m * v2) / jnp.sum(m)


OBSERVABLES: dict[str, Callable] = {
    "default": default_observable,
    "half_mass_radius": half_mass_radius_observable,
    "gas_field": gas_field_observable,
}


def _builder(name: str) -> Callable:
    """An exported builder by name; a dotted name reaches into a submodule."""
    import progenax  # the package imports this module, so its namespace is complete only at call time

    return functools.reduce(getattr, name.split("."), progenax)


@functools.cache
def _compiled(builder: str, names: tuple[str, ...], static: tuple = (), observable: str = "default"):
    """The jitted (observable, gradient) of `builder` as a function of a dict of
    the named parameters, compiled once per builder and parameter set (entries
    that differ only in values share it). One `value_and_grad` compile serves
    the finite differences too: a second, forward-only compile of the builder
    would cost more than the gradients it skips at `AUDIT_N` stars."""
    build = _builder(builder)
    key = jax.random.PRNGKey(AUDIT_SEED)
    measure = OBSERVABLES[observable]
    fixed = {"n": AUDIT_N, **dict(static)}

    def fn(params):
        return measure(build(key, **fixed, **params))

    return jax.jit(jax.value_and_grad(fn))


def _numeric_defaults(builder: str, static: dict[str, Any]) -> dict[str, float]:
    """The builder's float keyword defaults (for `model_builder`, also the model's
    declared ones): passing them all as traced values lets every entry of a
    builder share one compilation."""
    signature = inspect.signature(_builder(builder))
    defaults = {name: p.default for name, p in signature.parameters.items() if isinstance(p.default, float)}
    if "model" in static:
        declared = MODELS[static["model"]].PARAMETERS
        defaults.update({p.name: float(p.default) for p in declared if not p.static and p.default is not None})
    return defaults


def observable_fn(entry: AuditEntry) -> Callable[[jax.Array], jax.Array]:
    """The scalar function of the audited parameter (other kwargs fixed)."""
    defaults = {k: v for k, v in _numeric_defaults(entry.builder, entry.static).items() if k not in entry.static}
    base = {**defaults, **entry.kwargs, entry.parameter: entry.value}
    static = tuple(sorted(entry.static.items()))
    value_and_grad = _compiled(entry.builder, tuple(sorted(base)), static, entry.observable)
    fixed = {k: jnp.asarray(v, jnp.float64) for k, v in base.items()}

    def at(value):
        return value_and_grad({**fixed, entry.parameter: value})[0]

    def grad_at(value):
        return value_and_grad({**fixed, entry.parameter: value})[1][entry.parameter]

    return at, grad_at


def check_entry(entry: AuditEntry) -> AuditRow:
    """Autodiff against central finite differences, in float64."""
    with jax.enable_x64(True):
        fn, grad = observable_fn(entry)
        x = jnp.asarray(entry.value, jnp.float64)
        h = FD_RELATIVE_STEP * max(abs(entry.value), 1.0)
        ad = float(grad(x))
        fd = float((fn(x + h) - fn(x - h)) / (2.0 * h))
        rel = abs(ad - fd) / max(abs(fd), 1e-300)
        edges = all(bool(jnp.isfinite(grad(jnp.asarray(e, jnp.float64)))) for e in entry.edges)
    shown = {entry.parameter: entry.value, **entry.kwargs, **entry.static}
    setting = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in shown.items())
    if entry.observable != "default":
        setting += f"; O = {entry.observable}"
    return AuditRow(entry.builder, entry.parameter, ad, fd, rel, edges, entry.status, entry.reason, setting)


def run_audit(builders: list[str] | None = None) -> list[AuditRow]:
    """Check every registered entry (or those of the named builders)."""
    _load_registry()
    return [check_entry(e) for e in REGISTRY if builders is None or e.builder in builders]


def format_table(rows: list[AuditRow]) -> str:
    header = (
        f"{'builder':<24} {'parameter':<12} {'at':<18} {'autodiff':>14} {'finite diff':>14} "
        f"{'rel err':>9}  {'status':<8} result"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        result = "ok" if r.passed else "FAIL"
        if not r.edges_finite:
            result += " (non-finite at range edge)"
        lines.append(
            f"{r.builder:<24} {r.parameter:<12} {r.setting:<18} {r.autodiff:>14.6e} {r.finite_difference:>14.6e} "
            f"{r.relative_error:>9.1e}  {r.status:<8} {result}" + (f"  [{r.reason}]" if r.reason else "")
        )
    return "\n".join(lines)


_LOADED = False

_SEGREGATION_REASON = (
    "energy-ordered assignment permutes the orbits, piecewise constant in S at a fixed key; the "
    "gradient is a relaxed-ranking (soft rank, temperature) estimate of the key-averaged slope, "
    "checked in tests/test_segregation.py"
)
_FRACTAL_D_REASON = (
    "D enters only through the survival draws u < 2^(D-3): piecewise constant, pathwise gradient exactly 0"
)


def _load_registry() -> None:
    """Register the built-in entries once (kept here so the table is in one place)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    register(
        # Each model's own parameters come from its declaration (`Parameter.audit`,
        # `_declared_entries`); the entries here are the builders' other
        # parameters and the settings a declaration cannot express.
        AuditEntry("plummer_builder", "alpha", 2.3, (0.5, 4.0)),
        AuditEntry("plummer_builder", "Q", 0.5, (1e-3, 5.0)),
        AuditEntry("eff_builder", "alpha", 2.3, (0.5, 4.0)),
        AuditEntry("eff_builder", "Q", 0.5, (1e-3, 5.0)),
        AuditEntry("eff_builder", "r_t", 10.0, (1.3, 1e4), kwargs={"gamma": 3.0}),
        # Truncated with gamma < 2 needs (r_h / r_t)^(2 - gamma) > 1/2: gamma > 1.37 at r_t = 3 r_h.
        AuditEntry("eff_builder", "gamma", 1.8, (1.4, 8.0), kwargs={"r_t": 3.0}),
        # King entries keep Q = None (equilibrium DF velocities); the LIMEPY ones
        # all pass Q, so each builder compiles once (a compile costs ~30 s).
        AuditEntry("king_builder", "alpha", 2.3, (0.5, 4.0)),
        AuditEntry("limepy_builder", "W0", 6.0, (0.5, 12.0), kwargs={"g": 1.5, "Q": 0.5}),
        AuditEntry("limepy_builder", "g", 1.0, (0.05, 2.5), kwargs={"W0": 5.0, "Q": 0.5}),
        AuditEntry("limepy_builder", "r_h", 1.0, (1e-3, 1e3), kwargs={"Q": 0.5}),
        AuditEntry("limepy_builder", "Q", 0.5, (1e-3, 5.0)),
        # ra in King radii; at the default W0 = 6, g = 1 the model stays inside the
        # solver grid for ra >~ 2.75 (smaller ra: r_t -> infinity).
        AuditEntry("limepy_builder", "ra", 5.0, (2.9, 1e4), kwargs={"Q": 0.5}),
        AuditEntry("fractal_builder", "r_h", 1.0, (1e-3, 1e3)),
        AuditEntry("fractal_builder", "alpha", 2.3, (0.5, 4.0)),
        AuditEntry("fractal_builder", "Q", 0.5, (1e-3, 5.0)),
        AuditEntry("fractal_builder", "D", 2.0, (1.6, 3.0), status="partial", reason=_FRACTAL_D_REASON),
        AuditEntry("fractal_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        AuditEntry("plummer_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        AuditEntry("eff_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        AuditEntry("king_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        # The other parameters keep exact gradients when the stars are segregated.
        AuditEntry("plummer_builder", "r_h", 1.0, (1e-3, 1e3), kwargs={"segregation": 0.5}),
        # Gravoturbulent (experimental): small grid; stars by their half-mass radius
        # about the cloud centre, gas by grid observables (the cell choice of each
        # particle is piecewise constant, see progenax.gravoturb.placement).
        *_GRAVOTURB_ENTRIES,
        *_BINARY_ENTRIES,
    )
    register(*_declared_entries(REGISTRY))


def _declared_entries(curated: list[AuditEntry]) -> list[AuditEntry]:
    """An entry for each declared parameter of every registered model (its
    `Parameter.audit` value and edges), through the model's builder (`BUILDER`),
    unless `curated` already has one for that builder and parameter (a setting
    the declaration cannot express). A model drawn by `model_builder` also gets
    alpha and Q entries."""
    have = {(e.builder, e.parameter, tuple(sorted(e.static.items())), tuple(sorted(e.kwargs.items()))) for e in curated}
    entries = []
    for cls in MODELS.values():
        static = {"model": cls.NAME} if cls.BUILDER == "model_builder" else {}
        points = [(p.name, *p.audit) for p in cls.PARAMETERS if p.audit is not None and not p.static]
        if cls.BUILDER == "model_builder":
            points += [("alpha", 2.3, (0.5, 4.0)), ("Q", 0.5, (1e-3, 5.0))]
        for name, value, edges in points:
            if (cls.BUILDER, name, tuple(sorted(static.items())), ()) not in have:
                entries.append(AuditEntry(cls.BUILDER, name, value, edges, static=static))
    return entries


_GT_STARS = dict(static={"grid": 16}, observable="half_mass_radius")
_GT_GAS = dict(static={"grid": 16}, observable="gas_field")
_GRAVOTURB_ENTRIES = (
    AuditEntry("gravoturb.star_builder", "mach", 5.0, (0.1, 50.0), **_GT_STARS),
    AuditEntry("gravoturb.star_builder", "pdf_slope", 2.0, (1.05, 6.0), **_GT_STARS),
    AuditEntry("gravoturb.star_builder", "b", 0.5, (0.05, 1.0), **_GT_STARS),
    AuditEntry("gravoturb.star_builder", "kappa", 10.0, (0.5, 200.0), **_GT_STARS),
    AuditEntry("gravoturb.cloud_builder", "mach", 5.0, (0.1, 50.0), **_GT_GAS),
    AuditEntry("gravoturb.cloud_builder", "pdf_slope", 2.0, (1.05, 6.0), **_GT_GAS),
    AuditEntry("gravoturb.cloud_builder", "b", 0.5, (0.05, 1.0), **_GT_GAS),
)


def plummer_with_binaries(
    key,
    *,
    n: int,
    fraction: float = 0.5,
    period_mean: float = 4.8,
    period_sigma: float = 2.3,
    eccentricity_eta: float = 1.0,
    mass_ratio_gamma: float = 0.0,
    fraction_width: float | None = 0.05,
    **kwargs,
):
    """`plummer_builder` with `binaries=BinaryPopulation(...)` made of float
    arguments: the audit's handle on the binary parameters (log-normal periods,
    power-law eccentricities and mass ratios; soft membership of width
    `fraction_width`, or None for the hard 0/1 mode)."""
    population = BinaryPopulation(
        fraction,
        LogNormalPeriod(period_mean, period_sigma),
        PowerLawEccentricity(eccentricity_eta),
        PowerLawMassRatio(mass_ratio_gamma),
        fraction_width=fraction_width,
    )
    return plummer_builder(key, n=n, binaries=population, **kwargs)


_HARD_FRACTION_REASON = (
    "hard 0/1 membership (u < f, the default and what files get) is piecewise constant in f: pathwise "
    "gradient exactly 0; the soft mode (fraction_width) gives the full gradient, audited beside it"
)
_BINARIES = "audit.plummer_with_binaries"
_BINARY_ENTRIES = (
    AuditEntry(_BINARIES, "fraction", 0.5, (0.05, 0.95)),
    AuditEntry(_BINARIES, "period_mean", 4.8, (1.0, 8.0)),
    AuditEntry(_BINARIES, "period_sigma", 2.3, (0.3, 4.0)),
    AuditEntry(_BINARIES, "eccentricity_eta", 1.0, (-0.45, 3.0)),
    AuditEntry(_BINARIES, "mass_ratio_gamma", 0.0, (-1.0, 2.0)),
    AuditEntry(
        _BINARIES,
        "fraction",
        0.5,
        (0.05, 0.95),
        static={"fraction_width": None},
        status="partial",
        reason=_HARD_FRACTION_REASON,
    ),
)
