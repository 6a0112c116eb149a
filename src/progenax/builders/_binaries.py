r"""The builders' binary step: each drawn system becomes a primary and its companion.

With `binaries=BinaryPopulation(...)` a builder draws its `n` **systems** as it
draws single stars (positions, velocities, a primary mass from the IMF each),
then, in this order (McLuster's convention):

1. `draw_companions`: a companion, an orbit and a companion weight per system
   (`progenax.binaries.sample_binaries`, key `fold_in(key, BINARY_STREAM)`: the
   other streams, and so the systems, are those of the build without binaries);
2. the common finish moves the **systems** to their centre-of-mass frame and
   scales the systems' velocities to Q, with the system masses $m_1 + w m_2$.
   Without Q (a model's own DF, `Q=None`), `velocities_for_systems` first
   rescales the velocities the model drew for its primaries' mass $M_1$ to the
   systems' mass $M_s$ by $\sqrt{M_s/M_1}$: at a fixed shape and $r_h$ every
   speed scales as $\sqrt{GM/r_h}$, so the systems are those of the model of
   their own mass, in virial equilibrium as single stars would be;
3. `with_companions`: the stars are placed about each system's centre of mass
   (`progenax.binaries.place_binaries`), star $2i$ the primary and $2i + 1$ the
   secondary of system $i$, and `ic.pairs` records the (primary, secondary)
   indices. Henon units, when asked for, are those of the systems: the binaries'
   own binding energy does not shrink the length unit.

The companions' membership is a weight: exactly 0 or 1 by default (hard mode),
or a sigmoid in the binary fraction. `drop_absent_companions` removes the
weight-0 companion slots of a hard-mode build once its arrays are concrete (the
builders do it when called eagerly; under `jit` or `grad` the slots stay, weight
0, so shapes are fixed).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, Key
from ..binaries import Binaries, BinaryPopulation, place_binaries, sample_binaries
from ..imf import PowerLawIMF
from ..state import InitialConditions, ParticleState

BINARY_STREAM = 11


def check_binaries(binaries) -> BinaryPopulation | None:
    if binaries is not None and not isinstance(binaries, BinaryPopulation):
        raise ValueError(f"binaries must be None or a progenax.BinaryPopulation, got {binaries!r}")
    if binaries is not None and binaries.hard_soft_cap:
        raise ValueError(
            "the builders do not cut periods at the hard/soft boundary (hard_soft_cap=True): it needs each "
            "system's local velocity dispersion, so call progenax.binaries.sample_binaries(..., sigma=) yourself"
        )
    return binaries


def draw_companions(key: Key, masses: Array, binaries: BinaryPopulation | None, imf: PowerLawIMF) -> Binaries | None:
    """Companions of the systems whose primaries have `masses` (Msun); None without binaries."""
    if binaries is None:
        return None
    imf_for_pairing = imf if binaries.needs_companion_masses else None
    return sample_binaries(jax.random.fold_in(key, BINARY_STREAM), masses, binaries, imf=imf_for_pairing)


def velocities_for_systems(velocities: Array, masses: Array, companions: Binaries | None, Q: Array | None) -> Array:
    r"""Velocities drawn from a self-consistent model of the primaries' total mass
    $M_1$ (`masses`), rescaled to the model of the systems' total mass $M_s$:
    times $\sqrt{M_s / M_1}$ (every speed of a model of fixed shape and $r_h$
    scales as $\sqrt{GM}$). Unchanged without companions, or with `Q`, whose
    scaling the finish then does with the system masses."""
    if companions is None or Q is not None:
        return velocities
    return velocities * jnp.sqrt(jnp.sum(companions.system_masses) / jnp.sum(masses)).astype(velocities.dtype)


def with_companions(systems: InitialConditions, companions: Binaries, binaries: BinaryPopulation) -> InitialConditions:
    """The stars of `systems` (physical units, one row per system) in pairs.

    A companion's mass is its full $m_2$ and its weight $w$ (times its system's
    weight): weighted sums see $w m_2$, as the placement about the centre of
    mass does.
    """
    s = systems.state
    positions, velocities, _, pairs = place_binaries(s.positions, s.velocities, companions)
    masses = jnp.stack([companions.primary_masses, companions.secondary_masses], axis=1).reshape(-1)
    weights = jnp.stack([systems.weights, systems.weights * companions.weights], axis=1).reshape(-1)
    params = {**systems.params, "binary_fraction": binaries.fraction}
    state = ParticleState(positions, velocities, masses)
    return InitialConditions(state, weights, systems.model, params, systems.units, pairs)


def drop_absent_companions(ic: InitialConditions) -> InitialConditions:
    """`ic` without its weight-0 companion slots, when its weights are concrete and hard (0 or 1).

    Soft weights, traced arrays and clusters without pairs come back unchanged.
    The kept stars keep their order; `pairs` is renumbered and lists only the
    binaries.
    """
    if ic.pairs is None or isinstance(ic.weights, jax.core.Tracer):
        return ic
    weights = np.asarray(ic.weights)
    pairs = np.asarray(ic.pairs)
    if ic.state.positions.dtype == jnp.float32:  # float64 resolves au at any cluster's radii: no host copy
        _warn_unresolved_binaries(np.asarray(ic.state.positions), weights, pairs)
    secondary_weight = weights[pairs[:, 1]]
    if not np.all((secondary_weight == 0) | (secondary_weight == 1)):
        return ic
    keep = np.ones(weights.shape[0], bool)
    keep[pairs[secondary_weight == 0, 1]] = False
    new_index = np.cumsum(keep) - 1
    binary_pairs = pairs[secondary_weight == 1]
    s = ic.state
    state = ParticleState(s.positions[keep], s.velocities[keep], s.masses[keep])
    return InitialConditions(
        state, ic.weights[keep], ic.model, ic.params, ic.units, jnp.asarray(new_index[binary_pairs])
    )


def _warn_unresolved_binaries(positions: np.ndarray, weights: np.ndarray, pairs: np.ndarray) -> None:
    """Warn when a binary's two stars lie at one position: float32 resolves
    about 6e-8 of the distance from the origin (12 au at 1 kpc), and such a
    pair has no orbit (its binding energy is infinite)."""
    present = weights[pairs[:, 1]] > 0
    same = present & np.all(positions[pairs[:, 0]] == positions[pairs[:, 1]], axis=1)
    if same.any():
        warnings.warn(
            f"{int(same.sum())} of {int(present.sum())} binaries have both stars at one position: "
            f"{positions.dtype} cannot resolve their separations at their distance from the origin; "
            "build clusters with binaries in float64 (jax.config.update('jax_enable_x64', True))",
            stacklevel=3,
        )
