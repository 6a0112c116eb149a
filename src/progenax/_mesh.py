"""The one-axis device mesh every sharded function runs on (builders, SPH, relaxation)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

AXIS_NAME = "particles"  # the axis of the default mesh


def particle_mesh(devices=None) -> Mesh:
    """A one-axis mesh named "particles" over `devices` (default: all)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (AXIS_NAME,))


def mesh_axis(mesh: Mesh | None) -> tuple[Mesh, str, int]:
    mesh = particle_mesh() if mesh is None else mesh
    if len(mesh.axis_names) != 1:
        raise ValueError(f"mesh must have one axis (the particles'), got axes {mesh.axis_names}")
    return mesh, mesh.axis_names[0], int(mesh.devices.size)
