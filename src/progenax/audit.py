r"""Gradient audit: every builder's differentiable parameters, checked.

Each `AuditEntry` names a builder, one of its differentiable parameters, the point
at which the gradient is checked, two values near the ends of the allowed range,
and a scalar observable of the built cluster. The default observable is

$$O = \sum_i m_i |x_i|^2 + \sum_i m_i |v_i|^2,$$

with $w_i$ the membership weights, which sees every particle's position,
velocity and mass at once. Every full entry uses it; only a partial entry may
name another observable from `OBSERVABLES`, and it states its reason. Builders
inside submodules are named by a dotted name ("gravoturb.star_builder").
`run_audit()` compares `jax.grad` of the observable with (fourth-order)
central finite differences in float64 at each key of `AUDIT_SEEDS` and each relative step of
`FD_STEPS` (a discontinuity shows as disagreement between the steps), and
checks the gradient is finite at both range ends. A "full" entry passes when
the worst relative error over keys and steps is at most `FULL_TOLERANCE`; a
"partial" entry (a parameter with piecewise-constant decisions inside,
documented with its reason) only needs finite gradients. The keys are traced
arguments of the one jitted `value_and_grad` of each builder, so the finite
differences and the second key cost no compile.

`progenax audit` prints the table (with a progress bar on a terminal); the test
suite fails if an exported builder has no entry or a full entry fails.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .binaries import BinaryPopulation, LogNormalPeriod, PowerLawEccentricity, PowerLawMassRatio
from .builders import plummer_builder
from .imf import ChabrierIMF
from .models import REGISTRY as MODELS

FULL_TOLERANCE = 1e-5
FD_STEPS = (1e-4, 1e-6)
AUDIT_N = 256
AUDIT_SEEDS = (0, 1)


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
    - `observable`: a key of `OBSERVABLES`: "default", except for a partial entry.
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

    def __post_init__(self):
        if self.status not in ("full", "partial"):
            raise ValueError(f"status must be 'full' or 'partial', got {self.status!r}")
        if self.status == "partial" and not self.reason:
            raise ValueError(f"partial audit entry {self.builder}.{self.parameter} needs a reason")
        if self.observable != "default" and self.status != "partial":
            raise ValueError(f"only a partial entry may use another observable ({self.builder}.{self.parameter})")


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One checked entry. `autodiff` and `finite_difference` are at the first key and
    the first step; `relative_error` is the worst over keys and steps, `worst` says
    where (key seed, step)."""

    builder: str
    parameter: str
    autodiff: float
    finite_difference: float
    relative_error: float
    edges_finite: bool
    status: str
    reason: str
    setting: str = ""
    worst: tuple[int, float] = (0, 0.0)
    checks: tuple[tuple[int, float, float, float], ...] = ()  # (seed, step, autodiff, finite difference)

    @property
    def passed(self) -> bool:
        if not self.edges_finite or not jnp.isfinite(self.autodiff):
            return False
        return self.status == "partial" or self.relative_error <= FULL_TOLERANCE


REGISTRY: list[AuditEntry] = []


def register(*entries: AuditEntry) -> None:
    REGISTRY.extend(entries)


def default_observable(ic) -> jax.Array:
    r"""$\sum_i w_i m_i |x_i|^2 + \sum_i w_i m_i |v_i|^2$ (pc$^2$ Msun + (km/s)$^2$ Msun in physical units)."""
    s = ic.state
    m = s.masses * ic.weights
    return jnp.sum(m * jnp.sum(s.positions**2, -1)) + jnp.sum(m * jnp.sum(s.velocities**2, -1))


# Other observables are for partial entries only (none needs one at present).
OBSERVABLES: dict[str, Callable] = {"default": default_observable}


def _builder(name: str) -> Callable:
    """An exported builder by name; a dotted name reaches into a submodule."""
    import progenax  # the package imports this module, so its namespace is complete only at call time

    return functools.reduce(getattr, name.split("."), progenax)


@functools.cache
def _compiled(builder: str, names: tuple[str, ...], static: tuple = (), observable: str = "default"):
    """The jitted (observable, gradient) of `builder` as a function of a key and a
    dict of the named parameters, compiled once per builder and parameter set
    (entries that differ only in values share it, and the key is traced: every
    seed shares it too). One `value_and_grad` compile serves the finite
    differences as well: a second, forward-only compile of the builder would
    cost more than the gradients it skips at `AUDIT_N` stars."""
    build = _builder(builder)
    measure = OBSERVABLES[observable]
    fixed = {"n": AUDIT_N, **dict(static)}

    def fn(params, key):
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


