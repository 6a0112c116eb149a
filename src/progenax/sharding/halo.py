r"""Halo exchange between slabs, inside `jax.shard_map` (one mesh axis).

Device $d$ holds the particles of slab $d$ (`slabs.decompose`); its pair sums
also need every particle of the other slabs closer than the reach $R$ (the
largest kernel support) to one of its own. Along the slab axis that is a
particle whose distance to device $d$'s *extent* $[\min_d, \max_d]$ (its own
particles' smallest and largest coordinate, minimum image in a periodic box)
is at most $R$: a superset of the particles within $R$ in full d-dimensional
distance, and exact whatever the cut (ties on an edge, empty slabs).

Each device sends to the devices `offsets` away along the mesh (the ring in a
periodic box, the line with open boundaries; `hops` on each side, each
destination once) the particles within $R$ of their extents, up to `halo`
slots per destination, by `jax.lax.ppermute`. Two conditions would lose a
neighbour, and both are checked in-graph and returned as flags for the caller
to raise (`equinox.error_if` outside the `shard_map`): more than `halo`
particles to send to one device (overflow), and two devices with particles
within $R$ of each other farther apart on the mesh than `hops` (a slab
thinner than the reach).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..neighbours import minimum_image


def mesh_offsets(n_devices: int, hops: int, periodic: bool) -> tuple[int, ...]:
    """The distinct mesh offsets a device sends to: ±1..±hops, modulo D on the
    ring (each destination once, never the device itself)."""
    if periodic:
        return tuple(sorted({k % n_devices for k in range(-hops, hops + 1)} - {0}))
    return tuple(k for k in range(-hops, hops + 1) if k != 0 and abs(k) < n_devices)


def _permutation(offset: int, n_devices: int, periodic: bool) -> list[tuple[int, int]]:
    if periodic:
        return [(s, (s + offset) % n_devices) for s in range(n_devices)]
    return [(s, s + offset) for s in range(n_devices) if 0 <= s + offset < n_devices]


def _gap(coord: Array, lo: Array, hi: Array, length: Array | None) -> Array:
    """Distance along the slab axis from `coord` to the interval [lo, hi]
    (minimum image on a ring of `length`); inf to an empty interval (lo > hi)."""
    centre, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    offset = coord - centre if length is None else minimum_image(coord - centre, length)
    empty = ~(lo <= hi)
    return jnp.where(empty, jnp.inf, jnp.maximum(jnp.abs(jnp.where(empty, 0.0, offset)) - half, 0.0))


class Halo(eqx.Module):
    """One device's side of an exchange: for each offset the own slots it sends
    (`index` (K, H)) and which of them are real (`sent` (K, H)); which
    received slots are real (`received` (K H,)). `counts` (K,) are the
    particles each destination asked for (above H: overflow)."""

    index: Array
    sent: Array
    received: Array
    counts: Array
    offsets: tuple[int, ...] = eqx.field(static=True)
    n_devices: int = eqx.field(static=True)
    periodic: bool = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)

    def exchange(self, values: Array) -> Array:
        """Own (C, ...) values -> the halo's (K H, ...), zero in empty slots."""
        if not self.offsets:  # one device: no halo
            return values[:0]
        out = []
        capacity = values.shape[0]
        for k, offset in enumerate(self.offsets):
            picked = values[jnp.minimum(self.index[k], capacity - 1)]
            mask = self.sent[k].reshape((-1,) + (1,) * (values.ndim - 1))
            picked = jnp.where(mask, picked, jnp.zeros_like(picked))
            perm = _permutation(offset, self.n_devices, self.periodic)
            out.append(jax.lax.ppermute(picked, self.axis_name, perm))
        return jnp.concatenate(out, axis=0)


def plan_halo(
    coord: Array,
    valid: Array,
    reach: Array,
    *,
    axis_name: str,
    n_devices: int,
    hops: int,
    halo: int,
    length: Array | None,
) -> tuple[Halo, Array]:
    """The exchange of one device (inside `shard_map`) and its failure flag.

    `coord` (C,): own particles' coordinate along the slab axis (wrapped into
    [0, L) in a periodic box); `valid` (C,); `reach`: the same on every
    device; `length`: the box along the slab axis, None for open boundaries.
    The flag is True where a neighbour would be lost (module notes).
    """
    periodic = length is not None
    offsets = mesh_offsets(n_devices, hops, periodic)
    me = jax.lax.axis_index(axis_name)
    inf = jnp.asarray(jnp.inf, coord.dtype)
    lo_all = jax.lax.all_gather(jnp.min(jnp.where(valid, coord, inf)), axis_name)
    hi_all = jax.lax.all_gather(jnp.max(jnp.where(valid, coord, -inf)), axis_name)
    capacity = coord.shape[0]
    slots = jnp.arange(capacity, dtype=jnp.int32)
    index, sent, counts = [], [], []
    for offset in offsets:
        dest = (me + offset) % n_devices
        wanted = valid & (_gap(coord, lo_all[dest], hi_all[dest], length) <= reach)
        if not periodic:
            wanted &= (me + offset >= 0) & (me + offset < n_devices)
        place = jnp.where(wanted, jnp.cumsum(wanted, dtype=jnp.int32) - 1, halo)
        index.append(jnp.full(halo, capacity, jnp.int32).at[place].set(slots, mode="drop"))
        count = jnp.sum(wanted, dtype=jnp.int32)
        sent.append(jnp.arange(halo) < count)
        counts.append(count)
    if offsets:
        index, sent, counts = jnp.stack(index), jnp.stack(sent), jnp.stack(counts)
    else:  # one device
        index, sent, counts = jnp.zeros((0, halo), jnp.int32), jnp.zeros((0, halo), bool), jnp.zeros(0, jnp.int32)
    plan = Halo(index, sent, jnp.zeros(0, bool), counts, offsets, n_devices, periodic, axis_name)
    received = plan.exchange(jnp.ones(capacity, bool))
    plan = eqx.tree_at(lambda p: p.received, plan, received)
    overflow = jnp.any(counts > halo)
    return plan, overflow | _too_thin(lo_all, hi_all, reach, offsets, n_devices, length)


def _too_thin(lo: Array, hi: Array, reach: Array, offsets, n_devices: int, length: Array | None) -> Array:
    """Whether two devices whose particles come within `reach` of each other
    are not linked by an offset (slabs thinner than the reach: raise `hops`)."""
    centre, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    gap = _gap(centre[:, None], lo[None, :], hi[None, :], length) - half[:, None]
    near = (lo <= hi)[:, None] & (lo <= hi)[None, :] & (gap <= reach)
    source, dest = np.meshgrid(np.arange(n_devices), np.arange(n_devices), indexing="ij")
    step = dest - source
    linked = np.isin(step % n_devices if length is not None else step, offsets) | (step == 0)
    return jnp.any(near & ~jnp.asarray(linked))
