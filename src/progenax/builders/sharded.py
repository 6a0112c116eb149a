r"""The builders over a device mesh: each device draws its share of the stars.

`progenax.plummer_builder(..., mesh=mesh)` (and `eff_builder`, `king_builder`,
`limepy_builder`, `model_builder`, `gravoturb.star_builder` and
`gravoturb.cloud_builder`) builds n stars (or gas particles) as D shares of
n / D on the D devices of a one-axis mesh; no device ever holds the whole set.

- **Sampling.** Every star is drawn independently of the others (given the
  model, or the turbulent field, which every device computes alike from the
  builder's key), so device d draws its share with the builder's own streams
  from a key of its own (`Share.key`): the builder's key on device 0 (a
  one-device mesh gives the one-device cluster where both scale with the
  same W: above `EXACT_MAX_N` stars, physical units), `fold_in(fold_in(key,
  SHARD_STREAM), d)` on the others. A gravoturbulent device takes its rows'
  part of the stratified x-uniforms (rows d n/D to (d + 1) n/D of n). The
  statistics are the one-device build's; the stars themselves differ.
- **Global quantities** by collectives (`finish_share`): the total mass
  (which sets a model's velocity scale), the centre of mass and the kinetic
  energy by `psum`; the potential energy $W$ by the shell theorem about the
  origin (the model centre) with the shares passed around the ring
  (`progenax.diagnostics.energy.ring_spherical_potential`), or for clumpy
  gravoturbulent stars by the nested mesh over the devices
  (`progenax.diagnostics.mesh.ring_mesh_pair_energy`, the one-device
  estimate to round-off). The velocities are then scaled to $T/|W| = Q$
  exactly, as on one device.
- **Outputs** stay sharded: the per-particle arrays are `jax.Array`s laid out
  over the mesh's axis (device d holds rows d n/D to (d + 1) n/D); the model,
  params (and a cloud's field) are replicated. `map_shares` runs a builder's
  per-device draw and ties its traced checks to these outputs.

Differences from one device: $W$ is the shell-theorem (or nested-mesh)
estimate at every n (one device sums every pair exactly up to
`EXACT_MAX_N` = 20,000 stars; for the spherical models the estimate is 0.1%
from that sum at 20,000 and closer above), and Henon units take their
virial radius from the same $W$ (one device recomputes it about the median
after centring). Not sharded: `segregation` (it ranks every star by
energy), `binaries` and King's `mass_bins` (`ValueError` with a mesh).
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .._mesh import check_divides, mesh_axis
from .._types import Array
from ..diagnostics.energy import kinetic_energy, ring_spherical_potential, virial_velocity_factor
from ..diagnostics.mesh import ring_mesh_pair_energy
from ..state import InitialConditions, ParticleState
from ..units import G_PHYSICAL, physical_units
from ..validation import collecting_checks, error_if
from ._common import centre_of_mass_frame, finish_units

SHARD_STREAM = 17
"""`fold_in` of the builder's key that the devices' keys (but device 0's) derive from."""

NOT_SHARDED = {
    "segregation": "segregation ranks every star by energy, which a sharded build does not do",
    "binaries": "binaries are not drawn by a sharded build",
}


class Share(NamedTuple):
    """One device's part of a sharded build (inside `shard_map`): rows
    `first` to `first + rows - 1` of the n, on a mesh axis of `n_devices`."""

    axis_name: str
    n_devices: int
    rows: int
    first: Array

    def total(self, value):
        """`value` summed over the mesh."""
        return jax.lax.psum(value, self.axis_name)

    def key(self, key):
        """This device's key: the builder's own on device 0, one of its own elsewhere."""
        d = jax.lax.axis_index(self.axis_name)
        own = jax.lax.pcast(key, self.axis_name, to="varying")  # a per-device value, like the others'
        other = jax.random.fold_in(jax.random.fold_in(key, SHARD_STREAM), d)
        return jax.lax.cond(d == 0, lambda: own, lambda: other)


def refuse_unsharded(**options) -> None:
    """Refuse, naming it, an option (name -> value, None when unset) a sharded build does not do."""
    for name, value in options.items():
        if value is not None:
            raise ValueError(f"{NOT_SHARDED[name]}: leave {name} unset, or build without mesh")


def map_shares(draw, inputs: tuple, n: int, mesh):
    """`draw(share, *inputs)` on every device of `mesh`, each for n / D rows.

    `draw` returns `(rows, replicated)`: a tuple of per-row arrays (device d's
    rows of the n) and a pytree the same on every device. Returns them as
    global arrays laid out over the mesh and replicated values. Inputs are
    replicated (Python scalars and ints stay static); the traced checks that
    `draw`'s functions record are tied to the outputs for the caller
    (`deferred_checks`), never raised inside the map."""
    mesh, axis_name, n_devices = mesh_axis(mesh)
    check_divides(n, n_devices)
    dynamic, static = eqx.partition(inputs, eqx.is_array)  # static ints (King's grid sizes) stay Python
    messages: list[tuple[str, ...]] = []

    def on_device(dynamic):
        share = Share(axis_name, n_devices, n // n_devices, jax.lax.axis_index(axis_name) * (n // n_devices))
        out, preds, found = collecting_checks(draw)(share, *eqx.combine(dynamic, static))
        messages.append(found)
        return out, preds[None]

    rows = P(axis_name)
    (per_row, replicated), preds = jax.shard_map(on_device, mesh=mesh, in_specs=P(), out_specs=((rows, P()), rows))(
        dynamic
    )
    for i, message in enumerate(messages[0]):
        per_row = error_if(per_row, jnp.any(preds[:, i]), message)
    return per_row, replicated


def finish_share(share: Share, x, v, masses, Q, centre_positions: bool, energy: str = "spherical"):
    """`builders._common.finish_cluster`'s frame and virial scaling for one
    device's rows: velocities to the centre-of-mass frame, scaled to
    T/|W| = Q (unless None) with W of the whole set, `energy` "spherical"
    (the shell theorem about the origin, by the ring) or "mesh" (the
    nested-mesh P3M of clumpy clusters, `diagnostics.mesh.ring_mesh_pair_energy`);
    positions to the centre of mass if `centre_positions`. Returns `(x, v, W)`."""
    if energy not in ("spherical", "mesh"):
        raise ValueError(f"energy must be 'spherical' or 'mesh', got {energy!r}")
    v = centre_of_mass_frame(v, masses, share.total)
    if energy == "mesh":
        w = -G_PHYSICAL * ring_mesh_pair_energy(x, masses, share.axis_name, share.n_devices)
    else:
        w = G_PHYSICAL * ring_spherical_potential(jnp.sum(x**2, axis=-1), masses, share.axis_name, share.n_devices)
    if Q is not None:
        v = v * virial_velocity_factor(share.total(kinetic_energy(v, masses)), w, Q)
    if centre_positions:
        x = centre_of_mass_frame(x, masses, share.total)
    return x, v, w


def sharded_cluster(x, v, masses, model, params, units: str, w) -> InitialConditions:
    """The `InitialConditions` of `map_shares`' outputs (physical units from the
    draw), in `units`: Henon units from the ring's W."""
    ic = InitialConditions(ParticleState(x, v, masses), jnp.ones_like(masses), model, params, physical_units())
    return finish_units(ic, units, w=w)
