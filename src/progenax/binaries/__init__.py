"""Primordial binaries: Kepler's equation, orbits, birth distributions, populations, diagnostics."""

from .diagnostics import BoundPairs as BoundPairs
from .diagnostics import binding_energy_distribution as binding_energy_distribution
from .diagnostics import energy_unit as energy_unit
from .diagnostics import find_bound_pairs as find_bound_pairs
from .diagnostics import hard_binary_fraction as hard_binary_fraction
from .diagnostics import pair_binding_energies as pair_binding_energies
from .diagnostics import pair_elements as pair_elements
from .distributions import CircularEccentricity as CircularEccentricity
from .distributions import Kroupa95Period as Kroupa95Period
from .distributions import LogNormalPeriod as LogNormalPeriod
from .distributions import PowerLawEccentricity as PowerLawEccentricity
from .distributions import PowerLawMassRatio as PowerLawMassRatio
from .distributions import PowerLawPeriod as PowerLawPeriod
from .kepler import solve_kepler as solve_kepler
from .kepler import true_anomaly as true_anomaly
from .moe17 import Moe17 as Moe17
from .orbits import DAY_MYR as DAY_MYR
from .orbits import OrbitalElements as OrbitalElements
from .orbits import binding_energy as binding_energy
from .orbits import elements_to_phase_space as elements_to_phase_space
from .orbits import orbital_period as orbital_period
from .orbits import phase_space_to_elements as phase_space_to_elements
from .orbits import sample_orientations as sample_orientations
from .orbits import semi_major_axis as semi_major_axis
from .population import PAIRINGS as PAIRINGS
from .population import Binaries as Binaries
from .population import BinaryPopulation as BinaryPopulation
from .population import place_binaries as place_binaries
from .population import sample_binaries as sample_binaries
from .population import systems_for_stars as systems_for_stars
from .stellar import main_sequence_radius as main_sequence_radius

__all__ = [
    # Kepler's equation
    "solve_kepler",
    "true_anomaly",
    # orbits
    "DAY_MYR",
    "OrbitalElements",
    "binding_energy",
    "elements_to_phase_space",
    "orbital_period",
    "phase_space_to_elements",
    "sample_orientations",
    "semi_major_axis",
    # distributions
    "CircularEccentricity",
    "Kroupa95Period",
    "LogNormalPeriod",
    "PowerLawEccentricity",
    "PowerLawMassRatio",
    "PowerLawPeriod",
    "main_sequence_radius",
    "Moe17",
    # populations
    "PAIRINGS",
    "Binaries",
    "BinaryPopulation",
    "place_binaries",
    "sample_binaries",
    "systems_for_stars",
    # diagnostics
    "BoundPairs",
    "binding_energy_distribution",
    "energy_unit",
    "find_bound_pairs",
    "hard_binary_fraction",
    "pair_binding_energies",
    "pair_elements",
]
