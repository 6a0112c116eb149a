r"""Kinetic and potential energy, the virial ratio, and scaling to a requested Q.

The potential energy of n point masses is

$$W = -G \sum_{i<j} \frac{m_i m_j}{|x_i - x_j|}.$$

`potential_energy(..., method="exact")` sums every pair in row blocks of
`block_size` particles, so memory is O(block_size * n) and, with the block
checkpointed, so is the memory of its gradient. It costs O(n^2): about 1e8 pairs
a second in float64 on 2 CPU cores (0.47 s at n = 10,000, `benchmarks/builders.py`),
so `method="auto"` uses it up to `EXACT_MAX_N` stars.

`method="spherical"` is the shell-theorem estimate after sorting by radius about a
centre (the coordinate-wise median of the positions unless one is given, which
unlike the centre of mass stays in the core of heavy-tailed clusters; builders
pass their model centre),

$$W \approx -G \sum_i \frac{m_i\, M(<r_i)}{r_i},$$

which is the expectation of the exact sum for a spherical cluster with
independent isotropic angles. Measured against the exact sum at n = 20,000 for a
Plummer sphere with a Kroupa IMF: 0.12% apart (key 0; the scatter of the angular
positions shrinks as 1/sqrt(n)); `tests/diagnostics/test_energy.py` holds it within
2%, and `tests/test_eff_builder.py` does the same for the heavy-tailed EFF
gamma = 3 about its model centre. It is O(n log n). Substructured (fractal)
clusters are not spherical: it puts |W| of a D = 1.6 fractal 35% low.

`method="mesh"` is the substructure-aware estimate for large n: nested-mesh
P3M (`progenax.diagnostics.mesh`), a long-range part on FFT meshes and a
short-range pair sum through the cell list, differentiable in positions and
masses, with fixed shapes. Measured against the exact sum, see
`progenax.diagnostics.mesh`. It costs seconds (12 s CPU for a D = 1.6
fractal of 100,000 stars, 42 s for a Plummer sphere of 1e6, shared 2-core
machine). `method="auto"` is "exact" up to `EXACT_MAX_N` stars and "mesh"
above: the spherical estimate is fast but wrong for any cluster with
substructure (`virial_ratio` of `fractal_builder(0, n=30_000)`: 0.67 with it,
0.4999 exact), and "auto" cannot know which cluster it is given. Ask for
"spherical" explicitly where the cluster is known to be spherical (the
spherical builders do, about their model centre).

`ring_spherical_potential` is the same estimate for a set sharded over a
device mesh (called inside `shard_map`): each device sorts its own share, and
the D - 1 other shares, each sorted by its owner, pass once around the ring
by `ppermute` (radii and the running sums of their masses), counted by a
binary search. Per device O((N/D) log(N/D)) for the sort, O(N log(N/D)) for
the searches and O(N/D) memory; every star is counted against every other,
so it equals the one-device estimate but for the order of the additions
(stars at exactly the same radius on different devices count each other as
outside: a set of measure zero). Its gradient is the one-device estimate's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._sort import radial_order
from .._types import Array, Masses, Positions, Scalar, Velocities
from ..sampling import safe_divide, safe_sqrt
from ..units import G_PHYSICAL
from .mesh import mesh_pair_energy

EXACT_MAX_N = 20_000
"""Largest n for which `method="auto"` uses the exact pairwise sum."""

METHODS = ("auto", "exact", "spherical", "mesh")


def kinetic_energy(velocities: Velocities, masses: Masses) -> Scalar:
    """T = sum_i m_i |v_i|^2 / 2 (in the frame given)."""
    return 0.5 * jnp.sum(masses * jnp.sum(velocities**2, axis=-1))


def _exact_potential(positions: Positions, masses: Masses, block_size: int) -> Scalar:
    n = masses.shape[0]
    n_blocks = -(-n // block_size)
    pad = n_blocks * block_size - n
    index = jnp.arange(n_blocks * block_size)
    x_rows = jnp.pad(positions, ((0, pad), (0, 0))).reshape(n_blocks, block_size, -1)
    m_rows = jnp.pad(masses, (0, pad)).reshape(n_blocks, block_size)
    i_rows = index.reshape(n_blocks, block_size)
    j_all = jnp.arange(n)

    @jax.checkpoint
    def block(x_i, m_i, i_idx):
        d2 = jnp.sum((x_i[:, None, :] - positions[None, :, :]) ** 2, axis=-1)
        pair = i_idx[:, None] < j_all[None, :]  # each pair once, never i == j
        d2_safe = jnp.where(pair, d2, 1.0)
        inv = jnp.where(pair, jax.lax.rsqrt(d2_safe), 0.0)
        return jnp.sum(m_i[:, None] * masses[None, :] * inv)

    def body(total, rows):
        return total + block(*rows), None

    total, _ = jax.lax.scan(body, jnp.zeros((), positions.dtype), (x_rows, m_rows, i_rows))
    return -total


def _spherical_potential(positions: Positions, masses: Masses, centre: Array | None) -> Scalar:
    if centre is None:
        # The coordinate-wise median, not the centre of mass: a few far-out
        # stars of a heavy-tailed profile move the latter far from the core.
        centre = jnp.median(positions, axis=0)
    r2 = jnp.sum((positions - centre) ** 2, axis=-1)
    # Sorting by radius: the permutation only decides which mass counts as
    # inside; the gradient flows through the sorted radii and gathered masses.
    order = radial_order(r2)
    r2_sorted = r2[order]
    m_sorted = masses[order]
    return shell_sum(r2_sorted, m_sorted, jnp.cumsum(m_sorted) - m_sorted)


def shell_sum(r2: Array, masses: Array, inside: Array) -> Scalar:
    r"""$-\sum_i m_i M(<r_i) / r_i$ from squared radii, masses and the mass
    inside each (a star at the centre adds nothing; no NaN gradient there)."""
    positive = r2 > 0
    r_safe = jnp.sqrt(jnp.where(positive, r2, 1.0))
    return -jnp.sum(jnp.where(positive, masses * inside / r_safe, 0.0))


def potential_energy(
    positions: Positions,
    masses: Masses,
    *,
    G: float | Array = G_PHYSICAL,
    method: str = "auto",
    block_size: int = 512,
    centre: Array | None = None,
) -> Scalar:
    """Gravitational potential energy W (negative) of point masses.

    **Arguments:**

    - `positions` (n, 3), `masses` (n,): in the units that match `G`.
    - `G`: gravitational constant (physical units by default; 1 in Henon units).
    - `method`: "exact" (pairwise, O(n^2) time, O(block_size n) memory),
      "spherical" (shell-theorem estimate for spherical clusters, see the
      module docstring), "mesh" (nested-mesh P3M for any, clumpy included,
      distribution; `progenax.diagnostics.mesh`) or "auto" (exact up to
      `EXACT_MAX_N` stars, mesh above: right for clumpy clusters too).
    - `block_size`: rows per block of the exact sum (static).
    - `centre`: (3,) centre of the shells for "spherical" (default: the
      coordinate-wise median of the positions; a builder passes its model
      centre). Not the centre of mass: for an untruncated EFF gamma = 3 cluster
      of 20,000 stars that made W 4x too small.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    n = masses.shape[0]
    if method == "auto":
        method = "exact" if n <= EXACT_MAX_N else "mesh"
    if method == "exact":
        w = _exact_potential(positions, masses, min(block_size, n))
    elif method == "mesh":
        w = -mesh_pair_energy(positions, masses)
    else:
        w = _spherical_potential(positions, masses, centre)
    return G * w


