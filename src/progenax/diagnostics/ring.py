"""The shares of a set sharded over a device mesh, passed once around the ring.

Called inside `jax.shard_map`: each device sorts its own share by radius,
then the D - 1 other shares, each sorted by its owner, pass once around the
ring by `jax.lax.ppermute` (their radii and the running sums of their
masses), counted by a binary search: O((N/D) log(N/D)) per device for the
sort, O(N log(N/D)) for the searches, O(N/D) memory.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._mesh import ring_permutation
from .._sort import float_order
from .._types import Array


def _mass_inside(share_r2: Array, share_cumulative: Array, r2: Array) -> Array:
    """The mass of one sorted share strictly inside each radius² of `r2`."""
    k = jnp.searchsorted(share_r2, r2, side="left")
    return jnp.where(k > 0, share_cumulative[jnp.maximum(k - 1, 0)], 0.0)


def ring_mass_inside(r2: Array, masses: Array, axis_name: str, n_devices: int) -> tuple[Array, Array, Array]:
    """The mass of the whole set strictly inside each of one device's stars
    (inside `shard_map` over the mesh axis `axis_name` of `n_devices`): `r2`
    (n,) squared radii about the centre, `masses` (n,). Returns
    `(order, r2[order], inside)`, `inside` in that sorted order (own stars at
    exactly the same radius: the earlier in the order counts as inside;
    other devices' stars there count as outside, a set of measure zero)."""
    order = float_order(r2)
    r2_sorted, m_sorted = r2[order], masses[order]
    cumulative = jnp.cumsum(m_sorted)
    receive_from_next = ring_permutation(n_devices, -1)

    def visit(carry, _):
        share_r2, share_cumulative, inside = carry
        share_r2 = jax.lax.ppermute(share_r2, axis_name, receive_from_next)
        share_cumulative = jax.lax.ppermute(share_cumulative, axis_name, receive_from_next)
        inside = inside + _mass_inside(share_r2, share_cumulative, r2_sorted)
        return (share_r2, share_cumulative, inside), None

    start = (r2_sorted, cumulative, cumulative - m_sorted)
    (_, _, inside), _ = jax.lax.scan(visit, start, None, length=n_devices - 1)
    return order, r2_sorted, inside


def held_value(keys: Array, at: Array, values: Array, total) -> Array:
    """The value of `values` (n, C) at the stars whose `keys` (n, C) equal
    each of `at` (R, C) (size-1 columns broadcast), over the whole set (`total`: the sum over the
    devices; the mean over ties): (R, C). The gradient goes to those stars,
    as an index into a sorted array would send it."""
    holds = keys[:, None, :] == at[None]
    found = total(jnp.sum(jnp.where(holds, values[:, None, :], 0.0), axis=0))
    count = total(jnp.sum(holds, axis=0, dtype=values.dtype))
    return found / jnp.where(count > 0, count, 1.0)


def ring_weighted_quantiles(values: Array, weights: Array, fractions: Array, axis_name: str, n_devices: int) -> Array:
    r"""`diagnostics.radii`'s weighted quantiles of the whole set from one
    device's share (inside `shard_map`; the same on every device): each
    star's mid-point cumulative fraction $c_i = (M(<v_i) + w_i/2) / M$ from
    the ring (`ring_mass_inside`), then, for each fraction $f$, `jnp.interp`'s
    linear interpolation between the star with the largest $c \le f$ and the
    one with the smallest $c > f$ over every device (`pmax`, `pmin`), the
    ends held flat. `values` (n,) non-negative (radii), `weights` (n,), of
    which the zero ones (a layout's padding) are no interpolation points;
    `fractions` (F,). Differentiable in the values and the weights, as the
    one-device quantile is, in a `shard_map` with its type check on (the
    default; with `check_vma=False` a `psum` transposes to another `psum`
    and every gradient comes out D times too large)."""
    order, v_sorted, inside = ring_mass_inside(values, weights, axis_name, n_devices)
    w_sorted = weights[order]
    cum = (inside + 0.5 * w_sorted) / jax.lax.psum(jnp.sum(w_sorted), axis_name)
    key = jnp.where(w_sorted > 0, jax.lax.stop_gradient(cum), jnp.nan)  # NaN: neither below nor above
    f = fractions[:, None]
    inf = jnp.asarray(jnp.inf, key.dtype)
    c_lo = jax.lax.pmax(jnp.max(jnp.where(key <= f, key, -inf), axis=1), axis_name)
    c_hi = jax.lax.pmin(jnp.min(jnp.where(key > f, key, inf), axis=1), axis_name)
    total = functools.partial(jax.lax.psum, axis_name=axis_name)
    at = jnp.stack([c_lo, c_hi], axis=1)  # (F, 2): both ends of each fraction's interval
    lo_c, hi_c = held_value(key[:, None], at, cum[:, None], total).T
    lo_v, hi_v = held_value(key[:, None], at, v_sorted[:, None], total).T
    dx = hi_c - lo_c
    flat = jnp.abs(dx) <= jnp.spacing(jnp.finfo(dx.dtype).eps)  # as jnp.interp: no NaN gradient
    inner = jnp.where(flat, lo_v, lo_v + ((fractions - lo_c) / jnp.where(flat, 1.0, dx)) * (hi_v - lo_v))
    return jnp.where(c_lo == -inf, hi_v, jnp.where(c_hi == inf, lo_v, inner))
