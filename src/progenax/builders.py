"""Cluster builders: thin compositions of a profile, a velocity sampler and an IMF.

Every builder takes the PRNG key first (positionally or as `key=`), the particle
count `n` as a static keyword, and differentiable physical parameters as plain
floats or arrays. Static choices are validated eagerly with `ValueError`; traced
parameters out of range raise through `equinox.error_if` under `jit`.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from ._fusion import materialize
from ._types import Array, ArrayLike, Key
from .diagnostics.energy import EXACT_MAX_N, scale_to_virial_ratio
from .imf import PowerLawIMF, kroupa, salpeter
from .kinematics.plummer_df import sample_speed_fraction
from .profiles.eff import (
    TRUNCATED_HALF_MASS_MESSAGE,
    eff_sample_radii,
    eff_scale_radius,
    eff_velocity_dispersion,
    truncated_half_mass_unreachable,
)
from .profiles.plummer import plummer_sample_radii, plummer_scale_radius
from .segregation import apply_segregation, check_segregation_arguments
from .sampling import isotropic_directions, uniform_open
from .state import InitialConditions, ParticleState
from .units import G_PHYSICAL, check_units_name, physical_units
from .validation import ParameterChecks, check_count

IMF_CHOICES = ("kroupa", "salpeter", "equal")


# -- shared pieces -------------------------------------------------------------
def _as_key(key: Key | int) -> Key:
    if isinstance(key, int):
        return jax.random.PRNGKey(key)
    return key


def _check_imf(imf: str | PowerLawIMF | None) -> str | PowerLawIMF:
    if imf is None:
        return "kroupa"
    if isinstance(imf, PowerLawIMF) or imf in IMF_CHOICES:
        return imf
    raise ValueError(f"imf must be None, one of {IMF_CHOICES} or a PowerLawIMF, got {imf!r}")


class CommonArguments(NamedTuple):
    """The validated arguments every builder shares."""

    checks: ParameterChecks
    n: int
    units: str
    imf: str | PowerLawIMF
    r_h: Array
    alpha: Array
    Q: Array | None


def check_common_arguments(n, units, imf, r_h, alpha, Q) -> CommonArguments:
    """Validate n, units, imf (static) and r_h, alpha, Q (possibly traced)."""
    checks = ParameterChecks()
    return CommonArguments(
        checks=checks,
        n=check_count("n", n),
        units=check_units_name(units),
        imf=_check_imf(imf),
        r_h=checks.range("r_h", r_h, lower=0.0),
        alpha=checks.range("alpha", alpha, lower=0.0, upper=10.0),
        Q=None if Q is None else checks.range("Q", Q, lower=0.0),
    )


def resolve_imf(imf: str | PowerLawIMF, alpha: Array) -> PowerLawIMF:
    """The power-law IMF behind a choice ("equal" uses Kroupa(alpha)'s mean mass)."""
    if isinstance(imf, PowerLawIMF):
        return imf
    return salpeter() if imf == "salpeter" else kroupa(alpha)


def sample_masses(key: Key, n: int, imf: str | PowerLawIMF, alpha: Array) -> Array:
    """n stellar masses (Msun) from the IMF choice.

    "kroupa": Kroupa (2001) with high-mass slope `alpha`; "salpeter": Salpeter
    (1955); "equal": every star has the mean mass of Kroupa(alpha), so the
    expected total mass matches the Kroupa cluster of the same n.
    """
    dist = resolve_imf(imf, alpha)
    if imf == "equal":
        return jnp.full((n,), dist.mean_mass())
    return dist.sample(key, (n,))


def imf_params(imf: str | PowerLawIMF, alpha: Array) -> dict[str, Array]:
    """What `InitialConditions.params` records about the masses.

    `alpha` when it was used (Kroupa or equal masses), and the breaks and slopes
    of the IMF the masses were drawn from (not for equal masses).
    """
    params = {} if isinstance(imf, PowerLawIMF) or imf == "salpeter" else {"alpha": alpha}
    if imf != "equal":
        dist = resolve_imf(imf, alpha)
        params.update(imf_breaks=dist.breaks, imf_slopes=dist.slopes)
    return params


def segregate(key, positions, velocities, masses, params, segregation, temperature):
    """Apply mass segregation S (skipped when None) and record it in `params`.

    The key is `fold_in(key, 7)` of the builder's key, so the other random
    streams (and the unsegregated output) are unchanged by the option.
    """
    if segregation is None:
        return positions, velocities
    params["segregation"] = segregation
    k_seg = jax.random.fold_in(key, 7)
    return apply_segregation(k_seg, positions, velocities, masses, segregation, temperature=temperature, G=G_PHYSICAL)


def _centre(x: Array, masses: Array) -> Array:
    return x - jnp.sum(masses[:, None] * x, axis=0) / jnp.sum(masses)


def finish_cluster(
    model: str,
    positions: Array,
    velocities: Array,
    masses: Array,
    params: dict[str, Array],
    Q: Array | None,
    units: str,
    *,
    centre_positions: bool = True,
    large_n_energy: str = "spherical",
) -> InitialConditions:
    """Move to the centre-of-mass frame, scale to Q (unless None), set units.

    Velocities always get zero total momentum; positions are moved to the centre
    of mass unless `centre_positions=False` (heavy-tailed models keep their model
    centre at the origin). W for the scaling is the exact pair sum up to
    `EXACT_MAX_N` stars and `large_n_energy` above: "spherical" (shell theorem
    about the model centre, 0.1% for spherical models, fast) or "mesh"
    (nested-mesh P3M, for substructured clusters).
    """
    if large_n_energy not in ("spherical", "mesh"):
        raise ValueError(f"large_n_energy must be 'spherical' or 'mesh', got {large_n_energy!r}")
    velocities = _centre(velocities, masses)
    if Q is not None:
        # Positions are still about the model centre: the spherical estimate of
        # W (n > 20,000) uses it as the centre of its shells.
        origin = jnp.zeros(3, positions.dtype)
        method = "exact" if masses.shape[0] <= EXACT_MAX_N else large_n_energy
        velocities = scale_to_virial_ratio(
            positions, velocities, masses, Q, G=G_PHYSICAL, method=method, centre=origin
        )
    if centre_positions:
        positions = _centre(positions, masses)
    state = ParticleState(positions, velocities, masses)
    ic = InitialConditions(state, jnp.ones_like(masses), model, params, physical_units())
    return ic.to_henon() if units == "henon" else ic


# -- Plummer -------------------------------------------------------------------
@eqx.filter_jit
def _plummer(key, n, r_h, alpha, Q, imf, units, segregation=None, temperature=None):
    k_m, k_r, k_rdir, k_v, k_vdir = jax.random.split(key, 5)
    dtype = r_h.dtype
    masses = materialize(sample_masses(k_m, n, imf, alpha))
    a = plummer_scale_radius(r_h)
    radii = materialize(plummer_sample_radii(uniform_open(k_r, (n,), dtype), a))
    positions = radii[:, None] * isotropic_directions(k_rdir, n, dtype)
    # Escape speed sqrt(-2 Phi) and the DF's speed fraction q = v / v_e.
    v_escape = jnp.sqrt(2.0 * G_PHYSICAL * jnp.sum(masses) / jnp.sqrt(radii**2 + a**2))
    q = materialize(sample_speed_fraction(jax.random.uniform(k_v, (n,), dtype)))
    velocities = (v_escape * q)[:, None] * isotropic_directions(k_vdir, n, dtype)
    params = {"r_h": r_h, **imf_params(imf, alpha)}
    if Q is not None:
        params["Q"] = Q
    positions, velocities = segregate(key, positions, velocities, masses, params, segregation, temperature)
    return finish_cluster("plummer", positions, velocities, masses, params, Q, units)


def plummer_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    r_h: ArrayLike = 1.0,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike | None = 0.5,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
) -> InitialConditions:
    r"""A Plummer (1911) sphere sampled from its exact distribution function.

    Radii invert $M(<r) = M r^3 / (r^2 + a^2)^{3/2}$ exactly, with
    $a = r_h \sqrt{2^{2/3} - 1}$; speeds are drawn by inverse CDF from the
    isotropic DF $f(E) \propto (-E)^{7/2}$ at each radius
    (`progenax.kinematics.plummer_df`); directions are isotropic. The cluster is
    moved to its centre-of-mass frame, then velocities are scaled so that
    $T/|W| = Q$ exactly (`Q=None` keeps the equilibrium velocities of the DF,
    whose expected Q is 1/2).

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed).
    - `n`: number of stars (static).
    - `r_h`: 3D half-mass radius in pc (> 0).
    - `alpha`: high-mass slope of the Kroupa (2001) IMF (0.08-100 Msun, slopes
      1.3 / alpha, break 0.5 Msun); ignored unless `imf` is None / "kroupa" /
      "equal".
    - `Q`: virial ratio T/|W| (> 0), or None.
    - `imf`: None or "kroupa" (Kroupa with `alpha`), "salpeter", "equal", or any
      `progenax.imf.PowerLawIMF`.
    - `units`: "physical" (pc, Msun, km/s) or "henon" (G = M = 1, E = -1/4 at
      Q = 1/2).
    - `segregation`: primordial mass segregation S in [0, 1), energy-ordered as
      in Baumgardt, De Marchi & Kroupa (2008) (`progenax.segregation`); a
      concrete 0 skips it. Partially differentiable (relaxed ranking).
    - `segregation_temperature`: width of the relaxed ranking that gives S its
      gradient, in units of the mean key spacing, in (0, 8].

    **Returns:** `InitialConditions` with `model="plummer"`; differentiable in
    r_h, alpha and Q; partially in `segregation`.

    ```python
    ic = progenax.plummer_builder(jax.random.PRNGKey(0), n=10_000, r_h=1.0)
    ```
    """
    c = check_common_arguments(n, units, imf, r_h, alpha, Q)
    S, T = check_segregation_arguments(c.checks, segregation, segregation_temperature)
    return c.checks.attach(_plummer(_as_key(key), c.n, c.r_h, c.alpha, c.Q, c.imf, c.units, S, T))


