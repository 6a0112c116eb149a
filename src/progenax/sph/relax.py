r"""`relax`: move particles until their SPH density matches a target profile.

A thin wrapper over `sph.relaxation` (the problem and the optimiser,
`make_relaxation(problem, settings) -> (init, step)`): it reads an
`InitialConditions` or a positions array, resolves the target
(`sph.targets`), composes the projections (`sph.projections`), runs the steps
in one checkpointed scan (or a plain loop over `step` with a progress bar),
and puts the velocities back.

The total mass, every mass and the centre of mass are preserved (open
boundaries: `KeepCentreOfMass`), and for a cluster relaxed towards a
spherical profile its radial mass profile too (`KeepRadii`: 7 Lagrangian
radii, 15 below 50,000 stars, the half-mass radius among them). Stars that are
not live (`smoothing_lengths`) stay where they are: no projection moves them. For a Plummer sphere of 100,000
stars, 100 steps with the radii kept and the box's optimiser values
(`sph.relaxation.PERIODIC`, every relaxation's defaults then), the target's
slope term took the rms error inside 3 r_h from 11% to about 5%, and the
smooth radial hold and centre-of-mass handling to 2.3% (King W0 = 9: 5.8%);
with the open-space values (`OPEN`) 30 steps reach 1.3% with the cubic kernel,
1.7% with the default Wendland C2, which does not collapse stars into pairs
(`sph.relaxation.RELAX_KERNEL`, `benchmarks/relax.py`).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import Array, ArrayLike
from ..builders._common import as_key
from ..diagnostics.energy import scale_to_virial_ratio
from ..sampling import isotropic_directions, safe_norm
from ..state import InitialConditions, ParticleState
from ..validation import deferred_checks
from .adaptive import adaptive_density as adaptive_density
from .adaptive import loss_gradient_features as _loss_gradient_features  # noqa: F401 (tests/sph/test_pairs.py)
from .adaptive import loss_gradient_pair as _loss_gradient_pair  # noqa: F401
from .density import checked_box, checked_masses, checked_positions
from .pairs import density_pair as _density_pair  # noqa: F401 (tests/sph/test_pairs.py)
from .projections import SMALL_N, KeepCentreOfMass, KeepHalfMassRadius, KeepRadii, LimitStep, centre_of_mass
from .relaxation import RELAX_KERNEL, run
from .relaxation import RelaxProblem as RelaxProblem
from .relaxation import RelaxSettings as RelaxSettings
from .relaxation import make_relaxation as make_relaxation
from .relaxation import smoothing_lengths as smoothing_lengths
from .targets import _check_target_values, _resolve_target
from .targets import model_density as model_density
from .targets import profile_density as profile_density
from .targets import tracer_masses as tracer_masses

VELOCITY_MODES = ("keep", "resample")


# -- velocities ------------------------------------------------------------------------
@deferred_checks
def resample_velocities(key, ic, positions: Array) -> Array:
    """Velocities drawn from the model's isotropic distribution function at
    `positions` (`ic.model.sample_speeds`), in the frame and scaled to the Q
    (when the cluster was built with one) of the weighted masses; in the
    units of `ic` (physical). One program (eager,
    a King model's profile solve and speed sampler dispatched operations one
    by one: 5.8 s on a first call, 0.38 s on later ones, at 1e4 stars)."""
    n, dtype = positions.shape[0], positions.dtype
    masses = ic.state.masses * ic.weights
    total = jnp.sum(masses)
    k_speed, k_dir = jax.random.split(key)
    speed = ic.model.prepared().with_mass(total).sample_speeds(k_speed, safe_norm(positions))
    v = speed[:, None] * isotropic_directions(k_dir, n, dtype)
    v = v - jnp.sum(masses[:, None] * v, axis=0) / total
    if "Q" in ic.params:
        v = scale_to_virial_ratio(positions, v, masses, ic.params["Q"], G=ic.units.G, centre=jnp.zeros(3, dtype))
    return v


# -- public entry point ------------------------------------------------------------------
def relax(
    system,
    *,
    target=None,
    steps: int = 200,
    box: ArrayLike | None = None,
    masses: ArrayLike | None = None,
    eta: float = 1.2,
    step_size: float | None = None,
    momentum: float | None = None,
    max_step: float | None = None,
    velocities: str = "keep",
    keep_radii: bool | None = None,
    key=None,
    kernel: str = RELAX_KERNEL,
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
      pointwise and differentiable (e.g. `profile_density(ic)`, the
      cluster's own smoothed radial profile, for a file without a model).
    - `steps`: number of steps (fixed; a `lax.scan`). 0 returns the input.
      At N = 100,000 a Plummer sphere reaches 1.7% rms inside 3 r_h after
      30 steps; a King W0 = 9 cluster 1.6% after 100 (`benchmarks/relax.py`).
      At small N only the inner stars are resolved and move (Plummer, 200
      steps: N = 2,000 56.5% to 52.0%, N = 10,000 35.2% to 19.2%;
      docs/relax.md, "Small clusters").
    - `box`: periodic box length (scalar or one per axis), None for open space.
    - `masses`: for a bare positions array: scalar or (N,); default for a
      constant target is rho * volume / N (the target is then reachable).
    - `eta`, `step_size`, `momentum`, `max_step`, `kernel`, `n_bands`,
      `band_ratio`: the optimiser's `RelaxSettings` (`n_bands` default: 1 band
      for a constant target, 8 otherwise; `step_size`, `momentum`,
      `max_step` default: `sph.relaxation.OPEN` (3, 0.6, 0.2) in open space,
      `PERIODIC` (1, 0.9, 0.3) in a box).
    - `velocities`: "keep" (default) or "resample" from the model's
      distribution function at the new positions (Plummer, King, LIMEPY;
      needs `key`).
    - `keep_radii`: hold the radial mass profile each step (`KeepRadii`: the
      Lagrangian radii at mass fractions k/8, k/16 below 50,000 stars, about
      the input's centre of mass stay the input's), so r_h is kept. Default: True for `target=None`
      (a spherical model). The SPH density of a random sample is biased high
      by its self term (about 20% of the target at eta = 1.2 in 3D), and an
      open cluster can lower the loss by expanding, with particles gathering
      in pairs, instead of ordering: a Plummer sphere of 100,000 stars grew
      10% in r_h over 100 steps that way.
    - `progress`: show a tqdm bar (a plain loop over the jitted `step`: not
      for use under `jit` or `grad`).

    **Returns:** the same kind of object as `system`, relaxed. Differentiable
    end to end (`jax.grad` through every step; `progenax.sph.relaxation`).

    **Raises** `ValueError` naming the argument for a bad setting, a target
    that is not finite and positive at every particle, or a missing `box`,
    `masses` or `key`.

    ```python
    ic = progenax.plummer_builder(0, n=10_000)
    relaxed = progenax.relax(ic, steps=100)
    ```
    """
    if velocities not in VELOCITY_MODES:
        raise ValueError(f"velocities must be one of {VELOCITY_MODES}, got {velocities!r}")
    settings = RelaxSettings(
        steps=steps,
        eta=eta,
        step_size=step_size,
        momentum=momentum,
        max_step=max_step,
        kernel=kernel,
        n_bands=1 if n_bands is None else n_bands,
        band_ratio=band_ratio,
    )  # step_size, momentum, max_step left None: make_relaxation takes the boundary's
    ic, systems, x0, m = _positions_and_masses(system)
    n, dim = x0.shape
    dtype = x0.dtype
    box = checked_box(box, dim, dtype)
    target_fn, uniform = _resolve_target(target, ic, box, dtype)
    if n_bands is None and not uniform:
        settings = dataclasses.replace(settings, n_bands=8)
    # Before masses are derived from it: a bad constant target is named as the target.
    _check_target_values(target_fn(x0))
    if m is None:
        if masses is None:
            if not uniform:
                raise ValueError("give masses= for a bare positions array with a non-constant target")
            masses = jnp.asarray(target, dtype) * jnp.prod(box) / n
        m = checked_masses(masses, n, dtype)
    if velocities == "resample" and (ic is None or key is None):
        raise ValueError("velocities='resample' needs an InitialConditions and a key")
    if velocities == "resample":
        key = as_key(key)
    if keep_radii is None:
        keep_radii = target is None
    if keep_radii and box is not None:
        raise ValueError("keep_radii applies to open boundaries (box=None)")

    com_masses = m if ic is None else systems.masses
    projections = (LimitStep(),) if box is not None else (LimitStep(), KeepCentreOfMass(com_masses))
    if keep_radii:
        projections = _radial_hold(x0, m, com_masses, ic is not None) + projections
    init, step = make_relaxation(RelaxProblem(m, target_fn, box, projections), settings)
    state = init(x0)
    state = _loop_with_progress(step, state, settings.steps) if progress else run(step, state, settings.steps)
    x = state.x
    if box is None:
        x = x + (centre_of_mass(x0, com_masses) - centre_of_mass(x, com_masses))  # round-off only
    if ic is None:
        return x
    vel = ic.state.velocities
    if velocities == "resample":  # the systems' velocities (weighted masses), each binary's orbit kept
        moved = InitialConditions(systems, jnp.ones_like(systems.masses), ic.model, ic.params, ic.units)
        fresh = resample_velocities(key, moved, x)
        vel = fresh if ic.pairs is None else vel + _per_star(ic, fresh - systems.velocities)
    if ic.pairs is not None:
        x = ic.state.positions + _per_star(ic, x - x0)
    state = ParticleState(x, vel, ic.state.masses)
    relaxed = InitialConditions(state, ic.weights, ic.model, ic.params, ic.units, ic.pairs)
    return relaxed.to_henon() if system.units.name == "henon" else relaxed


