r"""Relaxation: move particles until their SPH density matches a target profile.

`relax` minimises the density loss

$$\mathcal{L}(x) = \sum_i \bigl(\rho_i(x) - \rho_t(x_i)\bigr)^2,\qquad
\rho_i = \sum_j m_j W(|x_i - x_j|, h_i),$$

with adaptive smoothing lengths $h_i = \eta\,\ell_i$, $\ell_i = (m_i /
\rho_t(x_i))^{1/d}$ the local interparticle spacing the target asks for (so
every particle keeps about the same number of neighbours, about 58 in 3D and
18 in 2D at $\eta = 1.2$ with the cubic spline's support $2h$).

**The update** is heavy-ball gradient descent, preconditioned per particle so
that a step is measured in units of the local spacing:

$$g_i = \partial\mathcal{L}/\partial x_i\big|_{h},\qquad
v_i \leftarrow \mu v_i - \tau_t\, \frac{\ell_i^2}{\rho_{t,i}^2}\, g_i,\qquad
|v_i| \le c\,\ell_i,\qquad x_i \leftarrow x_i + v_i,$$

with momentum $\mu$ (0.9), step size $\tau_t$ decaying on a cosine schedule
from `step_size` (1.0) to 1% of it over the run, and a cap $c$ (0.3) on the
displacement per step. $g$ is taken at fixed $h_i$ (the smoothing lengths
follow the particles between steps, not inside one): its pair part in the
one-pass gather form of `_loss_gradient_pair` (exact where h is uniform,
within 4e-4 of the exact gradient in a Plummer sphere), plus the target's own
slope, $-2(\rho_i - \rho_{t,i})\nabla\rho_t(x_i)$, which pulls an over-dense
particle up the profile against the outward push of the pair part. Only
*live* particles move (`smoothing_lengths`): in the sparse far halo, where a
particle's SPH density is mostly its own self term, the slope term would
otherwise run particles down the profile. For a Plummer sphere of 100,000
stars, 100 steps with the radii kept, adding the slope term took the rms error
inside 3 r_h from 11% to about 5%, and the smooth radial hold and centre-of-mass
handling below took it to 2.3% (King W0 = 9: 5.8%; `benchmarks/relax.py`).

Measured on a periodic 2D box of 10,000 particles from a uniform random
start, 200 steps: rms relative density error 0.25% with these settings, 0.34%
with (step 0.5, momentum 0.9), 0.78% with (0.3, 0.8); Adam (optax,
cosine-decayed, best of two learning rates) stopped at 1.37%, plain gradient
descent without momentum at 3.2% after 100 steps, and larger steps without
the cap diverge.

**Fixed work, no stopping rule**: the steps run in a `lax.scan`, so `relax`
works under `jit`, `vmap` and `grad`. The scan is checkpointed on two levels
(blocks of about $\sqrt{\text{steps}}$ steps, and each step), so the memory
of `jax.grad` through the whole relaxation is that of about
$2\sqrt{\text{steps}}$ copies of the positions plus one step's working set.
Each step is differentiable end to end: the neighbour sums are
`sph.pairs.pair_sum` passes with their own reverse pass.

The total mass, every mass and the centre of mass are preserved (open
boundaries: every step removes the stars' mean displacement, from each
particle in proportion to its local spacing), and for
a cluster relaxed towards its own model its radial mass profile too
(`keep_radii`: 7 Lagrangian radii, the half-mass radius among them).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..diagnostics.energy import scale_to_virial_ratio
from ..diagnostics.radii import lagrangian_radii
from ..models import density_at
from ..sampling import isotropic_directions, safe_norm
from ..state import InitialConditions, ParticleState
from ..validation import check_static_int
from .kernels import SUPPORT, get_kernel
from .pairs import build_bands, pair_sum, safe_distance

VELOCITY_MODES = ("keep", "resample")
FINAL_STEP_FRACTION = 0.01  # the cosine schedule ends at 1% of step_size


@dataclasses.dataclass(frozen=True)
class RelaxSettings:
    """Static settings of a relaxation (see `relax` for their meaning)."""

    steps: int = 200
    eta: float = 1.2
    step_size: float = 1.0
    momentum: float = 0.9
    max_step: float = 0.3
    kernel: str = "cubic"
    n_bands: int = 8
    band_ratio: float = 2.0
    cells_per_reach: int | None = None  # None: pairs.DEFAULT_LAYOUT
    x_cells_per_reach: int | None = None
    chunk: int | None = None
    groups: int = 128


# -- pair functions (module level: static arguments of pair_sum) ----------------
@functools.cache
def _density_pair(kernel_name: str, dim: int):
    kernel = get_kernel(kernel_name)

    def pair(a_i, a_j, dx):
        r = safe_distance(dx)
        return (a_j["m"] * kernel.value(r, a_i["h"], dim),), None

    return pair


@functools.cache
def _loss_gradient_pair(kernel_name: str, dim: int):
    """The loss gradient at fixed h, gathered over each particle's own ball:
    ∂L/∂x_i = Σ_j [e_i m_j F(r, h_i) + e_j m_i F(r, h_j)] (x_i - x_j), with
    e = 2(ρ - ρ_t) and F = W'(r)/r = σ_d h^{-d-2} f'(q)/q (the first term from
    ρ_i, the second from the neighbours' ρ_j), over |x_i - x_j| < 2h_i.

    One pass, no scatter: the exact gradient's reaction terms come from every j
    whose own ball holds i, and a ball larger than i's reaches past i's
    candidates. The pairs missed, 2h_i < r < 2h_j, sit where F(r, h_j) and its
    slope vanish (the kernel's edge), so with h varying smoothly the
    difference is small: for a Plummer sphere of 100,000 particles the
    direction differs from the exact gradient by 4e-4 in norm (0.16% for the
    median particle, 3.8% for the 99th percentile), and by nothing where h is
    uniform. It costs half the exact scatter form (one core, same sphere:
    0.50 s against 0.91 s per pass).
    Features: "a" = e σ_d h^{-d-2}
    and "inv_h" = 1/h per particle (`_loss_gradient_features`), so a pair
    costs no powers."""
    slope = get_kernel(kernel_name).slope_over_q_in(dim)

    def pair(a_i, a_j, dx):
        r = safe_distance(dx)
        q_i = r * a_i["inv_h"]
        # A candidate list holds whole cells, some of them outside i's ball,
        # where F(r, h_i) is 0 but F(r, h_j) need not be: the ball's edge
        # is explicit so that the sum does not depend on the cell layout.
        reaction = jnp.where(q_i < SUPPORT, a_j["a"] * a_i["m"] * slope(r * a_j["inv_h"]), 0.0)
        coef = a_i["a"] * a_j["m"] * slope(q_i) + reaction
        return tuple(coef * d for d in dx), None

    return pair


def _loss_gradient_features(kernel_name: str, x: Array, m: Array, h: Array, e: Array) -> dict:
    dim = x.shape[1]
    norm = get_kernel(kernel_name).normalisation(dim)
    return {"x": x, "m": m, "a": e * norm * h ** (-dim - 2), "inv_h": 1.0 / h}


def adaptive_density(
    positions: Array,
    masses: Array,
    h: Array,
    *,
    box: Array | None = None,
    kernel: str = "cubic",
    query: Array | None = None,
    n_bands: int = 8,
    band_ratio: float = 2.0,
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int = 128,
) -> Array:
    r"""SPH density $\rho_i = \sum_j m_j W(|x_i - x_j|, h_i)$ with per-particle h,
    on banded cell lists (`sph.pairs`): efficient when h varies by up to
    `band_ratio ** n_bands` across the particles, exact for any h.

    Arguments as in `progenax.sph.density` (masses and h scalars or per
    particle, (N,)); `query` (N,) bool limits the work to those particles
    (the others' densities come out 0). Differentiable in positions, masses and h, also inside a
    `lax.scan` that is itself differentiated (its reverse pass is plain array
    code). Jitted once per static configuration.
    """
    positions = jnp.asarray(positions)
    if not jnp.issubdtype(positions.dtype, jnp.floating):
        positions = positions.astype(jnp.result_type(float))
    n, dim = positions.shape
    masses = jnp.broadcast_to(jnp.asarray(masses, positions.dtype), (n,))
    h = jnp.broadcast_to(jnp.asarray(h, positions.dtype), (n,))
    if box is not None:
        box = jnp.broadcast_to(jnp.asarray(box, positions.dtype), (dim,))
    fn = _adaptive_density_fn(
        kernel, int(n_bands), float(band_ratio), cells_per_reach, x_cells_per_reach, chunk, int(groups)
    )
    return fn(positions, masses, h, box, None if query is None else jnp.asarray(query, bool))


@functools.cache
def _adaptive_density_fn(kernel, n_bands, band_ratio, cells_per_reach, x_cells_per_reach, chunk, groups):
    @jax.jit
    def fn(positions, masses, h, box, query):
        bands = build_bands(
            positions,
            SUPPORT * h,
            box=box,
            n_bands=n_bands,
            band_ratio=band_ratio,
            cells_per_reach=cells_per_reach,
            x_cells_per_reach=x_cells_per_reach,
            chunk=chunk,
            groups=groups,
            query=query,
        )
        features = {"x": positions, "m": masses, "h": h}
        return pair_sum(_density_pair(kernel, positions.shape[1]), bands, features, 1)[:, 0]

    return fn


# -- one step ----------------------------------------------------------------------
class _Problem(eqx.Module):
    """What a step needs besides the state: masses, the target, the box."""

    masses: Array
    target: Callable[[Array], Array]
    box: Array | None
    com_masses: Array  # the stars' masses (times weights): centre of mass and Lagrangian radii
    centre: Array  # the input's centre of mass, fixed: the centre of the radial profile
    radii: Array | None  # the input's radial profile knots (`_profile_knots`), kept each step
    settings: RelaxSettings = eqx.field(static=True)


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
    particles' densities (no neighbour search of their own): in a Plummer halo ($\rho \propto r^{-5}$, $L = r/5$, $\ell
    \propto r^{5/3}$) the ball of a far-out star reaches into the core and holds
    a fixed fraction of all N stars, so its density estimate means nothing and
    its neighbour sum costs O(N). Capping $h$ there instead does not work: with
    $h$ well below $\ell$ the self term $m_i W(0, h_i)$ alone exceeds the
    target. Where the target is not positive h is set to the smallest live h.
    For N = 100,000 Plummer stars the live region ends
    near 6.9 Plummer radii (5.3 r_h), beyond the 3 r_h where relaxation quality
    is measured.
    """
    h, rho_t, live, _ = _smoothing_lengths_and_slope(positions, masses, target, eta, scale_fraction)
    return h, rho_t, live


def _smoothing_lengths_and_slope(positions, masses, target, eta, scale_fraction=0.75):
    """`smoothing_lengths` and the target's gradient ∇ρ_t(x_i), (N, d)."""
    dim = positions.shape[1]
    rho_t, pullback = jax.vjp(target, positions)
    (slope,) = pullback(jnp.ones_like(rho_t))
    positive = rho_t > 0
    rho_safe = jnp.where(positive, rho_t, 1.0)
    ell = (masses / rho_safe) ** (1.0 / dim)
    h = eta * ell
    slope2 = jnp.sum(slope * slope, axis=1)
    # h <= f rho / |grad rho|, squared and multiplied out (no division by 0).
    live = positive & (h * h * slope2 <= (scale_fraction * rho_safe) ** 2)
    h_live_min = jnp.min(jnp.where(live, h, jnp.inf))
    h = jnp.where(positive, h, jax.lax.stop_gradient(h_live_min))
    return h, rho_t, live, slope


def _schedule(t, settings: RelaxSettings, dtype):
    frac = jnp.minimum(t.astype(dtype) / max(settings.steps - 1, 1), 1.0)
    f = FINAL_STEP_FRACTION
    return settings.step_size * (f + (1.0 - f) * 0.5 * (1.0 + jnp.cos(jnp.pi * frac)))


def _step(problem: _Problem, state):
    """One preconditioned heavy-ball step (see the module docstring)."""
    x, v, t = state
    s = problem.settings
    dim = x.shape[1]
    m = problem.masses
    h, rho_t, live, slope = _smoothing_lengths_and_slope(x, m, problem.target, s.eta)
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
    features = {"x": x, "m": m, "h": h}
    rho = pair_sum(_density_pair(s.kernel, dim), bands, features, 1)[:, 0]
    e = jnp.where(live, 2.0 * (rho - rho_t), 0.0)
    g = pair_sum(_loss_gradient_pair(s.kernel, dim), bands, _loss_gradient_features(s.kernel, x, m, h, e), dim)
    g = g - e[:, None] * slope  # the target's own slope: -2(ρ_i - ρ_t,i) ∇ρ_t(x_i)
    tau = _schedule(t, s, x.dtype)
    spacing = h / s.eta  # the local spacing of live particles
    rho_safe = jnp.where(live, rho_t, 1.0)
    v = s.momentum * v - tau * (spacing**2 / rho_safe**2)[:, None] * g
    v = jnp.where(live[:, None], v, 0.0)
    cap = s.max_step * spacing
    if problem.box is None:
        if problem.radii is not None:
            # The radial profile's own change comes out before the cap: where
            # the target is steep (a King core) the step's coherent radial
            # part is large, and capped first it would shrink the rest with it.
            v = _keep_radii(x + v, problem.radii, problem.com_masses, problem.centre) - x
        v = _capped(v, cap)
        # Keep the centre of mass: take out the stars' mean displacement, each
        # particle in proportion to its own spacing. A uniform shift instead
        # (the mean is mostly the halo's large, noisy moves) jolted a King
        # core, whose spacings are 30 times smaller, by up to a spacing per
        # step; without any, the pair forces' small net sum made the cluster
        # drift by 0.05 r_h in 60 steps, away from the target's centre.
        w = problem.com_masses
        drift = jnp.sum(w[:, None] * v, axis=0) / jnp.sum(w * spacing)
        v = v - spacing[:, None] * drift
        x = x + v
    else:
        v = _capped(v, cap)
        x = jnp.mod(x + v, problem.box)
    return x, v, t + 1


def _capped(v: Array, cap: Array) -> Array:
    """v_i scaled down to |v_i| <= cap_i (double where: the norm's gradient at 0)."""
    speed2 = jnp.sum(v * v, axis=1)
    moving = speed2 > 0
    speed = jnp.sqrt(jnp.where(moving, speed2, 1.0))
    return v * jnp.where(moving & (speed > cap), cap / speed, 1.0)[:, None]


def _centre_of_mass(x: Array, w: Array) -> Array:
    return jnp.sum(w[:, None] * x, axis=0) / jnp.sum(w)


# keep_radii holds the Lagrangian radii at the mass fractions k / 8. The
# stars' masses make each radius noisy (a Kroupa IMF is an effective sample of
# N/15 stars), and with 63 of them (1/64-mass shells, thinner than a kernel)
# that noise was pinned into the relaxed density. Measured at N = 100,000,
# 100 steps, rms error inside 3 r_h for seeds 0 and 1: Plummer 3.6% with 63
# radii, 2.3% and 2.8% with 7; King W0 = 9 5.7% and 7.1% with 63, 5.8% and
# 8.0% with 7 (16 radii: Plummer 2.5%, King 7.8%, seed 0).
PROFILE_KNOTS = 8


def _profile_knots(x: Array, w: Array, knots: int, centre: Array) -> Array:
    """Lagrangian radii about `centre` (weights `w`) at the mass fractions
    k / knots, k = 1 .. knots - 1 (the half-mass radius among them when
    `knots` is even)."""

    fractions = np.arange(1, knots) / knots
    return lagrangian_radii(x, w, jnp.asarray(fractions, x.dtype), centre=centre)


def _keep_radii(x: Array, knots: Array, w: Array, centre: Array) -> Array:
    """Move every particle along its ray from `centre` by the one smooth,
    monotonic map of radius that puts the Lagrangian radii back on `knots`
    (the input's, `_profile_knots`): piecewise linear between them,
    proportional inside the first and beyond the last. The radial mass profile
    is the input's at every knot, the half-mass radius included, while the
    particles rearrange freely at smaller scales, radially too. (Holding every
    rank's radius instead pins the random sample's radial Poisson noise in
    place: at N = 20,000 that left 9% to 16% error in the relaxed interior.)"""
    d = x - centre
    r = safe_norm(d)
    now = _profile_knots(x, w, knots.shape[0] + 1, centre)
    inner = r * (knots[0] / now[0])
    outer = r + (knots[-1] - now[-1])  # not a stretch: that would swing the far halo
    new_r = jnp.where(r < now[0], inner, jnp.where(r > now[-1], outer, jnp.interp(r, now, knots)))
    scale = jnp.where(r > 0, new_r / jnp.where(r > 0, r, 1.0), 1.0)
    return centre + d * scale[:, None]


def _run(problem: _Problem, x: Array, v: Array, first: Array, count: int) -> tuple[Array, Array]:
    """`count` (static) steps from step index `first` (an int32 array), checkpointed on two levels."""
    if count == 0:
        return x, v
    inner = max(1, math.isqrt(count - 1) + 1)
    outer = -(-count // inner)
    last = first + count

    @jax.checkpoint
    def step(state):
        new = _step(problem, state)
        live = state[2] < last  # the padding steps of the last block do nothing
        return jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), new, state)

    @jax.checkpoint
    def block(state, _):
        state, _ = jax.lax.scan(lambda c, _: (step(c), None), state, None, length=inner)
        return state, None

    state = (x, v, first)
    (x, v, _), _ = jax.lax.scan(block, state, None, length=outer)
    return x, v


# Compiled once per problem structure and step count. The first step index is
# an array argument, so every block of a progress-bar run reuses one program
# (as a Python int it was static and each block compiled anew: 50 steps at
# N = 2,000 took 44 s instead of 10); model and constant targets are Partials
# of module-level functions, so runs of one model kind and size share it too.
_run_block = eqx.filter_jit(_run)


# -- targets -------------------------------------------------------------------------


def model_density(ic) -> Callable[[Array], Array]:
    r"""The mass density $\rho(x)$ of the model `ic` was built from (`ic.model`),
    about the origin, in the units of `ic` (mass / length^3), for its total
    (weighted) mass.

    Returned as a `jax.tree_util.Partial` of a module-level function with the
    model as its pytree argument, so relaxations of models of one kind and
    size share one compiled step loop.

    **Raises** `ValueError` (`progenax.models.NoAnalyticFormError`) for a model
    without an analytic density (fractal, multi-mass): pass `target=` instead.
    """
    if ic.units.name != "physical":
        raise ValueError("model_density needs an InitialConditions in physical units (ic.to_physical())")
    model = ic.model.prepared().with_mass(jnp.sum(ic.state.masses * ic.weights))
    model.density(jnp.zeros((), ic.state.positions.dtype))  # raises now for a model without a density
    return jax.tree_util.Partial(density_at, model)


def _uniform_density(value, x):
    return jnp.full(x.shape[:1], value, x.dtype)


def _resolve_target(target, ic, box, dtype) -> tuple[Callable[[Array], Array], bool]:
    """(callable target, is_uniform)."""
    if target is None:
        if ic is None:
            raise ValueError(
                "target=None uses the profile the cluster was built from: pass an InitialConditions, "
                "or give target (a constant density or a callable rho(x))"
            )
        return model_density(ic), False
    if callable(target):
        return target, False
    value = jnp.asarray(target, dtype)
    if value.ndim != 0:
        raise ValueError(f"target must be None, a scalar density or a callable rho(x), got shape {value.shape}")
    if box is None:
        raise ValueError("a constant target describes a uniform periodic box: give box=")
    return jax.tree_util.Partial(_uniform_density, value), True


def _check_target_values(rho_t: Array) -> Array:
    bad = ~jnp.isfinite(rho_t) | (rho_t <= 0)
    message = "the target density must be finite and positive at every particle"
    if isinstance(bad, jax.core.Tracer):
        return eqx.error_if(rho_t, jnp.any(bad), message)
    if bool(jnp.any(bad)):
        count = int(jnp.sum(bad))
        raise ValueError(f"{message}: {count} of {bad.size} particles sit where it is negative, zero or NaN")
    return rho_t


def _check_settings(steps, eta, step_size, momentum, max_step, velocities, n_bands, band_ratio):
    check_static_int("steps", steps, 0)
    for name, value in (("eta", eta), ("step_size", step_size), ("max_step", max_step)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not (0.0 <= momentum < 1.0):
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    if velocities not in VELOCITY_MODES:
        raise ValueError(f"velocities must be one of {VELOCITY_MODES}, got {velocities!r}")
    if int(n_bands) < 1 or not band_ratio > 1.0:
        raise ValueError(f"n_bands must be >= 1 and band_ratio > 1, got {n_bands}, {band_ratio}")


# -- velocities ------------------------------------------------------------------------
def resample_velocities(key, ic, positions: Array) -> Array:
    """Velocities drawn from the model's isotropic distribution function at
    `positions` (`ic.model.sample_speeds`), scaled to the cluster's Q when it
    was built with one; in the units of `ic` (physical)."""
    n, dtype = positions.shape[0], positions.dtype
    masses = ic.state.masses
    total = jnp.sum(masses)
    k_speed, k_dir = jax.random.split(key)
    speed = ic.model.prepared().with_mass(total).sample_speeds(k_speed, safe_norm(positions))
    v = speed[:, None] * isotropic_directions(k_dir, n, dtype)
    v = v - jnp.sum(masses[:, None] * v, axis=0) / total
    if "Q" in ic.params:
        v = scale_to_virial_ratio(positions, v, masses, ic.params["Q"], G=ic.units.G, centre=jnp.zeros(3, dtype))
    return v


def tracer_masses(ic) -> Array:
    """The masses the SPH density of a star cluster is measured with: every
    star weighs the mean (weighted) stellar mass.

    Stars sample the model's density with a number density proportional to its
    mass density (unsegregated clusters), so equal tracer masses make the SPH
    density an estimate of the model density. With the stars' own masses (a
    Kroupa IMF spans 0.08 to 100 Msun) a low-mass star next to a massive one
    would see a density spike of its neighbour's mass: at N = 10,000 the rms
    deviation of a fresh Plummer sample was 149% that way, and relaxation
    would clear voids around the massive stars. The stars keep their masses.
    """
    w = ic.weights
    return w * jnp.sum(ic.state.masses * w) / jnp.sum(w)


# -- public entry point ------------------------------------------------------------------
def relax(
    system,
    *,
    target=None,
    steps: int = 200,
    box: ArrayLike | None = None,
    masses: ArrayLike | None = None,
    eta: float = 1.2,
    step_size: float = 1.0,
    momentum: float = 0.9,
    max_step: float = 0.3,
    velocities: str = "keep",
    keep_radii: bool | None = None,
    key=None,
    kernel: str = "cubic",
    n_bands: int | None = None,
    band_ratio: float = 2.0,
    progress: bool = False,
):
    r"""Move particles so that their SPH density matches a target density.

    **Arguments:**

    - `system`: an `InitialConditions` (positions relaxed in physical units,
      pc and Msun, with equal tracer masses: `tracer_masses`) or a bare
      positions array (N, d), d = 2 or 3.
    - `target`: None (the analytic density of the model `system` was built
      from, `model_density`), a constant (a uniform periodic box: `box` is
      required), or any callable rho(x): (N, d) -> (N,) in mass / length^d,
      pointwise and differentiable.
    - `steps`: number of steps (fixed; a `lax.scan`). 0 returns the input.
      At N = 100,000 a Plummer sphere reaches 2.3% rms inside 3 r_h after
      100; a King W0 = 9 cluster 3.7% after the default 200 and 2.5% after
      600 (`benchmarks/relax.py`).
    - `box`: periodic box length (scalar or one per axis), None for open space.
    - `masses`: for a bare positions array: scalar or (N,); default for a
      constant target is rho * volume / N (the target is then reachable).
    - `eta`: smoothing length in local spacings, $h_i = \eta (m_i/\rho_t(x_i))^{1/d}$.
    - `step_size`, `momentum`, `max_step`: the update (module docstring);
      `max_step` caps a particle's displacement per step, in local spacings.
    - `velocities`: "keep" (default) or "resample" from the model's
      distribution function at the new positions (Plummer, King, LIMEPY;
      needs `key`).
    - `keep_radii`: after every step, move the particles along their rays
      from the input's centre of mass by one smooth monotonic map of radius
      that puts the Lagrangian radii at mass fractions k/8 back on the
      input's (default: True for `target=None`, i.e. a spherical model), so
      r_h is kept. The SPH density of a random sample is biased high by its
      self term (about 20% of the target at eta = 1.2 in 3D), and an open
      cluster can lower the loss by expanding, with particles gathering in
      pairs, instead of ordering: a Plummer sphere of 100,000 stars grew 10%
      in r_h over 100 steps that way.
    - `kernel`: "cubic", "wendland_c2" or "wendland_c4".
    - `n_bands`, `band_ratio`: smoothing-length bands of the cell lists
      (default 1 band for a constant target, 8 bands of factor 2 otherwise).
    - `progress`: show a tqdm bar (runs the steps in eager blocks: not for use
      under `jit` or `grad`).

    **Returns:** the same kind of object as `system`, relaxed. Differentiable
    end to end (`jax.grad` through every step; see the module docstring).

    ```python
    ic = progenax.plummer_builder(0, n=10_000)
    relaxed = progenax.relax(ic, steps=100)
    ```
    """

    _check_settings(steps, eta, step_size, momentum, max_step, velocities, n_bands or 1, band_ratio)
    ic = None
    if isinstance(system, InitialConditions):
        ic = system.to_physical()
        x0 = ic.state.positions
        m = tracer_masses(ic)
    else:
        x0 = jnp.asarray(system)
        if x0.ndim != 2 or x0.shape[1] not in (2, 3):
            raise ValueError(f"positions must have shape (N, 2) or (N, 3), got {x0.shape}")
        if not jnp.issubdtype(x0.dtype, jnp.floating):
            x0 = x0.astype(jnp.result_type(float))
        m = None
    n, dim = x0.shape
    dtype = x0.dtype
    if box is not None:
        box = jnp.broadcast_to(jnp.asarray(box, dtype), (dim,))
    target_fn, uniform = _resolve_target(target, ic, box, dtype)
    if m is None:
        if masses is None:
            if not uniform:
                raise ValueError("give masses= for a bare positions array with a non-constant target")
            masses = jnp.asarray(target, dtype) * jnp.prod(box) / n
        m = jnp.broadcast_to(jnp.asarray(masses, dtype), (n,))
    if velocities == "resample" and (ic is None or key is None):
        raise ValueError("velocities='resample' needs an InitialConditions and a key")
    _check_target_values(target_fn(x0))
    if n_bands is None:
        n_bands = 1 if uniform else 8
    settings = RelaxSettings(
        steps=int(steps),
        eta=float(eta),
        step_size=float(step_size),
        momentum=float(momentum),
        max_step=float(max_step),
        kernel=kernel,
        n_bands=int(n_bands),
        band_ratio=float(band_ratio),
    )
    get_kernel(kernel)  # raises on an unknown name
    com_masses = m if ic is None else ic.state.masses * ic.weights
    if keep_radii is None:
        keep_radii = target is None
    if keep_radii and box is not None:
        raise ValueError("keep_radii applies to open boundaries (box=None)")
    knots = 2 * max(1, min(PROFILE_KNOTS // 2, n // 32))  # even: r_h is a knot
    centre = _centre_of_mass(x0, com_masses)
    radii = _profile_knots(x0, com_masses, knots, centre) if keep_radii else None
    problem = _Problem(m, target_fn, box, com_masses, centre, radii, settings)

    x, v = x0, jnp.zeros_like(x0)
    if progress:
        x, v = _run_with_progress(problem, x, v, int(steps))
    else:
        x, v = _run_block(problem, x, v, jnp.asarray(0, jnp.int32), int(steps))

    if box is None:
        x = x + (centre - _centre_of_mass(x, com_masses))  # round-off only: each step keeps it
    if ic is None:
        return x
    vel = ic.state.velocities
    if velocities == "resample":
        vel = resample_velocities(key, ic, x)
    relaxed = InitialConditions(ParticleState(x, vel, ic.state.masses), ic.weights, ic.model, ic.params, ic.units)
    return relaxed.to_henon() if system.units.name == "henon" else relaxed


def _run_with_progress(problem: _Problem, x: Array, v: Array, steps: int, block: int = 10):
    from tqdm.auto import tqdm  # only for progress=True (start-up time)

    done = 0
    with tqdm(total=steps, unit="step", desc="relax") as bar:
        while done < steps:
            count = min(block, steps - done)
            x, v = _run_block(problem, x, v, jnp.asarray(done, jnp.int32), count)
            x.block_until_ready()
            done += count
            bar.update(count)
    return x, v
