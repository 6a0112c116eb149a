"""Cluster diagnostics: energies, virial ratio, radii, structure, segregation and kinematics."""

from .centre import centre_of_mass as centre_of_mass
from .centre import density_centre as density_centre
from .energy import EXACT_MAX_N as EXACT_MAX_N
from .energy import kinetic_energy as kinetic_energy
from .energy import potential_energy as potential_energy
from .energy import scale_to_virial_ratio as scale_to_virial_ratio
from .energy import virial_ratio as virial_ratio
from .kinematics import AnisotropyProfile as AnisotropyProfile
from .kinematics import RotationCurve as RotationCurve
from .kinematics import anisotropy_profile as anisotropy_profile
from .kinematics import osipkov_merritt_jeans as osipkov_merritt_jeans
from .kinematics import osipkov_merritt_jeans_binned as osipkov_merritt_jeans_binned
from .kinematics import rotation_curve as rotation_curve
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
    "AnisotropyProfile",
    "DensityProfile",
    "EXACT_MAX_N",
    "RotationCurve",
    "SegregationRatio",
    "anisotropy_profile",
    "centre_of_mass",
    "density_centre",
    "density_profile",
    "half_mass_radius",
    "kinetic_energy",
    "lagrangian_radii",
    "mass_segregation_ratio",
    "mass_segregation_ratio_jax",
    "mst_edge_lengths",
    "osipkov_merritt_jeans",
    "osipkov_merritt_jeans_binned",
    "potential_energy",
    "q_parameter",
    "q_parameter_knn",
    "rotation_curve",
    "scale_to_virial_ratio",
    "virial_ratio",
]
