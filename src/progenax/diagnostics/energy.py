r"""Kinetic and potential energy, the virial ratio, and scaling to a requested Q.

The potential energy of n point masses is

$$W = -G \sum_{i<j} \frac{m_i m_j}{|x_i - x_j|}.$$

A pair at zero separation adds nothing to any method's sum (the exact one
skips it; the others soften): in practice a weight-0 companion slot on its
primary, or a binary closer than the dtype resolves at its distance from the
origin (float32: $6\times10^{-8}\,|x|$, 12 au at 1 kpc), whose $0 \cdot \infty$
made W NaN (or $-\infty$) and every Henon-scaled position NaN.

`potential_energy(..., method="exact")` sums every pair in row blocks of
`block_size` particles, so memory is O(block_size * n). Its derivative is the
closed form (a custom JVP, one more pass over the blocks):

$$\frac{\partial W}{\partial x_i} = G\,m_i \sum_{j \ne i} \frac{m_j (x_i - x_j)}{r_{ij}^3},
\qquad \frac{\partial W}{\partial m_i} = -G \sum_{j \ne i} \frac{m_j}{r_{ij}}.$$

It costs O(n^2): 0.09 s at n = 10,000 and 0.37 s at 20,000 in float64 on one
CPU core (0.46 s and 1.9 s with the (b, n, 3) differences of earlier versions;
the sum itself is added in the same order, so W is bit-identical), the gradient
0.39 s and 1.65 s (autodiff through the blocks took 4.2 s and 16 s), so
`method="auto"` uses it up to `EXACT_MAX_N` stars. The gradient's pass reads
rows in blocks of at most `GRADIENT_BLOCK_SIZE` (each row is one whole dot
product, so its bits do not depend on the block): it keeps four (b, n)
arrays per block, which at b = 512 spill out of the cache; with 128 rows it
ran 1.35x faster at n = 10,000 and 1.6x at 20,000 (0.265 -> 0.198 s,
1.19 -> 0.75 s, 2 cores).

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

import functools

import jax
import jax.numpy as jnp

from .._sort import sort_by_radius
from .._types import Array, Masses, Positions, Scalar, Velocities
from ..sampling import safe_divide, safe_sqrt
from ..units import G_PHYSICAL
from ..validation import check_argument
from .mesh import column_median, mesh_pair_energy
from .radii import squared_radii
from .ring import ring_mass_inside

EXACT_MAX_N = 20_000
"""Largest n for which `method="auto"` uses the exact pairwise sum."""

GRADIENT_BLOCK_SIZE = 128
"""Most rows per block of the exact sum's gradient pass (module notes)."""

METHODS = ("auto", "exact", "spherical", "mesh")


def kinetic_energy(velocities: Velocities, masses: Masses) -> Scalar:
    """T = sum_i m_i |v_i|^2 / 2 (in the frame given)."""
    return 0.5 * jnp.sum(masses * jnp.sum(velocities**2, axis=-1))


def _exact_potential(positions: Positions, masses: Masses, block_size: int) -> Scalar:
    return -_pair_energy(positions, masses, block_size)