def observable_fn(entry: AuditEntry) -> tuple[Callable, Callable]:
    """The observable and its gradient as functions of (the audited parameter, key),
    the other kwargs fixed."""
    defaults = {k: v for k, v in _numeric_defaults(entry.builder, entry.static).items() if k not in entry.static}
    base = {**defaults, **entry.kwargs, entry.parameter: entry.value}
    static = tuple(sorted(entry.static.items()))
    value_and_grad = _compiled(entry.builder, tuple(sorted(base)), static, entry.observable)
    fixed = {k: jnp.asarray(v, jnp.float64) for k, v in base.items()}

    def at(value, key):
        return value_and_grad({**fixed, entry.parameter: value}, key)[0]

    def grad_at(value, key):
        return value_and_grad({**fixed, entry.parameter: value}, key)[1][entry.parameter]

    return at, grad_at


def central_difference(fn: Callable, x: jax.Array, h: float) -> float:
    r"""The fourth-order central difference $[8(f_{+1} - f_{-1}) - (f_{+2} - f_{-2})]/(12h)$.

    Its truncation error is $O(h^4 f^{(5)})$: a smooth but strongly curved
    observable (stars crossing the near-empty gaps of a clumpy density move fast)
    agrees with autodiff at both steps, and a kink or a jump still shows as
    disagreement between them."""
    f = [float(fn(x + k * h)) for k in (-2, -1, 1, 2)]
    return (8.0 * (f[2] - f[1]) - (f[3] - f[0])) / (12.0 * h)


def _relative_error(ad: float, fd: float) -> float:
    """|ad - fd| / |fd|; inf where the finite difference is exactly 0 and autodiff
    is not (a partial entry's step that sees no jump; the table printed 4.6e+303)."""
    if fd == 0.0:
        return 0.0 if ad == 0.0 else math.inf
    return abs(ad - fd) / abs(fd)


def check_entry(entry: AuditEntry) -> AuditRow:
    """Autodiff against central finite differences in float64, at every seed of
    `AUDIT_SEEDS` and every relative step of `FD_STEPS` (one compile in all)."""
    with jax.enable_x64(True):
        fn, grad = observable_fn(entry)
        x = jnp.asarray(entry.value, jnp.float64)
        results = []  # (seed, step, autodiff, finite difference)
        for seed in AUDIT_SEEDS:
            key = jax.random.PRNGKey(seed)
            ad = float(grad(x, key))
            for step in FD_STEPS:
                h = step * max(abs(entry.value), 1.0)
                results.append((seed, step, ad, central_difference(lambda v: fn(v, key), x, h)))
        key = jax.random.PRNGKey(AUDIT_SEEDS[0])
        edges = all(bool(jnp.isfinite(grad(jnp.asarray(e, jnp.float64), key))) for e in entry.edges)
    seed, step, _, _ = max(results, key=lambda r: _relative_error(r[2], r[3]))
    rel = max(_relative_error(r[2], r[3]) for r in results)
    shown = {entry.parameter: entry.value, **entry.kwargs, **entry.static}
    setting = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in shown.items())
    if entry.observable != "default":
        setting += f"; O = {entry.observable}"
    ad, fd = results[0][2], results[0][3]
    return AuditRow(
        entry.builder,
        entry.parameter,
        ad,
        fd,
        rel,
        edges,
        entry.status,
        entry.reason,
        setting,
        (seed, step),
        tuple(results),
    )


def run_audit(builders: list[str] | None = None, *, progress: bool | None = None) -> list[AuditRow]:
    """Check every registered entry (or those of the named builders).

    `progress`: show a tqdm progress bar on stderr (None: only when stderr is a
    terminal, so `progenax audit` shows one and logs stay clean)."""
    from tqdm.auto import tqdm  # only when the audit runs (`import progenax` loads this module)

    _load_registry()
    entries = [e for e in REGISTRY if builders is None or e.builder in builders]
    bar = tqdm(entries, desc="gradient audit", unit="entry", disable=None if progress is None else not progress)
    rows = []
    for e in bar:
        bar.set_postfix_str(f"{e.builder}.{e.parameter}", refresh=True)
        rows.append(check_entry(e))
    return rows


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

_ROTATION_REASON = (
    "k and L_0 enter only through the discrete flips of v_phi (u < (1 + k tanh(|L_z|/L_0))/2): "
    "piecewise constant, pathwise gradient exactly 0; the other parameters keep exact gradients"
)

