"""SPH density on an exact cell list, differentiable with O(N) gradient memory."""

from .cells import CellList as CellList
from .cells import build_cell_list as build_cell_list
from .density import density as density
from .density import density_loss as density_loss
from .kernels import KERNELS as KERNELS
from .kernels import kernel_gradient as kernel_gradient
from .kernels import kernel_value as kernel_value

__all__ = ["CellList", "KERNELS", "build_cell_list", "density", "density_loss", "kernel_gradient", "kernel_value"]
