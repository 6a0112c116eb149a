"""Core containers: a particle set and the initial conditions built from it."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array, Masses, Positions, Scalar, Velocities, Weights
from .diagnostics.energy import EXACT_MAX_N, potential_energy
from .models import AbstractClusterModel, is_spherical, model_from_record
from .units import Units, check_henon_count, henon_units, physical_units
from .validation import array_module


class ParticleState(eqx.Module):
    """Positions (n, 3), velocities (n, 3) and masses (n,) of n particles."""

    positions: Positions
    velocities: Velocities
    masses: Masses

    @property
    def n(self) -> int:
        """Number of particles (static)."""
        return self.masses.shape[0]

    @property
    def total_mass(self) -> Scalar:
        return jnp.sum(self.masses)


class InitialConditions(eqx.Module):
    """A built cluster: its particles, soft membership weights, and provenance.

    **Fields:**

    - `state`: the `ParticleState`.
    - `weights`: (n,) soft membership in [0, 1]; all 1 unless a modifier (tidal
      truncation, say) lowers them. Consumers weight each star by it.
    - `model`: the model it was drawn from (`progenax.models`), a pytree whose
      `name` is e.g. "plummer"; ask it for the density, potential or velocities.
      It describes the cluster in physical units (pc, Msun, km/s) whatever `units`;
      a name given to the constructor is rebuilt with the `params`
      (`progenax.models.model_from_record`: a `RecordedModel` where it cannot be).
    - `params`: the parameters used, name -> value (differentiable leaves):
      the model's, the IMF's, Q and the modifiers'.
    - `units`: the `Units` the state is expressed in.
    - `pairs`: (n_pairs, 2) integer indices (primary, secondary) of the
      primordial binaries into the state, or None (no binaries; see
      `progenax.BinaryPopulation`).
    """

    state: ParticleState
    weights: Weights
    model: AbstractClusterModel
    params: dict[str, Scalar]
    units: Units
    pairs: Array | None = None

    @property
    def n(self) -> int:
        return self.state.n

    def __post_init__(self):
        if isinstance(self.model, str):  # a name: the model rebuilt from it and the params
            masses, unit = self.state.masses, self.units.mass_msun
            xp = array_module(masses, unit)
            total_mass = xp.sum(xp.asarray(masses)) * xp.asarray(unit)
            if xp is np:  # a device array, as the model's fields are (`jnp.asarray` of it would compile)
                total_mass = jax.device_put(total_mass)
            self.model = model_from_record(self.model, self.params, total_mass)

    @classmethod
    def from_record(
        cls, state: ParticleState, weights, name: str, params: dict, units: Units, pairs=None
    ) -> InitialConditions:
        """A cluster read from a file: the model rebuilt from its recorded name and
        parameters (`progenax.models.model_from_record`), in physical units."""
        return cls(state, weights, name, params, units, None if pairs is None else jnp.asarray(pairs))

    @property
    def energy_method(self) -> str:
        """The `potential_energy` method for this cluster: "auto" (exact up to
        `EXACT_MAX_N` stars, the mesh above) unless its model is spherical
        (`models.is_spherical`), where the spherical estimate (0.1%) replaces
        the mesh above `EXACT_MAX_N` at a fraction of its cost."""
        if is_spherical(self.model) and self.state.masses.shape[0] > EXACT_MAX_N:
            return "spherical"
        return "auto"

    def to_henon(self, *, w: Scalar | None = None) -> InitialConditions:
        """Convert to Henon units: G = M = 1, length unit the virial radius.

        The virial radius r_v = G M^2 / (2|W|) uses the weighted masses and the
        potential energy `w` (physical units: Msun (km/s)^2) when given (a sharded
        build passes the W it scaled the velocities with), else W from
        `progenax.diagnostics.potential_energy`; a single
        star has none, so one star is refused (`ValueError` naming `n`). With
        `pairs`, W is that of the systems (each binary at its centre of mass), as
        in McLuster and NBODY6: the binaries' own binding energy, which can
        exceed the cluster's, does not set the length unit.
        """

        if self.units.name == "henon":
            return self
        check_henon_count(self.state.masses.shape[0])
        phys = self.to_physical()
        s = phys.state
        m = s.masses * phys.weights
        mtot = jnp.sum(m)
        if w is None:
            systems = phys.systems()
            w = potential_energy(systems.positions, systems.masses, G=phys.units.G, method=phys.energy_method)
        r_v = phys.units.G * mtot**2 / (2.0 * jnp.abs(w))
        return _rescale(phys, henon_units(mtot, r_v))

    def systems(self) -> ParticleState:
        """The systems: each binary of `pairs` merged into its primary's row (the
        pair's centre of mass and velocity, its total mass), its secondary's row
        kept with mass 0; masses weighted by `weights`. Without pairs, the
        weighted stars. Rows stay where they are, so shapes are fixed."""
        s = self.state
        m = s.masses * self.weights
        if self.pairs is None:
            return ParticleState(s.positions, s.velocities, m)
        m, x, v = _merge_pairs(m, self.pairs, s.positions, s.velocities)
        return ParticleState(x, v, m)

    def to_physical(self) -> InitialConditions:
        """Convert to physical units (pc, Msun, km/s)."""
        if self.units.name == "physical":
            return self
        return _rescale(self, physical_units())


def _merge_pairs(masses: Array, pairs: Array, *arrays: Array) -> tuple[Array, ...]:
    """`masses` with each pair's total on its primary's row (0 on the secondary's),
    and each of `arrays` (n, d) with the pair's mass-weighted mean on the primary's row."""
    primary, secondary = pairs[:, 0], pairs[:, 1]
    m1, m2 = masses[primary], masses[secondary]
    total = m1 + m2
    merged = [
        a.at[primary].set((m1[:, None] * a[primary] + m2[:, None] * a[secondary]) / total[:, None]) for a in arrays
    ]
    return (masses.at[primary].set(total).at[secondary].set(0.0), *merged)


def _rescale(ic: InitialConditions, new: Units) -> InitialConditions:
    """Express `ic` in the unit system `new` (same physical cluster)."""
    old = ic.units
    s = ic.state
    state = ParticleState(
        positions=s.positions * (old.length_pc / new.length_pc),
        velocities=s.velocities * (old.velocity_kms / new.velocity_kms),
        masses=s.masses * (old.mass_msun / new.mass_msun),
    )
    return InitialConditions(state, ic.weights, ic.model, ic.params, new, ic.pairs)