# -- EFF -----------------------------------------------------------------------
@eqx.filter_jit
def _eff(key, n, gamma, r_h, r_t, alpha, Q, imf, units, segregation=None, temperature=None):
    k_m, k_r, k_rdir, k_v = jax.random.split(key, 4)
    dtype = r_h.dtype
    masses = materialize(sample_masses(k_m, n, imf, alpha))
    a = eff_scale_radius(r_h, gamma, r_t)
    radii = materialize(eff_sample_radii(uniform_open(k_r, (n,), dtype), gamma, a, r_t))
    positions = radii[:, None] * isotropic_directions(k_rdir, n, dtype)
    sigma = eff_velocity_dispersion(radii, gamma, a, jnp.sum(masses), G_PHYSICAL, r_t)
    velocities = materialize(sigma)[:, None] * jax.random.normal(k_v, (n, 3), dtype)
    params = {"gamma": gamma, "r_h": r_h, **imf_params(imf, alpha)}
    if r_t is not None:
        params["r_t"] = r_t
    if Q is not None:
        params["Q"] = Q
    positions, velocities = segregate(key, positions, velocities, masses, params, segregation, temperature)
    # The centre of mass of an untruncated EFF cluster with gamma <= 5 has no
    # finite variance (a few far-out stars move it by parsecs), so positions stay
    # about the model centre; the velocities still get zero total momentum.
    return finish_cluster("eff", positions, velocities, masses, params, Q, units, centre_positions=False)