def virial_ratio(
    positions: Positions,
    velocities: Velocities,
    masses: Masses,
    *,
    G: float | Array = G_PHYSICAL,
    method: str = "auto",
    centre: Array | None = None,
) -> Scalar:
    """Q = T / |W|, with T measured in the centre-of-mass frame.

    `method` and `centre` are passed to `potential_energy`.
    """
    v_com = jnp.sum(masses[:, None] * velocities, axis=0) / jnp.sum(masses)
    t = kinetic_energy(velocities - v_com, masses)
    w = potential_energy(positions, masses, G=G, method=method, centre=centre)
    return t / jnp.abs(w)


def scale_to_virial_ratio(
    positions: Positions,
    velocities: Velocities,
    masses: Masses,
    Q: Scalar,
    *,
    G: float | Array = G_PHYSICAL,
    method: str = "auto",
    centre: Array | None = None,
) -> Velocities:
    r"""Velocities multiplied by $\sqrt{Q / Q_\text{now}}$ so that T / |W| = Q.

    Differentiable in Q, positions, velocities and masses. The velocities are
    assumed to be in the centre-of-mass frame already; `centre` is passed to
    `potential_energy` (used by the spherical estimate only). Q = 0 (a cold
    start) gives zero velocities; there the speeds grow as $\sqrt{Q}$, whose
    one-sided derivative is infinite, and the gradient returned is 0 (never
    inf or NaN: double-where on the square root).
    """
    t = kinetic_energy(velocities, masses)
    w = potential_energy(positions, masses, G=G, method=method, centre=centre)
    return velocities * virial_velocity_factor(t, w, Q)


def virial_velocity_factor(t: Scalar, w: Scalar, Q: Scalar) -> Scalar:
    r"""$\sqrt{Q |W| / T}$, the factor on velocities that turns T / |W| into Q
    (0 for T = 0 or Q = 0, with a zero, never NaN, gradient there)."""
    return safe_sqrt(safe_divide(Q * jnp.abs(w), t))


def _mass_inside(share_r2: Array, share_cumulative: Array, r2: Array) -> Array:
    """The mass of one sorted share strictly inside each radius² of `r2`."""
    k = jnp.searchsorted(share_r2, r2, side="left")
    return jnp.where(k > 0, share_cumulative[jnp.maximum(k - 1, 0)], 0.0)


def ring_spherical_potential(r2: Array, masses: Array, axis_name: str, n_devices: int) -> Scalar:
    """W / G (negative) of the whole set from one device's share (inside
    `shard_map` over the mesh axis `axis_name` of `n_devices`): `r2` (n,)
    squared radii about the centre, `masses` (n,); the result is the same on
    every device (module docstring)."""
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