_RA_REASON = (
    "smooth (no jump: both steps agree to 2e-8); with XLA's default CPU fusion emitters autodiff differs "
    "from them by 5.6e-5 relative at key 0 (one star's gradient off by 1.6e-3), with "
    "--xla_cpu_use_fusion_emitters=false (the test suite's flag) or --xla_backend_optimization_level=0 by "
    "1.6e-7: the compiled reverse pass of the speed sampler rounds differently, traced in issue 20"
)


_DEHNEN_RA_REASON = (
    "smooth: with --xla_cpu_use_fusion_emitters=false (the test suite's flag) step 1e-4 agrees to 2.4e-7 at "
    "both keys for ra from 0.65 to 1.5 pc (6e-6 at 3 pc), but step 1e-6 is round-off-limited, up to 6e-5 "
    "(with Q = None the kinetic energy is the virial one whatever ra, so O's ra-derivative is small beside O); "
    "XLA's default CPU fusion emitters also move autodiff, by up to 4e-4 at key 0 (as for plummer_builder.ra)"
)
_OM_STATIC = {"Q": None, "segregation": 0.0}
"""The static settings of every ra and rotation entry but King's (the comment at the Plummer ones says why)."""


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
        # all pass Q, so each builder compiles once (a gradient compile costs up to ~6 s).
        AuditEntry("king_builder", "alpha", 2.3, (0.5, 4.0)),
        # Full since a traced segregation = 0 skips the energy ranking (issue 22: the
        # ranking re-paired masses with orbits and jumped with W0 and gamma).
        AuditEntry("limepy_builder", "W0", 6.0, (0.5, 12.0), kwargs={"g": 1.5, "Q": 0.5}),
        AuditEntry("limepy_builder", "g", 1.0, (0.05, 2.5), kwargs={"W0": 5.0, "Q": 0.5}),
        AuditEntry("limepy_builder", "r_h", 1.0, (1e-3, 1e3), kwargs={"Q": 0.5}),
        AuditEntry("limepy_builder", "Q", 0.5, (1e-3, 5.0)),
        # ra in King radii; at the default W0 = 6, g = 1 the model stays inside the
        # solver grid for ra >~ 2.75 (smaller ra: r_t -> infinity).
        AuditEntry("limepy_builder", "ra", 5.0, (2.9, 1e4), kwargs={"Q": 0.5}),
        AuditEntry("fractal_builder", "r_h", 1.0, (1e-3, 1e3)),
        # Full since the fractal skips segregation at a traced S = 0 and ranks by
        # Q-independent energies, and its radial remap sorts once, mass-independently.
        AuditEntry("fractal_builder", "alpha", 2.3, (0.5, 4.0)),
        AuditEntry("fractal_builder", "Q", 0.5, (1e-3, 5.0)),
        AuditEntry("eff_builder", "gamma", 3.0, (2.25, 12.0)),
        AuditEntry("fractal_builder", "D", 2.0, (1.6, 3.0), status="partial", reason=_FRACTAL_D_REASON),
        AuditEntry("fractal_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        AuditEntry("plummer_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        AuditEntry("eff_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        AuditEntry("king_builder", "segregation", 0.5, (0.0, 0.95), status="partial", reason=_SEGREGATION_REASON),
        # r_h, alpha and Q keep exact gradients when the stars are segregated (they scale the
        # energies alike); the shape parameters (W0, g, gamma, r_t, ra) reorder the energies
        # the ranking sorts, so with S > 0 they jump at fixed keys (docs/substructure.md).
        AuditEntry("plummer_builder", "r_h", 1.0, (1e-3, 1e3), kwargs={"segregation": 0.5}),
        # Osipkov-Merritt ra (pc; the limit is 0.75 a = 0.575 pc at r_h = 1) and rotation share
        # one compile: the flips (L_0 = 0) do not depend on ra, since sign(L_z) is that of the
        # pseudo-velocity's tangential part, which ra only stretches. Q = None: scaled to a
        # fixed Q, sum m v^2 = 2 Q |W| would not depend on ra at all. A concrete
        # segregation = 0 skips the energy ranking, whose order ra changes (jumps in O).
        AuditEntry(
            "plummer_builder",
            "ra",
            2.0,
            (0.6, 1e3),
            kwargs={"rotation": 0.5},
            static=_OM_STATIC,
            status="partial",
            reason=_RA_REASON,
        ),
        AuditEntry(
            "plummer_builder",
            "rotation",
            0.5,
            (-1.0, 1.0),
            kwargs={"ra": 2.0},
            static=_OM_STATIC,
            status="partial",
            reason=_ROTATION_REASON,
        ),
        AuditEntry(
            "plummer_builder",
            "rotation_scale",
            1.0,
            (0.0, 100.0),
            kwargs={"ra": 2.0, "rotation": 0.5},
            static=_OM_STATIC,
            status="partial",
            reason=_ROTATION_REASON,
        ),
        # ra and rotation on the other spherical builders, set as for Plummer (EFF gamma = 3:
        # limit 0.36 pc). Dehnen's ra is partial: see _DEHNEN_RA_REASON.
        *(
            entry
            for builder, ra, model, status in (
                ("eff_builder", 1.0, {}, {}),
                ("model_builder", 0.8, {"model": "dehnen"}, {"status": "partial", "reason": _DEHNEN_RA_REASON}),
            )
            for entry in (
                AuditEntry(
                    builder, "ra", ra, (0.6, 1e3), kwargs={"rotation": 0.5}, static={**_OM_STATIC, **model}, **status
                ),
                AuditEntry(
                    builder,
                    "rotation",
                    0.5,
                    (-1.0, 1.0),
                    kwargs={"ra": ra},
                    static={**_OM_STATIC, **model},
                    status="partial",
                    reason=_ROTATION_REASON,
                ),
            )
        ),
        AuditEntry(
            "king_builder",
            "rotation",
            0.5,
            (-1.0, 1.0),
            static={"segregation": 0.0},
            status="partial",
            reason=_ROTATION_REASON,
        ),
        # Gravoturbulent (experimental): small grid, the common observable (the
        # placement is continuous, see progenax.gravoturb.placement).
        *_GRAVOTURB_ENTRIES,
        *_BINARY_ENTRIES,
        *_CHABRIER_ENTRIES,
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


# The stars at M = 2: at M = 5 on a 16^3 grid their weight sits in ~8 cells (0.2%)
# with gaps down to e^-30 between them, and the few stars the continuous placement
# moves across a gap (speed ~ 1/density) make O curved on the scale of the 1e-4
# step (step 1e-6 agrees to 1e-9 there; see docs/gravoturb.md).
_GT_STARS = dict(static={"grid": 16}, kwargs={"mach": 2.0})
_GT_GAS = dict(static={"grid": 16})
_GT_B_REASON = (
    "smooth, but b's absolute step (1e-4, relative to max(|b|, 1)) is 2.5-5 times mach's in b*M, beyond "
    "the scale on which the particles crossing near-empty gaps of the density move linearly: step 1e-4 "
    "disagrees by 1e-4 to 2e-3, step 1e-6 agrees to 1e-9 (docs/gravoturb.md)"
)
_GRAVOTURB_ENTRIES = (
    AuditEntry("gravoturb.star_builder", "mach", 2.0, (0.1, 50.0), static={"grid": 16}),
    AuditEntry("gravoturb.star_builder", "pdf_slope", 2.0, (1.05, 6.0), **_GT_STARS),
    AuditEntry("gravoturb.star_builder", "b", 0.4, (0.05, 1.0), status="partial", reason=_GT_B_REASON, **_GT_STARS),
    AuditEntry("gravoturb.star_builder", "kappa", 10.0, (0.5, 200.0), **_GT_STARS),
    AuditEntry("gravoturb.cloud_builder", "mach", 5.0, (0.1, 50.0), **_GT_GAS),
    AuditEntry("gravoturb.cloud_builder", "pdf_slope", 2.0, (1.05, 6.0), **_GT_GAS),
    AuditEntry("gravoturb.cloud_builder", "b", 0.5, (0.05, 1.0), status="partial", reason=_GT_B_REASON, **_GT_GAS),
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


def plummer_with_chabrier(key, *, n: int, m_c: float = 0.079, sigma: float = 0.69, imf_alpha: float = 2.3, **kwargs):
    """`plummer_builder` with `imf=progenax.imf.ChabrierIMF(m_c, sigma, imf_alpha)`:
    the audit's handle on the Chabrier (2003) IMF's parameters."""
    return plummer_builder(key, n=n, imf=ChabrierIMF(m_c, sigma, imf_alpha), **kwargs)


_CHABRIER = "audit.plummer_with_chabrier"
_CHABRIER_ENTRIES = (
    AuditEntry(_CHABRIER, "m_c", 0.079, (0.01, 0.9)),
    AuditEntry(_CHABRIER, "sigma", 0.69, (0.1, 2.0)),
    AuditEntry(_CHABRIER, "imf_alpha", 2.3, (0.5, 4.0)),
)