def eff_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    gamma: ArrayLike = 3.0,
    r_h: ArrayLike = 1.0,
    r_t: ArrayLike | None = None,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike | None = 0.5,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
) -> InitialConditions:
    r"""An Elson, Fall & Freeman (1987) cluster, optionally truncated at `r_t`.

    $\rho(r) \propto (1 + r^2/a^2)^{-(\gamma+1)/2}$ for $r \le r_t$, whose surface
    density falls as $(1 + R^2/a^2)^{-\gamma/2}$; $a$ is solved so that the 3D
    half-mass radius is `r_h` (`progenax.profiles.eff.eff_scale_radius`). Radii by
    inverse CDF of M(r) (`eff_sample_radii`). **Velocities come from the isotropic
    Jeans equation**: each component is Gaussian with the local dispersion
    $\sigma(r)$ of `eff_velocity_dispersion` (not an Eddington inversion, so the
    speed distribution at each radius is Maxwellian rather than the model's DF,
    and a few stars may exceed the local escape speed). Velocities are moved to
    the centre-of-mass frame and scaled to `Q` (None keeps the Jeans velocities,
    whose expected Q is 1/2 for the untruncated model). **Positions stay about the
    model centre** (the origin), not the centre of mass: for an untruncated
    model with gamma <= 5 the centre of mass has infinite variance, and a few halo
    stars would move the core by parsecs.

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed); `n`: number of stars (static).
    - `gamma`: surface-density slope; > 2 untruncated, > 0 with `r_t`.
    - `r_h`: 3D half-mass radius in pc (> 0; below 2^(-1/3) `r_t` when truncated).
    - `r_t`: truncation radius in pc, or None for the infinite model.
    - `alpha`, `Q`, `imf`, `units`, `segregation`, `segregation_temperature`:
      as for `plummer_builder`.

    **Returns:** `InitialConditions` with `model="eff"`; differentiable in gamma,
    r_h, r_t, alpha and Q; partially in `segregation`.

    ```python
    ic = progenax.eff_builder(jax.random.PRNGKey(0), n=10_000, gamma=3.0, r_h=1.0)
    ```
    """
    c = check_common_arguments(n, units, imf, r_h, alpha, Q)
    checks = c.checks
    if r_t is None:
        gamma = checks.range("gamma", gamma, lower=2.0)
    else:
        gamma = checks.range("gamma", gamma, lower=0.0)
        r_t = checks.range("r_t", r_t, lower=0.0)
        checks.condition(truncated_half_mass_unreachable(c.r_h, r_t, gamma), TRUNCATED_HALF_MASS_MESSAGE)
    S, T = check_segregation_arguments(checks, segregation, segregation_temperature)
    return checks.attach(_eff(_as_key(key), c.n, gamma, c.r_h, r_t, c.alpha, c.Q, c.imf, c.units, S, T))
