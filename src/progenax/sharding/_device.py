"""One device's part of a sharded pair sum, shared by `density` and `relax`.

The mesh and the static configuration, the halo plan of one device, its
own + halo features with the padding parked (`sharding.density` module
notes), the `shard_map` every sharded function runs through, and the
raising of the flags it returns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .._mesh import AXIS_NAME as AXIS_NAME
from .._mesh import mesh_axis as mesh_axis
from .._mesh import particle_mesh as particle_mesh
from .._types import Array
from ..neighbours import build_cell_list, layout_for
from ..sph.kernels import SUPPORT
from ..validation import error_if
from .halo import Halo, plan_halo
from .slabs import slab_coordinate


class Config:
    """The static choices of one sharded density (hashable, for the caches)."""

    def __init__(self, mesh, kernel, dim, axis, hops, halo, periodic):
        self.mesh, self.kernel, self.dim, self.axis = mesh, kernel, dim, axis
        self.hops, self.halo, self.periodic = hops, halo, periodic
        self.axis_name = mesh.axis_names[0]
        self.n_devices = int(mesh.devices.size)
        self.layout = layout_for(dim)

    def key(self):
        return (self.mesh, self.kernel, self.dim, self.axis, self.hops, self.halo, self.periodic)

    def __hash__(self):
        return hash(self.key())

    def __eq__(self, other):
        return isinstance(other, Config) and self.key() == other.key()


def halo_plan(cfg: Config, x, h, valid, box):
    """The halo plan, the reach, the largest h and the failure flag of one device."""
    h_max = jax.lax.pmax(jnp.max(jnp.where(valid, jax.lax.stop_gradient(h), 0.0)), cfg.axis_name)
    reach = SUPPORT * h_max
    coord = slab_coordinate(jax.lax.stop_gradient(x), cfg.axis, box)
    plan, bad = plan_exchange(cfg, coord, valid, reach, box)
    return plan, reach, h_max, bad


def plan_exchange(cfg: Config, coord, valid, reach, box) -> tuple[Halo, Array]:
    """`halo.plan_halo` of one device in the configuration's mesh, hops and halo
    slots, from its particles' coordinate along the slab axis."""
    return plan_halo(
        coord,
        valid,
        reach,
        axis_name=cfg.axis_name,
        n_devices=cfg.n_devices,
        hops=cfg.hops,
        halo=cfg.halo,
        length=None if box is None else box[cfg.axis],
    )


def parking(cfg: Config, x, valid, reach, box):
    """Where padding slots sit: 2R below every particle (open boundaries), or
    half a box from the slab along its axis (periodic)."""
    x = jax.lax.stop_gradient(x)
    if box is None:
        lowest = jax.lax.pmin(jnp.min(jnp.where(valid[:, None], x, jnp.inf), axis=0), cfg.axis_name)
        return lowest - 2.0 * reach
    coord = slab_coordinate(x, cfg.axis, box)
    middle = 0.5 * (jnp.min(jnp.where(valid, coord, jnp.inf)) + jnp.max(jnp.where(valid, coord, -jnp.inf)))
    middle = jnp.where(jnp.any(valid), middle, 0.0)
    return jnp.zeros_like(box).at[cfg.axis].set(jnp.mod(middle + 0.5 * box[cfg.axis], box[cfg.axis]))


def with_halo(cfg: Config, plan: Halo, x, m, h, valid, reach, h_max, box):
    """Own + halo features (padding parked, zero mass, the largest h) and
    which slots hold real particles."""
    real = jnp.concatenate([valid, plan.received])
    xs = jnp.concatenate([x, plan.exchange(x)])
    ms = jnp.where(real, jnp.concatenate([m, plan.exchange(m)]), 0.0)
    hs = jnp.where(real, jnp.concatenate([h, plan.exchange(h)]), h_max)
    xs = jnp.where(real[:, None], xs, parking(cfg, x, valid, reach, box))
    return xs, ms, hs, real


def query_cells(cfg: Config, xs, reach, box, query):
    """The cell list of own + halo particles with `query` (own ones) as the
    only queries, in the configuration's layout (`neighbours.build_cell_list`)."""
    layout = cfg.layout
    return build_cell_list(
        jax.lax.stop_gradient(xs),
        reach,
        box=box,
        cells_per_reach=layout.cells_per_reach,
        x_cells_per_reach=layout.x_cells_per_reach,
        chunk=layout.chunk,
        query=query,
    )


def shard_map_particles(cfg: Config, body, n_in: int, periodic_box: bool, out_specs):
    """`jax.shard_map` of `body(*per_particle, box)` with the box replicated.

    `check_vma=False`: the engine's loops start their carries from unsharded
    zeros, which the varying-axis check refuses. Without the check a psum's
    transpose is a psum, so no loss is summed inside the map (`sharding.density` notes).
    """
    spec = P(cfg.axis_name)
    if not periodic_box:
        mapped = jax.shard_map(
            lambda *a: body(*a, None), mesh=cfg.mesh, in_specs=(spec,) * n_in, out_specs=out_specs, check_vma=False
        )
        return lambda *a: mapped(*a[:-1])
    return jax.shard_map(body, mesh=cfg.mesh, in_specs=(spec,) * n_in + (P(),), out_specs=out_specs, check_vma=False)


def raise_if(value, bad, message):
    """`ValueError` now for a concrete flag, else `error_if` at run time."""
    if not isinstance(bad, jax.core.Tracer):
        if bool(jnp.any(bad)):
            raise ValueError(message)
        return value
    return error_if(value, jnp.any(bad), message)
