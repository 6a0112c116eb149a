"""What every builder shares: the key, n, the IMF, segregation and the finish.

Every builder takes the PRNG key first (positionally or as `key=`), the particle
count `n` as a static keyword, and differentiable physical parameters as plain
floats or arrays. Static choices are validated eagerly with `ValueError`; traced
parameters out of range raise through `equinox.error_if` under `jit`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, Key
from ..binaries import Binaries, BinaryPopulation
from ..diagnostics.energy import EXACT_MAX_N, kinetic_energy, potential_energy, virial_velocity_factor
from ..diagnostics.known_energy import record_potential_energy
from ..imf import IMF, ChabrierIMF, PowerLawIMF, kroupa, salpeter
from ..models import AbstractClusterModel
from ..state import InitialConditions, ParticleState
from ..structure.segregation import apply_segregation
from ..units import G_PHYSICAL, check_units_name, physical_units
from ..validation import ParameterChecks, check_count, check_scalar
from ._binaries import with_companions

IMF_CHOICES = ("kroupa", "salpeter", "equal", "chabrier")


def as_key(key: Key | int, name: str = "key") -> Key:
    """A `jax.random` key from a key or an int seed: a Python or NumPy
    integer, or a 0-d integer array (concrete or traced, so a builder can be
    `vmap`ped over seeds).

    A Python seed in [0, 2^31) under JAX's default threefry generator gives
    the raw key `jax.random.PRNGKey(seed)` gives, `[0, seed]` as uint32, made
    on the host and copied to the device: `PRNGKey` compiles two one-op
    programs on its first call in a process (about 50 ms of a cold build on
    the project's machine). Other seeds and generators go through `PRNGKey`.
    """
    if isinstance(key, (bool, np.bool_)) or key is None:
        raise ValueError(f"{name} must be a jax.random key or an int seed, got {key!r}")
    if isinstance(key, (int, np.integer)):
        seed = int(key)
        if 0 <= seed < 2**31 and jax.config.jax_default_prng_impl == "threefry2x32":
            return jax.device_put(np.array([0, seed], dtype=np.uint32))
        return jax.random.PRNGKey(seed)
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return key
    if dtype is None or getattr(key, "ndim", None) is None:
        raise ValueError(f"{name} must be a jax.random key or an int seed, got {type(key).__name__}")
    if key.ndim == 0 and jnp.issubdtype(dtype, jnp.integer):
        return jax.random.PRNGKey(key)  # a seed
    if key.ndim == 0 or not jnp.issubdtype(dtype, jnp.unsignedinteger):
        raise ValueError(
            f"{name} must be a jax.random key or an int seed, got an array of shape {key.shape} and dtype {dtype}"
        )
    return key


def check_imf(imf: str | PowerLawIMF | None) -> str | PowerLawIMF:
    if imf is None:
        return "kroupa"
    if isinstance(imf, IMF) or imf in IMF_CHOICES:
        return imf
    raise ValueError(f"imf must be None, one of {IMF_CHOICES}, a PowerLawIMF or a ChabrierIMF, got {imf!r}")


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
    """Validate n, units, imf (static) and r_h, alpha, Q (possibly traced scalars;
    Q = 0, a cold start, is allowed)."""
    for name, value in (("r_h", r_h), ("alpha", alpha), ("Q", Q)):
        if value is not None:
            check_scalar(name, value)
    checks = ParameterChecks()
    n = check_count("n", n)
    units = check_units_name(units, n)
    if Q is not None:  # one star has no potential energy: Q was ignored, the velocities 0
        check_count("n", n, 2, "for a virial ratio Q (one star has no potential energy; Q=None gives the model's own)")
    return CommonArguments(
        checks=checks,
        n=n,
        units=units,
        imf=check_imf(imf),
        r_h=checks.range("r_h", r_h, lower=0.0),
        alpha=checks.range("alpha", alpha, lower=0.0, upper=10.0),
        Q=None if Q is None else checks.range("Q", Q, lower=0.0, lower_inclusive=True),
    )


def resolve_imf(imf: str | PowerLawIMF, alpha: Array) -> PowerLawIMF:
    """The IMF behind a choice ("equal" uses Kroupa(alpha)'s mean mass;
    "chabrier" is Chabrier (2003) with high-mass slope `alpha`)."""
    if isinstance(imf, IMF):
        return imf
    if imf == "chabrier":
        return ChabrierIMF(alpha=alpha)
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
    params = {} if isinstance(imf, IMF) or imf == "salpeter" else {"alpha": alpha}
    if imf != "equal":
        params.update(resolve_imf(imf, alpha).record())
    return params


def segregate(key, positions, velocities, masses, params, segregation, temperature, keep_virial_ratio=False, edge=None):
    """Apply mass segregation S (skipped when None) and record it in `params`.

    The key is `fold_in(key, 7)` of the builder's key, so the other random
    streams (and the unsegregated output) are unchanged by the option.

    Moving the heavy stars onto the bound orbits deepens the potential more
    than it adds kinetic energy: a King W0 = 6 cluster of 10,000 Kroupa stars
    drawn in equilibrium (T/|W| = 0.507) had 0.357 at S = 0.3 and 0.228 at
    S = 0.6. With `keep_virial_ratio` (a builder without Q, whose velocities
    are the model's equilibrium) the velocities are scaled back to the drawn
    orbits' T/|W| (W exact up to `EXACT_MAX_N` stars, else the spherical
    estimate about the origin). The positions grow by the factor that keeps
    the half-mass radius (`apply_segregation`), so the recorded edge named
    `edge` (King's and LIMEPY's derived "r_t", not a model parameter such as
    a truncated EFF's) grows with them: no star passes it.
    """
    if segregation is None:
        return positions, velocities
    params["segregation"] = segregation
    k_seg = jax.random.fold_in(key, 7)
    origin = jnp.zeros(3, positions.dtype)
    method = "exact" if masses.shape[0] <= EXACT_MAX_N else "spherical"

    def virial_ratio(x, v):
        return kinetic_energy(v, masses) / -potential_energy(x, masses, G=G_PHYSICAL, method=method, centre=origin)

    def segregated(orbits):
        x, v = orbits
        x_new, v_new = apply_segregation(k_seg, x, v, masses, segregation, temperature=temperature, G=G_PHYSICAL)
        if keep_virial_ratio:
            v_new = v_new * jnp.sqrt(virial_ratio(x, v) / virial_ratio(x_new, v_new))
        return x_new, v_new

    # A traced S of exactly 0 (an outer jit's argument) leaves the orbits as drawn,
    # as a concrete 0 does: at S = 0 the relaxed ranking still re-pairs masses with
    # orbits in energy order, which moves with the model's parameters (issue 22).
    x, v = jax.lax.cond(segregation > 0, segregated, lambda orbits: orbits, (positions, velocities))
    if edge is not None:  # every radius scaled by the same factor (`apply_segregation`'s f)
        radius = lambda p: jnp.max(jnp.sum(p * p, axis=1))  # noqa: E731
        params[edge] = params[edge] * jnp.sqrt(radius(x) / radius(positions))
    return x, v


def _no_reduction(value: Array) -> Array:
    return value


def centre_of_mass_frame(x: Array, masses: Array, reduce=_no_reduction) -> Array:
    """x (n, 3) minus its mass-weighted mean; `reduce` completes the two sums
    (a `psum` over a device mesh when the rows are one device's share)."""
    return x - reduce(jnp.sum(masses[:, None] * x, axis=0)) / reduce(jnp.sum(masses))


def finish_cluster(
    model: AbstractClusterModel,
    positions: Array,
    velocities: Array,
    masses: Array,
    params: dict[str, Array],
    Q: Array | None,
    units: str,
    *,
    centre_positions: bool = True,
    large_n_energy: str = "spherical",
    companions: Binaries | None = None,
    binaries: BinaryPopulation | None = None,
) -> tuple[InitialConditions, Array | None]:
    """Move to the centre-of-mass frame, scale to Q (unless None), set units.

    Returns `(ic, w)`: the cluster, and the nested mesh's W it was scaled with
    in `ic`'s units, or None (no mesh W, or binaries: then W was the systems',
    not the stars'). A builder passes both to `recorded` once its checks are
    attached.

    `model` is what the cluster was drawn from (`InitialConditions.model`).
    With `companions` (`progenax.builders._binaries.draw_companions` of the
    population `binaries`) the rows are systems: the frame and Q are the
    systems', then each system becomes its two stars (`with_companions`).

        Velocities always get zero total momentum; positions are moved to the centre
        of mass unless `centre_positions=False` (heavy-tailed models keep their model
        centre at the origin). W for the scaling is the exact pair sum up to
        `EXACT_MAX_N` stars and `large_n_energy` above: "spherical" (shell theorem
        about the model centre, 0.1% for spherical models, fast) or "mesh"
        (nested-mesh P3M, for substructured clusters). In Henon units the
        mesh's W also sets the length unit (`InitialConditions.to_henon(w=)`):
        it does not depend on where the cluster sits, so measuring it again
        about the centre of mass would give it to round-off, at the cost of a
        second W (the spherical estimate depends on its centre, and the exact
        sum is cheap: those are measured again).
    """
    if large_n_energy not in ("spherical", "mesh"):
        raise ValueError(f"large_n_energy must be 'spherical' or 'mesh', got {large_n_energy!r}")
    if companions is not None:
        masses = companions.system_masses
        model = model.with_mass(jnp.sum(masses))
    velocities = centre_of_mass_frame(velocities, masses)
    method = "exact" if masses.shape[0] <= EXACT_MAX_N else large_n_energy
    w = None
    if Q is not None:
        # Positions are still about the model centre: the spherical estimate of
        # W (n > 20,000) uses it as the centre of its shells.
        origin = jnp.zeros(3, positions.dtype)
        w = potential_energy(positions, masses, G=G_PHYSICAL, method=method, centre=origin)
        velocities = velocities * virial_velocity_factor(kinetic_energy(velocities, masses), w, Q)
    if centre_positions:
        positions = centre_of_mass_frame(positions, masses)
    state = ParticleState(positions, velocities, masses)
    ic = InitialConditions(state, jnp.ones_like(masses), model, params, physical_units())
    if companions is not None:
        ic = with_companions(ic, companions, binaries)
    mesh_w = w if method == "mesh" else None
    ic = finish_units(ic, units, mesh_w)
    if mesh_w is None or companions is not None:
        return ic, None
    return ic, mesh_w / (ic.units.mass_msun * ic.units.velocity_kms**2)


def recorded(ic: InitialConditions, w: Array | None) -> InitialConditions:
    """`ic`, with `w` (the mesh W of `finish_cluster`, None for none) recorded
    against its arrays (`progenax.diagnostics.known_energy`): the command
    line's summary then recalls it instead of summing that W again."""
    if w is not None:
        record_potential_energy(ic.state.positions, ic.state.masses, ic.weights, "mesh", w)
    return ic


def finish_units(ic: InitialConditions, units: str, w: Array | None = None) -> InitialConditions:
    """`ic` (physical units) in the builder's `units`; `w`, if given, is the
    potential energy that sets the Henon length unit (`InitialConditions.to_henon`)."""
    return ic.to_henon(w=w) if units == "henon" else ic
