"""Cluster diagnostics: energies, virial ratio, characteristic radii."""

from .energy import EXACT_MAX_N as EXACT_MAX_N
from .energy import kinetic_energy as kinetic_energy
from .energy import potential_energy as potential_energy
from .energy import scale_to_virial_ratio as scale_to_virial_ratio
from .energy import virial_ratio as virial_ratio
from .centre import centre_of_mass as centre_of_mass
from .centre import density_centre as density_centre
from .radii import half_mass_radius as half_mass_radius
from .radii import lagrangian_radii as lagrangian_radii

__all__ = [
    "EXACT_MAX_N",
    "centre_of_mass",
    "density_centre",
    "half_mass_radius",
    "kinetic_energy",
    "lagrangian_radii",
    "potential_energy",
    "scale_to_virial_ratio",
    "virial_ratio",
]
