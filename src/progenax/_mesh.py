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


def _varying(x) -> frozenset:
    """The manual mesh axes a value varies over (empty outside `shard_map`)."""
    return jax.typeof(x).mat.varying


def vary_like(tree, *refs):
    """`tree` marked as varying over every manual mesh axis that a leaf of
    `refs` varies over: inside `jax.shard_map` with its type check on, a
    loop's carry started from fresh (replicated) zeros must vary as the
    values it will hold do. Unchanged outside `shard_map`."""
    axes = frozenset().union(*(_varying(r) for r in jax.tree_util.tree_leaves(refs)))
    if not axes:
        return tree

    def cast(leaf):
        missing = tuple(sorted(axes - _varying(leaf)))
        return jax.lax.pcast(leaf, missing, to="varying") if missing else leaf

    return jax.tree_util.tree_map(cast, tree)


def ring_permutation(n_devices: int, shift: int) -> list[tuple[int, int]]:
    """`jax.lax.ppermute`'s (source, destination) pairs that pass every
    device's value `shift` places along the ring (-1: each device receives
    its next neighbour's)."""
    return [(d, (d + shift) % n_devices) for d in range(n_devices)]


def check_divides(n: int, n_devices: int) -> None:
    """Refuse an n that the mesh's device count does not divide (equal shares)."""
    if n % n_devices:
        raise ValueError(f"n must be a multiple of the mesh's {n_devices} devices for a sharded build, got n = {n}")
