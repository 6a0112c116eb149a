"""SPH density, its loss, gradient and relaxation over a JAX device mesh.

- `decompose`, `Slabs` (slabs.py): particles cut into slabs along one axis,
  by count (quantiles) or by edges, in a padded device-major layout.
- `plan_halo`, `Halo` (halo.py): the particles within the kernel reach of
  another slab, exchanged by `jax.lax.ppermute` inside `jax.shard_map`.
- `density`, `density_loss` (density.py): `progenax.sph.density` and
  `density_loss` over a mesh, in particle order; `slab_density`,
  `slab_density_loss` on layout arrays; `measure_halo`; `particle_mesh`.
- `relax` (relax.py): `progenax.sph.relax`'s step over a mesh, re-cut
  between blocks of steps.
- `simulate_cpu_devices` (cpu.py): split one CPU into XLA devices, to try a
  mesh without accelerators.
- The builders' own `mesh=` (`progenax.builders.sharded`) draws a cluster
  over the same kind of mesh (`particle_mesh`), each device its share.

docs/scaling.md shows how to run it on several devices and hosts.
"""

from .cpu import simulate_cpu_devices as simulate_cpu_devices
from .density import density as density
from .density import density_loss as density_loss
from .density import measure_halo as measure_halo
from .density import particle_mesh as particle_mesh
from .density import slab_density as slab_density
from .density import slab_density_loss as slab_density_loss
from .halo import Halo as Halo
from .halo import mesh_offsets as mesh_offsets
from .halo import plan_halo as plan_halo
from .relax import relax as relax
from .slabs import Slabs as Slabs
from .slabs import decompose as decompose

__all__ = [
    # the cut
    "Slabs",
    "decompose",
    # the halo
    "Halo",
    "mesh_offsets",
    "plan_halo",
    # density
    "density",
    "density_loss",
    "measure_halo",
    "particle_mesh",
    "slab_density",
    "slab_density_loss",
    # relaxation
    "relax",
    # one CPU as several devices
    "simulate_cpu_devices",
]