def _row_blocks(positions: Array, masses: Array, block_size: int):
    """Rows padded to whole blocks: (x (B, b, d), m (B, b), row index (B, b))."""
    n = masses.shape[0]
    n_blocks = -(-n // block_size)
    pad = n_blocks * block_size - n
    x_rows = jnp.pad(positions, ((0, pad), (0, 0))).reshape(n_blocks, block_size, -1)
    m_rows = jnp.pad(masses, (0, pad)).reshape(n_blocks, block_size)
    return x_rows, m_rows, jnp.arange(n_blocks * block_size).reshape(n_blocks, block_size)


def _differences(x_i: Array, positions_t: Array) -> list[Array]:
    """x_i - x_j per axis, each (b, n): taken from the transposed positions (d, n),
    so each is contiguous in j (the (b, n, d) difference reduced over its short
    last axis was 6x slower on CPU)."""
    return [x_i[:, k, None] - positions_t[k][None, :] for k in range(positions_t.shape[0])]


def _inverse_distances(differences: list[Array], i_idx: Array, keep) -> Array:
    """1/r from the per-axis differences, 0 where `keep(i, j)` is False or
    the pair coincides (module notes)."""
    d2 = sum(d * d for d in differences)
    pair = keep(i_idx[:, None], jnp.arange(d2.shape[1])[None, :]) & (d2 > 0)
    return jnp.where(pair, jax.lax.rsqrt(jnp.where(pair, d2, 1.0)), 0.0)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _pair_energy(positions: Array, masses: Array, block_size: int) -> Array:
    """U = sum_{i<j} m_i m_j / r_ij, a scan over row blocks (O(block_size n) memory)."""
    positions_t = positions.T

    def body(total, rows):
        x_i, m_i, i_idx = rows
        inv = _inverse_distances(_differences(x_i, positions_t), i_idx, jnp.less)  # each pair once
        return total + jnp.sum(m_i[:, None] * masses[None, :] * inv), None

    total, _ = jax.lax.scan(body, jnp.zeros((), positions.dtype), _row_blocks(positions, masses, block_size))
    return total


def _pair_energy_gradient(positions: Array, masses: Array, block_size: int) -> tuple[Array, Array]:
    r"""$\partial U/\partial x_i = -m_i \sum_{j \ne i} m_j (x_i - x_j)/r_{ij}^3$ and
    $\partial U/\partial m_i = \sum_{j \ne i} m_j / r_{ij}$, by row blocks (the
    differences as they are: no cancellation for a cluster far from the origin),
    at most `GRADIENT_BLOCK_SIZE` rows a block."""
    n = masses.shape[0]
    block_size = min(block_size, GRADIENT_BLOCK_SIZE)
    positions_t = positions.T

    def row_block(rows):
        x_i, m_i, i_idx = rows
        differences = _differences(x_i, positions_t)
        inv = _inverse_distances(differences, i_idx, jnp.not_equal)
        inv3 = inv * inv * inv
        # Matrix-vector products: XLA's row reductions of the same (b, n) arrays were 1.5x slower.
        d_x = jnp.stack([-m_i * ((d * inv3) @ masses) for d in differences], axis=-1)
        return d_x, inv @ masses

    d_x, d_m = jax.lax.map(row_block, _row_blocks(positions, masses, block_size))
    return d_x.reshape(-1, positions.shape[1])[:n], d_m.reshape(-1)[:n]


@_pair_energy.defjvp
def _pair_energy_jvp(block_size, primals, tangents):
    """The tangent from the closed-form gradient: one more O(n^2) pass instead of
    autodiff through the blocks (10x faster, and linear in the tangents, so
    reverse mode transposes it for free)."""
    positions, masses = primals
    d_positions, d_masses = tangents
    d_x, d_m = _pair_energy_gradient(positions, masses, block_size)
    return _pair_energy(positions, masses, block_size), jnp.vdot(d_x, d_positions) + jnp.vdot(d_m, d_masses)


def _spherical_potential(positions: Positions, masses: Masses, centre: Array | None) -> Scalar:
    if centre is None:
        # The coordinate-wise median, not the centre of mass: a few far-out
        # stars of a heavy-tailed profile move the latter far from the core.
        centre = column_median(positions)
    # Sorting by radius: the permutation only decides which mass counts as
    # inside; the gradient flows through the sorted radii and gathered masses.
    r2_sorted, m_sorted = sort_by_radius(squared_radii(positions, centre), masses)
    return shell_sum(r2_sorted, m_sorted, jnp.cumsum(m_sorted) - m_sorted)


def shell_sum(r2: Array, masses: Array, inside: Array) -> Scalar:
    r"""$-\sum_i m_i M(<r_i) / r_i$ from squared radii, masses and the mass
    inside each (a star at the centre adds nothing; no NaN gradient there)."""
    positive = r2 > 0
    r_safe = jnp.sqrt(jnp.where(positive, r2, 1.0))
    return -jnp.sum(jnp.where(positive, masses * inside / r_safe, 0.0))


def resolved_method(method: str, n: int) -> str:
    """The `potential_energy` method that sums W of n stars: "auto" is "exact"
    up to `EXACT_MAX_N` stars and "mesh" above; any other method is itself
    (`ValueError` for a method not in `METHODS`)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "exact" if n <= EXACT_MAX_N else "mesh"
    return method


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
    n = masses.shape[0]
    method = resolved_method(method, n)
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
    w: Scalar | None = None,
) -> Scalar:
    """Q = T / |W|, with T measured in the centre-of-mass frame.

    `method` and `centre` are passed to `potential_energy`; `w`: W of these
    positions and masses when it is known already (in the units of `G`; then
    `method`, `centre` and `G` are not used).
    """
    v_com = jnp.sum(masses[:, None] * velocities, axis=0) / jnp.sum(masses)
    t = kinetic_energy(velocities - v_com, masses)
    if w is None:
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
    Q = check_argument("Q", Q, lower=0.0, lower_inclusive=True)
    t = kinetic_energy(velocities, masses)
    w = potential_energy(positions, masses, G=G, method=method, centre=centre)
    return velocities * virial_velocity_factor(t, w, Q)


def virial_velocity_factor(t: Scalar, w: Scalar, Q: Scalar) -> Scalar:
    r"""$\sqrt{Q |W| / T}$, the factor on velocities that turns T / |W| into Q
    (0 for T = 0 or Q = 0, with a zero, never NaN, gradient there)."""
    return safe_sqrt(safe_divide(Q * jnp.abs(w), t))


def ring_spherical_potential(r2: Array, masses: Array, axis_name: str, n_devices: int) -> Scalar:
    """W / G (negative) of the whole set from one device's share (inside
    `shard_map` over the mesh axis `axis_name` of `n_devices`): `r2` (n,)
    squared radii about the centre, `masses` (n,); the result is the same on
    every device (module docstring)."""
    order, r2_sorted, inside = ring_mass_inside(r2, masses, axis_name, n_devices)
    return jax.lax.psum(shell_sum(r2_sorted, masses[order], inside), axis_name)
