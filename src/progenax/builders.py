"""Cluster builders: thin compositions of a profile, a velocity sampler and an IMF.

Every builder takes the PRNG key first (positionally or as `key=`), the particle
count `n` as a static keyword, and differentiable physical parameters as plain
floats or arrays. Static choices are validated eagerly with `ValueError`; traced
parameters out of range raise through `equinox.error_if` under `jit`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._fusion import materialize
from ._types import Array, ArrayLike, Key
from .diagnostics.energy import scale_to_virial_ratio
from .imf import PowerLawIMF, kroupa, salpeter
from .kinematics.plummer_df import sample_speed_fraction
from .profiles.plummer import plummer_sample_radii, plummer_scale_radius
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


def _check_alpha(checks: ParameterChecks, alpha: ArrayLike) -> Array:
    return checks.range("alpha", alpha, lower=0.0, upper=10.0)


def _check_Q(checks: ParameterChecks, Q: ArrayLike | None) -> Array | None:
    return None if Q is None else checks.range("Q", Q, lower=0.0)


def sample_masses(key: Key, n: int, imf: str | PowerLawIMF, alpha: Array) -> Array:
    """n stellar masses (Msun) from the IMF choice.

    "kroupa": Kroupa (2001) with high-mass slope `alpha`; "salpeter": Salpeter
    (1955); "equal": every star has the mean mass of Kroupa(alpha), so the
    expected total mass matches the Kroupa cluster of the same n.
    """
    if imf == "equal":
        return jnp.full((n,), kroupa(alpha).mean_mass())
    dist = kroupa(alpha) if imf == "kroupa" else salpeter() if imf == "salpeter" else imf
    return dist.sample(key, (n,))


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
) -> InitialConditions:
    """Move to the centre-of-mass frame, scale to Q (unless None), set units."""
    positions = _centre(positions, masses)
    velocities = _centre(velocities, masses)
    if Q is not None:
        velocities = scale_to_virial_ratio(positions, velocities, masses, Q, G=G_PHYSICAL)
    state = ParticleState(positions, velocities, masses)
    ic = InitialConditions(state, jnp.ones_like(masses), model, params, physical_units())
    return ic.to_henon() if units == "henon" else ic


# -- Plummer -------------------------------------------------------------------
@eqx.filter_jit
def _plummer(key, n, r_h, alpha, Q, imf, units):
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
    params = {"r_h": r_h, "alpha": alpha}
    if Q is not None:
        params["Q"] = Q
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

    **Returns:** `InitialConditions` with `model="plummer"`; differentiable in
    r_h, alpha and Q.

    ```python
    ic = progenax.plummer_builder(jax.random.PRNGKey(0), n=10_000, r_h=1.0)
    ```
    """
    n = check_count("n", n)
    units = check_units_name(units)
    imf = _check_imf(imf)
    checks = ParameterChecks()
    r_h = checks.range("r_h", r_h, lower=0.0)
    alpha = _check_alpha(checks, alpha)
    Q = _check_Q(checks, Q)
    return checks.attach(_plummer(_as_key(key), n, r_h, alpha, Q, imf, units))
