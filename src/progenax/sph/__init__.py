"""SPH density on an exact cell list, differentiable with O(N) gradient memory."""

from ..neighbours.cells import CellList as CellList
from ..neighbours.cells import build_cell_list as build_cell_list
from .density import density as density
from .density import density_loss as density_loss
from .kernels import KERNELS as KERNELS
from .kernels import kernel_gradient as kernel_gradient
from .kernels import kernel_value as kernel_value
from .relax import adaptive_density as adaptive_density
from .relax import model_density as model_density
from .relax import relax as relax

__all__ = [
    "CellList",
    "KERNELS",
    "adaptive_density",
    "build_cell_list",
    "density",
    "density_loss",
    "kernel_gradient",
    "kernel_value",
    "model_density",
    "relax",
]
