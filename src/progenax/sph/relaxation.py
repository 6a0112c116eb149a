r"""Relaxation as a problem and an optimiser: `make_relaxation(problem, settings) -> (init, step)`.

The **problem** (`RelaxProblem`) is the density loss

$$\mathcal{L}(x) = \sum_i \bigl(\rho_i(x) - \rho_t(x_i)\bigr)^2,\qquad
\rho_i = \sum_j m_j W(|x_i - x_j|, h_i),$$

with adaptive smoothing lengths $h_i = \eta\,\ell_i$, $\ell_i = (m_i /
\rho_t(x_i))^{1/d}$ the local interparticle spacing the target asks for
(about 58 neighbours in 3D and 18 in 2D at $\eta = 1.2$ with the cubic
spline's support $2h$), an optional periodic box, and the constraints every
step keeps: a tuple of `sph.projections` (radial profile, trust radius,
centre of mass), applied in order.

The **optimiser** (`RelaxSettings`) is heavy-ball gradient descent,
preconditioned per particle so that a step is measured in local spacings:

$$g_i = \partial\mathcal{L}/\partial x_i\big|_{h},\qquad
v_i \leftarrow P\Bigl(\mu v_i - \tau_t\, \frac{\ell_i^2}{\rho_{t,i}^2}\, g_i\Bigr),\qquad
x_i \leftarrow x_i + v_i,$$

with $P$ the problem's projections (trust radius $c\,\ell_i$, $c$ =
`max_step`), momentum $\mu$, and step size $\tau_t$ decaying on a cosine
schedule from `step_size` to 1% of it over `steps`. $g$ is taken at fixed
$h_i$ (the smoothing lengths follow the particles between steps, not inside
one): its pair part in the one-pass gather form of
`sph.adaptive.loss_gradient_pair`, plus the target's own slope,
$-2(\rho_i - \rho_{t,i})\nabla\rho_t(x_i)$, which pulls an over-dense particle
up the profile against the outward push of the pair part. Only *live*
particles move (`smoothing_lengths`): in the sparse far halo, where a
particle's SPH density is mostly its own self term, the slope term would
otherwise run particles down the profile.

The step size, momentum and trust radius default by boundary
(`RelaxSettings.for_boundary`): a cluster in open space converges fastest
with low momentum and a large step held by a tight trust radius (`OPEN`),
a periodic box needs the momentum for its last polish (`PERIODIC`).
Measured on a periodic 2D box of 10,000 particles from a uniform random
start, 200 steps, with the cubic kernel: rms relative density error 0.24%
with the box's defaults (0.16% with `RELAX_KERNEL`), 0.34% with (step 0.5, momentum 0.9), 0.78% with (0.3, 0.8); Adam
(optax, cosine-decayed, best of two learning rates) stopped at 1.37%, plain
gradient descent without momentum at 3.2% after 100 steps, and larger steps
without the trust radius diverge.

**Fixed work, no stopping rule**: `run` takes the steps in a `lax.scan`, so
a relaxation works under `jit`, `vmap` and `grad`. The scan is checkpointed
on two levels (blocks of about $\sqrt{\text{steps}}$ steps, and each step),
so the memory of `jax.grad` through the whole relaxation is that of about
$2\sqrt{\text{steps}}$ copies of the positions plus one step's working set.
Each step is differentiable end to end: the neighbour sums are
`sph.pairs.pair_sum` passes with their own reverse pass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import Array
from ..validation import check_static_int
from .adaptive import loss_gradient_features, loss_gradient_pair
from .kernels import SUPPORT, get_kernel
from .pairs import build_bands, density_pair, pair_sum
from .projections import Projection, project

FINAL_STEP_FRACTION = 0.01  # the cosine schedule ends at 1% of step_size


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _optional_int(name: str, value, lowest: int) -> int | None:
    return None if value is None else check_static_int(name, value, lowest)


RELAX_KERNEL = "wendland_c2"
"""The kernel a relaxation matches densities with by default. The cubic
spline pairs particles at this neighbour number (about 58 in 3D at
eta = 1.2): it lowers the loss by collapsing stars onto each other. Plummer,
N = 10,000, 200 steps (the command line's): 865 stars ended closer than 0.01
of the local spacing to a neighbour with the cubic kernel, 2 with Wendland
C2 (2 in the random start); King W0 = 9, N = 100,000, 100 steps: 2,747
against 0, and 16,261 against 46 within 0.1 of a spacing (443 at the
start). Wendland kernels have no pairing instability (Dehnen & Aly 2012).
The rms error inside 3 r_h, measured with the cubic kernel either way, was
19.3% against 19.2%, and 1.34% against 1.59% for the King sphere: the cubic
kernel's lower figure is partly the pairs (`benchmarks/relax.py`)."""


@dataclasses.dataclass(frozen=True)
class RelaxSettings:
    """The optimiser's static settings, checked on construction (`ValueError`
    naming the setting).

    - `steps` (>= 0): number of steps, also the length of the cosine schedule.
    - `eta` (> 0): smoothing length in local spacings.
    - `step_size` (> 0), `momentum` ([0, 1)): the heavy-ball update.
    - `max_step` (> 0): trust radius, local spacings per step (`LimitStep`).
    - Each of those three left None takes the default of the problem's
      boundary (`for_boundary`, which `make_relaxation` calls): `OPEN` for a
      cluster in open space, `PERIODIC` for a box.
    - `live_scale` (> 0): a particle moves where its h is at most this
      fraction of the target's scale length (`smoothing_lengths`). At
      N = 2,000 (Plummer, 200 steps) 0.75 took the rms error inside 3 r_h
      from 56.5% to 53.1%; 1.5 and 3.0 made it 77% and 48% with radial shells
      emptied.
    - `kernel`: "wendland_c2" (`RELAX_KERNEL`), "wendland_c4" or "cubic".
    - `n_bands` (>= 1), `band_ratio` (> 1): smoothing-length bands of the cell
      lists (`sph.pairs.build_bands`); `cells_per_reach`, `x_cells_per_reach`,
      `chunk` (None: `neighbours.LAYOUTS`) and `groups`: their layout.
    """

    steps: int = 200
    eta: float = 1.2
    step_size: float | None = None
    momentum: float | None = None
    max_step: float | None = None
    kernel: str = RELAX_KERNEL
    n_bands: int = 8
    band_ratio: float = 2.0
    cells_per_reach: int | None = None
    x_cells_per_reach: int | None = None
    chunk: int | None = None
    groups: int = 128
    live_scale: float = 0.75

    def __post_init__(self):
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        fix("steps", check_static_int("steps", self.steps, 0))
        for name in ("eta", "live_scale"):
            fix(name, _positive(name, getattr(self, name)))
        for name in ("step_size", "max_step"):  # None: the boundary's default (for_boundary)
            if getattr(self, name) is not None:
                fix(name, _positive(name, getattr(self, name)))
        m = self.momentum
        if m is not None:
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not (0.0 <= m < 1.0):
                raise ValueError(f"momentum must be in [0, 1), got {m!r}")
            fix("momentum", float(m))
        get_kernel(self.kernel)  # raises on an unknown name
        fix("n_bands", check_static_int("n_bands", self.n_bands, 1))
        if _positive("band_ratio", self.band_ratio) <= 1.0:
            raise ValueError(f"band_ratio must be > 1, got {self.band_ratio!r}")
        fix("band_ratio", float(self.band_ratio))
        fix("cells_per_reach", _optional_int("cells_per_reach", self.cells_per_reach, 1))
        fix("x_cells_per_reach", _optional_int("x_cells_per_reach", self.x_cells_per_reach, 1))
        fix("chunk", _optional_int("chunk", self.chunk, 1))
        fix("groups", check_static_int("groups", self.groups, 1))

    def for_boundary(self, periodic: bool) -> RelaxSettings:
        """These settings with `step_size`, `momentum` and `max_step` left None
        taken from `PERIODIC` (a box) or `OPEN` (open space)."""
        defaults = PERIODIC if periodic else OPEN
        chosen = {name: getattr(defaults, name) for name in OPTIMISER_FIELDS if getattr(self, name) is None}
        return dataclasses.replace(self, **chosen)


class OptimiserDefaults(NamedTuple):
    """Heavy-ball defaults for one kind of boundary (`RelaxSettings.for_boundary`)."""

    step_size: float
    momentum: float
    max_step: float


OPTIMISER_FIELDS = OptimiserDefaults._fields

OPEN = OptimiserDefaults(step_size=3.0, momentum=0.6, max_step=0.2)
"""A cluster in open space. Measured on Plummer and King W0 = 9 spheres relaxed
towards their model with the radial hold (`relax`'s default for a model), N =
100,000, seed 0, rms inside 3 r_h (`benchmarks/relax.py`), with the cubic
kernel: Plummer 33.1% to 1.34% after 30 steps (and after 40), King 33.0% to
1.34% after 100 (with `RELAX_KERNEL`, which does not pair stars: 1.69% and
1.59%); with
`PERIODIC`'s values 10.6% after 30 Plummer steps, 1.95% after 100, and King
3.9% after 200. Momentum 0.9, 0.8, 0.7 at (1, 2, 3) times the step
gave 8.7%, 4.1%, 2.6% after 30 Plummer steps (trust radius 0.2); a trust
radius of 0.6 overshoots (24.9% at N = 20,000). Small clusters, whose halo
does not move, are about unchanged (Plummer, 200 steps: N = 10,000 20.2% ->
19.3%, N = 2,000 52.5% -> 52.7%; docs/relax.md, "Small clusters")."""

PERIODIC = OptimiserDefaults(step_size=1.0, momentum=0.9, max_step=0.3)
"""A periodic box. 2D, 10,000 particles from a uniform random start, cubic
kernel: 0.24% after 200 steps (0.16% with `RELAX_KERNEL`); `OPEN`'s values stop at 0.67% there (0.57% against 0.13%
in 3D, 32^3 particles): the last polish of a box needs the momentum. After
50 steps `OPEN`'s are better (1.26% against 2.57%)."""


class RelaxProblem(eqx.Module):
    """What to relax towards: the SPH masses (N,), the target density
    rho(x): (N, d) -> (N,) (mass / length^d, pointwise, differentiable), the
    periodic box (d,) or None, and the projections every step goes through."""

    masses: Array
    target: Callable[[Array], Array]
    box: Array | None
    projections: tuple[Projection, ...]


class RelaxState(eqx.Module):
    """Positions (N, d), the last step taken (N, d: the momentum), step index."""

    x: Array
    v: Array
    t: Array


def smoothing_lengths(
    positions: Array, masses: Array, target: Callable[[Array], Array], eta: float, scale_fraction: float = 0.75
) -> tuple[Array, Array, Array]:
    r"""$(h_i, \rho_t(x_i), \mathrm{live}_i)$: smoothing lengths, targets, and
    which particles the relaxation moves.

    $h_i = \eta\,\ell_i$ with $\ell_i = (m_i/\rho_t(x_i))^{1/d}$ the local
    spacing. A particle is *live* where its kernel ball resolves the target:
    $h_i \le f L_i$, with $L_i = \rho_t / |\nabla\rho_t|$ the target's local
    scale length ($f$ = `scale_fraction`, 0.75), and the target positive. The
    others (a cluster's far halo, the last stretch before a King model's tidal
    radius) stay where they are and count only as sources of the live
    particles' densities (no neighbour search of their own): in a Plummer halo
    ($\rho \propto r^{-5}$, $L = r/5$, $\ell \propto r^{5/3}$) the ball of a
    far-out star reaches into the core and holds a fixed fraction of all N
    stars, so its density estimate means nothing and its neighbour sum costs
    O(N). Capping $h$ there instead does not work: with $h$ well below $\ell$
    the self term $m_i W(0, h_i)$ alone exceeds the target. Where the target
    is not positive, or the particle massless (a star of weight 0), h is set
    to the smallest live h and the particle is not live. For N = 100,000 Plummer
    stars the live region ends near 6.9 Plummer radii (5.3 r_h), beyond the
    3 r_h where relaxation quality is measured.
    """
    h, rho_t, live, _ = _smoothing_lengths_and_slope(positions, masses, target, eta, scale_fraction)
    return h, rho_t, live


def _smoothing_lengths_and_slope(positions, masses, target, eta, scale_fraction=0.75):
    """`smoothing_lengths` and the target's gradient ∇ρ_t(x_i), (N, d)."""
    dim = positions.shape[1]
    rho_t, pullback = jax.vjp(target, positions)
    (slope,) = pullback(jnp.ones_like(rho_t))
    # A massless particle (a star of weight 0) has no spacing of its own: h = 0
    # made its kernel infinite and every position NaN. It counts as neither.
    positive = (rho_t > 0) & (masses > 0)
    rho_safe = jnp.where(positive, rho_t, 1.0)
    ell = (jnp.where(positive, masses, 1.0) / rho_safe) ** (1.0 / dim)
    h = eta * ell
    slope2 = jnp.sum(slope * slope, axis=1)
    # h <= f rho / |grad rho|, squared and multiplied out (no division by 0).
    live = positive & (h * h * slope2 <= (scale_fraction * rho_safe) ** 2)
    h_live_min = jnp.min(jnp.where(live, h, jnp.inf))
    h = jnp.where(positive, h, jax.lax.stop_gradient(h_live_min))
    return h, rho_t, live, slope


def _schedule(t: Array, settings: RelaxSettings, dtype) -> Array:
    frac = jnp.minimum(t.astype(dtype) / max(settings.steps - 1, 1), 1.0)
    f = FINAL_STEP_FRACTION
    return settings.step_size * (f + (1.0 - f) * 0.5 * (1.0 + jnp.cos(jnp.pi * frac)))


def _update(problem: RelaxProblem, s: RelaxSettings, state: RelaxState) -> RelaxState:
    """One preconditioned, projected heavy-ball step (module docstring)."""
    x, m = state.x, problem.masses
    dim = x.shape[1]
    h, rho_t, live, slope = _smoothing_lengths_and_slope(x, m, problem.target, s.eta, s.live_scale)
    bands = build_bands(
        x,
        SUPPORT * h,
        box=problem.box,
        n_bands=s.n_bands,
        band_ratio=s.band_ratio,
        cells_per_reach=s.cells_per_reach,
        x_cells_per_reach=s.x_cells_per_reach,
        chunk=s.chunk,
        groups=s.groups,
        query=jax.lax.stop_gradient(live),
    )
    rho = pair_sum(density_pair(s.kernel, dim), bands, {"x": x, "m": m, "h": h}, 1)[:, 0]
    e = jnp.where(live, 2.0 * (rho - rho_t), 0.0)
    g = pair_sum(loss_gradient_pair(s.kernel, dim), bands, loss_gradient_features(s.kernel, x, m, h, e), dim)
    g = g - e[:, None] * slope  # the target's own slope: -2(ρ_i - ρ_t,i) ∇ρ_t(x_i)
    spacing = h / s.eta
    rho_safe = jnp.where(live, rho_t, 1.0)
    v = s.momentum * state.v - _schedule(state.t, s, x.dtype) * (spacing**2 / rho_safe**2)[:, None] * g
    v = jnp.where(live[:, None], v, 0.0)
    # Particles that are not live are held by a trust radius of 0: after
    # `LimitStep` no projection moves them either (the radial hold used to:
    # at N = 2,000, where only 41% of the stars are live, it emptied the
    # 1.0-1.2 pc shell just past the live region from 184 stars to 21).
    v = project(problem.projections, x, v, jnp.where(live, s.max_step * spacing, 0.0))
    x = x + v if problem.box is None else jnp.mod(x + v, problem.box)
    return RelaxState(x, v, state.t + 1)


class _Step(eqx.Module):
    problem: RelaxProblem
    settings: RelaxSettings = eqx.field(static=True)

    def __call__(self, state: RelaxState) -> RelaxState:
        return _update(self.problem, self.settings, state)


def make_relaxation(
    problem: RelaxProblem, settings: RelaxSettings
) -> tuple[Callable[[Array], RelaxState], Callable[[RelaxState], RelaxState]]:
    """`(init, step)`: `init(positions)` is the state at step 0 (at rest),
    `step(state)` the state one step on. Both are pure and differentiable;
    `step` is a pytree (an `equinox.Module`), so `equinox.filter_jit` of a
    function taking it compiles once per problem structure and settings
    (`run`, and `relax`'s progress loop, share it). Settings left None take
    the defaults of the problem's boundary (`RelaxSettings.for_boundary`)."""

    def init(positions: Array) -> RelaxState:
        return RelaxState(positions, jnp.zeros_like(positions), jnp.asarray(0, jnp.int32))

    return init, _Step(problem, settings.for_boundary(problem.box is not None))


def _run(step: _Step, state: RelaxState, count: int) -> RelaxState:
    """`run(step, state, count)`: `count` (static) steps of `step` in a
    `lax.scan` checkpointed on two levels (differentiable; the memory of its
    gradient is about 2 sqrt(count) copies of the state)."""
    if count == 0:
        return state
    inner = max(1, math.isqrt(count - 1) + 1)
    outer = -(-count // inner)
    last = state.t + count

    @jax.checkpoint
    def one(state):
        new = step(state)
        live = state.t < last  # the padding steps of the last block do nothing
        return jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), new, state)

    @jax.checkpoint
    def block(state, _):
        state, _ = jax.lax.scan(lambda c, _: (one(c), None), state, None, length=inner)
        return state, None

    state, _ = jax.lax.scan(block, state, None, length=outer)
    return state


# Compiled once per problem structure, settings and step count; model and
# constant targets are Partials of module-level functions, so runs of one
# model kind and size share the program.
run = eqx.filter_jit(_run)
