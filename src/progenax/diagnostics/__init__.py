"""Cluster diagnostics: energies, virial ratio, radii, structure and segregation."""

from .centre import centre_of_mass as centre_of_mass
from .centre import density_centre as density_centre
from .energy import EXACT_MAX_N as EXACT_MAX_N
from .energy import kinetic_energy as kinetic_energy
from .energy import potential_energy as potential_energy
from .energy import scale_to_virial_ratio as scale_to_virial_ratio
from .energy import virial_ratio as virial_ratio
from .radii import half_mass_radius as half_mass_radius
from .radii import lagrangian_radii as lagrangian_radii
from .structure import DensityProfile as DensityProfile
from .structure import SegregationRatio as SegregationRatio
from .structure import density_profile as density_profile
from .structure import mass_segregation_ratio as mass_segregation_ratio
from .structure import mass_segregation_ratio_jax as mass_segregation_ratio_jax
from .structure import mst_edge_lengths as mst_edge_lengths
from .structure import q_parameter as q_parameter
from .structure import q_parameter_knn as q_parameter_knn

__all__ = [
    "DensityProfile",
    "EXACT_MAX_N",
    "SegregationRatio",
    "centre_of_mass",
    "density_centre",
    "density_profile",
    "half_mass_radius",
    "kinetic_energy",
    "lagrangian_radii",
    "mass_segregation_ratio",
    "mass_segregation_ratio_jax",
    "mst_edge_lengths",
    "potential_energy",
    "q_parameter",
    "q_parameter_knn",
    "scale_to_virial_ratio",
    "virial_ratio",
]