def _per_star(ic: InitialConditions, change: Array) -> Array:
    """A change of each system (rows of `InitialConditions.systems`) applied to
    each of its stars: a binary moves as a whole, its orbit unchanged."""
    if ic.pairs is None:
        return change
    return change.at[ic.pairs[:, 1]].set(change[ic.pairs[:, 0]])


def _radial_hold(x0: Array, m: Array, star_masses: Array, cluster: bool) -> tuple:
    """The radial hold of `relax`: `KeepRadii` of the stars' own masses; for a
    cluster of fewer than `SMALL_N` stars, of the tracer masses `m` the density
    loss sees, with the stars' half-mass radius kept by one uniform stretch
    (`KeepHalfMassRadius`).

    The two profiles differ by the IMF's noise, which grows as N falls (a
    Kroupa sample weighs like N/15 equal stars). Holding every knot of the
    stars' profile against a target that wants the tracers' profile then
    empties shells between knots: Plummer, N = 10,000, seed 1, 200 steps (its
    mass-weighted r_h 5% beyond the model's), the 1.4-1.6 pc shell went from
    583 stars to 0; the fewest stars a 0.2 r_h shell kept over seeds 0-7 at
    N = 2,000 was 0.00 (two seeds below 0.45) against 0.54 with the tracers'
    knots. At N = 100,000 the stars' knots stay: King W0 = 9 relaxed to 1.59%
    with them against 2.64% with the tracers' (Plummer 1.69% against 1.57%).
    """
    if not cluster or x0.shape[0] >= SMALL_N:
        return (KeepRadii.of(x0, star_masses),)
    return (KeepRadii.of(x0, m), KeepHalfMassRadius.of(x0, star_masses))


def _positions_and_masses(
    system,
) -> tuple[InitialConditions | None, ParticleState | None, Array, Array | None]:
    """(physical InitialConditions or None, its systems or None, positions
    (N, d), tracer masses or None): a cluster's systems
    (`InitialConditions.systems`: what relaxes, a binary as one), their
    positions and their `tracer_masses`."""
    if isinstance(system, InitialConditions):
        ic = system.to_physical()
        systems = ic.systems()
        return ic, systems, systems.positions, tracer_masses(ic)
    return None, None, checked_positions(system, dims=(2, 3)), None


_step_once = eqx.filter_jit(lambda step, state: step(state))


def _loop_with_progress(step, state, steps: int):
    """The steps one jitted `step` call at a time, with a tqdm bar: one
    compile whatever `steps` (an earlier block loop with a static first index
    compiled every block anew: 50 steps at N = 2,000 took 44 s instead of 10)."""
    from tqdm.auto import tqdm  # only for progress=True (start-up time)

    for _ in tqdm(range(steps), unit="step", desc="relax"):
        state = _step_once(step, state)
    return jax.block_until_ready(state)
