r"""The shell-theorem potential energy of a particle set sharded over a mesh.

`progenax.diagnostics.potential_energy(method="spherical")` sorts every star
by radius about a centre and sums

$$W = -G \sum_i \frac{m_i\, M(<r_i)}{r_i},$$

$M(<r_i)$ being the mass of the stars before $i$ in that order. Over a mesh no
device holds every star, so each computes $M(<r_i)$ of its own stars as a
sum over the devices' shares: its own share sorted once (the stars before
$i$ in it, as on one device), then the D - 1 other shares, each sorted by
its owner and passed once around the ring by `ppermute` (radii and the
running sum of their masses), counted by a binary search (the stars of that
share strictly inside $r_i$). Per device: O((N/D) log(N/D)) for the sort,
O(N log(N/D)) for the searches, O(N/D) memory (two shares at a time), and
every star sees every other, so $W$ equals the one-device sum but for the
order of the additions (and stars at exactly the same radius on different
devices, which count each other as outside: a set of measure zero).

The gradient is the one-device estimate's: through the masses gathered into
the running sums (the ring's transpose sends them back) and through
$1/r_i$; which stars count as inside is piecewise constant in the positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._sort import radial_order
from .._types import Array, Scalar
from ..diagnostics.energy import shell_sum


def _mass_inside(share_r2: Array, share_cumulative: Array, r2: Array) -> Array:
    """The mass of one sorted share strictly inside each radius² of `r2`."""
    k = jnp.searchsorted(share_r2, r2, side="left")
    return jnp.where(k > 0, share_cumulative[jnp.maximum(k - 1, 0)], 0.0)


def ring_spherical_potential(r2: Array, masses: Array, axis_name: str, n_devices: int) -> Scalar:
    """W / G (negative) of the whole set from one device's share (inside
    `shard_map`): `r2` (n,) squared radii about the centre, `masses` (n,);
    the result is the same on every device (module docstring)."""
    order = radial_order(r2)
    r2_sorted, m_sorted = r2[order], masses[order]
    cumulative = jnp.cumsum(m_sorted)
    receive_from_next = [(d, (d - 1) % n_devices) for d in range(n_devices)]

    def visit(carry, _):
        share_r2, share_cumulative, inside = carry
        share_r2 = jax.lax.ppermute(share_r2, axis_name, receive_from_next)
        share_cumulative = jax.lax.ppermute(share_cumulative, axis_name, receive_from_next)
        inside = inside + _mass_inside(share_r2, share_cumulative, r2_sorted)
        return (share_r2, share_cumulative, inside), None

    start = (r2_sorted, cumulative, cumulative - m_sorted)
    (_, _, inside), _ = jax.lax.scan(visit, start, None, length=n_devices - 1)
    return jax.lax.psum(shell_sum(r2_sorted, m_sorted, inside), axis_name)
