r"""Slab decomposition: which device holds which particle, in a padded layout.

Particles are cut into D slabs along one axis (`axis`, default x) and slab
$d$ goes to device $d$ of a one-axis mesh. Each device holds a fixed number of
slots, the `capacity` C, so the layout is D C slots, device-major: slot
$d C + s$ is slot $s$ of device $d$. Slots no particle fills are padding,
marked by `valid` (their features are zero in the layout; the sharded pair
sums give them zero mass and keep them out of every sum).

Two ways to cut:

- **by count** (`bounds=None`, the default): the particle of rank $r$ along
  the axis (ties broken by index) goes to device $\lfloor rD/N \rfloor$, so
  each device holds $\lfloor N/D \rfloor$ or $\lceil N/D \rceil$ particles
  whatever the clustering (the quantiles of the particles' coordinate are the
  slab edges), and $C = \lceil N/D \rceil$. Particles with the same
  coordinate may then sit on two devices: the halo exchange measures each
  device's extent from its particles, not from nominal edges, so that is
  exact.
- **by edges** (`bounds`, D + 1 increasing values): slab $d$ is
  $[b_d, b_{d+1})$ (the first and last open-ended), a particle exactly on an
  edge goes to the slab above it, and a slab may be empty. The capacity is
  the fullest slab's count (concrete positions) or given.

In a periodic box the coordinate is wrapped into $[0, L)$ first.

The permutation is a layout choice: every sharded quantity is the same
function of the particles whatever device holds them, so gradients flow
through the values moved (`to_slabs` is a scatter, `from_slabs` a gather)
and never through the ranks.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._sort import float_order, inverse_permutation
from .._types import Array
from ..validation import check_static_int, error_if


class Slabs(eqx.Module):
    """Where each particle sits in the padded, device-major layout.

    - `slot`: (N,) slot of each particle in the layout, in [0, D C).
    - `valid`: (D C,) whether a slot holds a particle.
    - `counts`: (D,) particles per device.
    - `n_devices`, `capacity`, `axis`: static.
    """

    slot: Array
    valid: Array
    counts: Array
    n_devices: int = eqx.field(static=True)
    capacity: int = eqx.field(static=True)
    axis: int = eqx.field(static=True)

    @property
    def size(self) -> int:
        """Number of particles N."""
        return self.slot.shape[0]

    def to_slabs(self, values: Array) -> Array:
        """(N, ...) per-particle values in the layout (D C, ...), zero in padding."""
        out = jnp.zeros((self.n_devices * self.capacity,) + values.shape[1:], values.dtype)
        return out.at[self.slot].set(values, unique_indices=True)

    def from_slabs(self, values: Array) -> Array:
        """(D C, ...) layout values back to the particles' order, (N, ...)."""
        return values[self.slot]

    def share(self) -> Array:
        """Largest device share of the particles over the mean share (1 = even)."""
        return jnp.max(self.counts) * self.n_devices / self.size


def slab_coordinate(positions: Array, axis: int, box: Array | None) -> Array:
    """The coordinate the slabs cut, wrapped into [0, L) in a periodic box."""
    x = positions[:, axis]
    return x if box is None else jnp.mod(x, box[axis])


def decompose(
    positions: Array,
    n_devices: int,
    *,
    axis: int = 0,
    box: Array | None = None,
    bounds: Array | None = None,
    capacity: int | None = None,
) -> Slabs:
    """Cut `positions` (N, d) into `n_devices` slabs along `axis` (module notes).

    `bounds`: None (equal counts by rank) or D + 1 slab edges; `capacity`:
    slots per device (static; default ceil(N/D) by count, the fullest slab
    by edges, which needs concrete positions). A slab fuller than `capacity`
    raises `ValueError` eagerly and through `error_if` under jit.
    """
    n, dim = positions.shape
    n_devices = check_static_int("n_devices", n_devices, 1)
    if not 0 <= axis < dim:
        raise ValueError(f"axis must be in [0, {dim}), got {axis}")
    coord = jax.lax.stop_gradient(slab_coordinate(positions, axis, box))
    index = jnp.arange(n, dtype=jnp.int32)
    if bounds is None:
        rank = inverse_permutation(float_order(coord))
        # Device d starts at rank ceil(d N / D) (Python ints: no overflow at any N).
        firsts = np.array([-(-d * n // n_devices) for d in range(1, n_devices)], np.int32)
        device = jnp.searchsorted(jnp.asarray(firsts), rank, side="right").astype(jnp.int32)
        capacity = -(-n // n_devices) if capacity is None else check_static_int("capacity", capacity, 1)
    else:
        bounds = jnp.asarray(bounds, positions.dtype)
        if bounds.shape != (n_devices + 1,):
            raise ValueError(f"bounds must hold n_devices + 1 = {n_devices + 1} edges, got shape {bounds.shape}")
        device = jnp.searchsorted(bounds[1:-1], coord, side="right").astype(jnp.int32)
        if capacity is None:
            if isinstance(device, jax.core.Tracer):
                raise ValueError("capacity must be given (static) for bounds= under jit")
            capacity = max(int(np.bincount(np.asarray(device), minlength=n_devices).max()), 1)
        capacity = check_static_int("capacity", capacity, 1)
    counts = jnp.zeros(n_devices, jnp.int32).at[device].add(1)
    # Slot within its device: rank among the device's particles, by index.
    _, by_device = jax.lax.sort((device, index), num_keys=2)
    first = jnp.cumsum(counts) - counts
    within = jnp.zeros(n, jnp.int32).at[by_device].set(index - first[device[by_device]], unique_indices=True)
    full = jnp.max(counts) > capacity
    if not isinstance(full, jax.core.Tracer) and bool(full):
        raise ValueError(f"capacity {capacity} is below the fullest slab's {int(jnp.max(counts))} particles")
    slot = error_if(device * capacity + within, full, "capacity is below the fullest slab's particle count")
    valid = jnp.zeros(n_devices * capacity, bool).at[slot].set(True, mode="drop")
    return Slabs(slot, valid, counts, n_devices, capacity, axis)
