r"""SPH density, density loss and their gradient over a device mesh.

Each device of a one-axis mesh holds one slab of particles (`slabs`), gets
the particles of the other slabs within the reach $R = 2\max_i h_i$ of its
own by `ppermute` (`halo`), and runs the neighbour engine
(`progenax.neighbours`) on its own particles plus that halo: one cell list
whose queries are the own particles only (`build_cell_list(query=...)`), the
halo being sources. Every pair within $R$ of an own particle is then a
candidate, so the own densities are those of one device to round-off.

**Gradient.** The engine's symmetric reverse pass gives an own particle $i$

$$\bar x_i = \sum_j \bigl(\bar\rho_i m_j F(r_{ij}, h_i) + \bar\rho_j m_i F(r_{ij}, h_j)\bigr)(x_i - x_j),
\qquad \bar m_i = \sum_j \bar\rho_j W(r_{ij}, h_j),$$

which reads the cotangents $\bar\rho_j$ of its halo neighbours, held by
other devices. The sharded density is therefore a custom VJP per device: its
backward pass sends $\bar\rho$ through the same exchange as the positions
and then runs the engine's reverse pass with the full cotangent. Halo copies
get no cotangent (they have no candidates); their owners compute theirs.
Nothing is summed over the mesh by hand: the per-particle inputs are
sharded, so `shard_map`'s transpose returns each device its own block;
scalar masses or h are broadcast to particles *before* the `shard_map`, so
their cotangent is one sum outside it; and the loss is summed outside the
map too (a psum inside it, under `check_vma=False`, transposes to another
psum: every gradient times D, the trap issue 24 warns of).

**Padding** slots (`valid` False) get zero mass, the largest h and, with
open boundaries, a position $2R$ below every particle, off every device's
cell grid; in a periodic box they sit half a box from their slab. Their
density is 0 and they receive no cotangent.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .._types import Array, ArrayLike
from ..sph.density import checked_box, checked_positions
from ..sph.kernels import get_kernel
from ..sph.pairs import density_pair_sum
from ..validation import check_range, check_static_int
from ._device import Config, halo_plan, mesh_axis, query_cells, raise_if, shard_map_particles, with_halo
from ._device import particle_mesh as particle_mesh
from .halo import mesh_offsets
from .slabs import Slabs, decompose

HALO_ROUND = 8  # halo capacities are rounded up to a multiple of this


# -- one device's density and its custom VJP (inside shard_map) -------------------
def _engine_vjp(cfg: Config, x, m, h, valid, box, plan, reach, h_max):
    """Densities of own + halo particles (own ones exact) and the engine's pullback."""
    xs, ms, hs, _ = with_halo(cfg, plan, x, m, h, valid, reach, h_max, box)
    query = jnp.concatenate([valid, jnp.zeros(plan.received.shape, bool)])
    cells = query_cells(cfg, xs, reach, box, query)
    pair_sum = density_pair_sum(cfg.kernel, cfg.dim, cfg.layout)
    return jax.vjp(lambda xs, ms, hs: pair_sum(cells, {"x": xs, "m": ms, "h": hs})[:, 0], xs, ms, hs)


@functools.cache
def _local_density(cfg: Config):
    """rho of one device's own particles, with the halo-aware custom VJP."""

    @jax.custom_vjp
    def local(x, m, h, valid, box, plan, reach, h_max):
        rho, _ = _engine_vjp(cfg, x, m, h, valid, box, plan, reach, h_max)
        return jnp.where(valid, rho[: x.shape[0]], 0.0)

    def local_fwd(x, m, h, valid, box, plan, reach, h_max):
        rho, pullback = _engine_vjp(cfg, x, m, h, valid, box, plan, reach, h_max)
        return jnp.where(valid, rho[: x.shape[0]], 0.0), (pullback, plan, valid)

    def local_bwd(residuals, rho_bar):
        pullback, plan, valid = residuals
        rho_bar = jnp.where(valid, rho_bar, 0.0)
        full = jnp.concatenate([rho_bar, jnp.where(plan.received, plan.exchange(rho_bar), 0.0)])
        own = valid.shape[0]
        x_bar, m_bar, h_bar = (
            jnp.where(valid.reshape((-1,) + (1,) * (g.ndim - 1)), g[:own], 0.0) for g in pullback(full)
        )
        return x_bar, m_bar, h_bar, None, None, None, None, None

    local.defvjp(local_fwd, local_bwd)
    return local


def _body(cfg: Config):
    def body(x, m, h, valid, box):
        plan, reach, h_max, bad = halo_plan(cfg, x, h, valid, box)
        return _local_density(cfg)(x, m, h, valid, box, plan, reach, h_max), bad[None]

    return body


@functools.cache
def _sharded(cfg: Config, with_loss: bool, periodic_box: bool):
    """The jitted density (x, m, h, valid, rho0, box) -> (rho (D C,) or the loss, bad (D,))."""
    spec = P(cfg.axis_name)
    mapped = shard_map_particles(cfg, _body(cfg), 4, periodic_box, (spec, spec))

    def run(x, m, h, valid, rho0, box):
        rho, bad = mapped(x, m, h, valid, box)
        if not with_loss:
            return rho, bad
        # Summed outside the map: XLA's partitioner adds the all-reduce, and
        # the gradient's broadcast back is its transpose (no factor D).
        return jnp.sum(jnp.where(valid, (rho - rho0) ** 2, 0.0)), bad

    return jax.jit(run)


@functools.cache
def _halo_counter(cfg: Config, periodic_box: bool):
    """The jitted count of the particles each device sends each destination, (D, K)."""

    def body(x, h, valid, box):
        plan, _, _, _ = halo_plan(cfg, x, h, valid, box)
        return plan.counts[None]

    return jax.jit(shard_map_particles(cfg, body, 3, periodic_box, P(cfg.axis_name)))


def measure_halo(x, h, valid, *, mesh=None, box=None, axis=0, hops=None, headroom=1.0) -> tuple[int, int]:
    """`(hops, halo)` that concrete layout arrays need: x (D C, d), h and
    `valid` (D C,). `hops` (None: the fewest that reach every device with a
    particle within the reach) and the halo slots per destination, the most
    any device sends one destination times `headroom` (> 1 leaves room for
    particles that move, as in a relaxation), rounded up to a multiple of 8."""
    mesh, _, n_devices = mesh_axis(mesh)
    periodic = box is not None
    if periodic:
        box = jnp.broadcast_to(jnp.asarray(box, x.dtype), (x.shape[1],))
    # Counted to every device at once: the counts do not depend on the capacity.
    widest = max(n_devices // 2 if periodic else n_devices - 1, 1)
    cfg = Config(mesh, "cubic", x.shape[1], axis, widest, 1, periodic)
    counts = np.asarray(_halo_counter(cfg, periodic)(x, h, valid, box)).reshape(n_devices, -1).max(axis=0)
    offsets = np.asarray(mesh_offsets(n_devices, widest, periodic), int)
    distance = np.minimum(offsets % n_devices, -offsets % n_devices) if periodic else np.abs(offsets)
    if hops is None:
        hops = max(int(distance[counts > 0].max()) if np.any(counts > 0) else 1, 1)
    within = counts[distance <= hops]
    need = max(int(np.ceil((within.max() if within.size else 1) * headroom)), 1)
    return hops, -(-need // HALO_ROUND) * HALO_ROUND


_LOST = (
    "sharded density: a neighbour would be lost: more halo particles than `halo` slots, "
    "or a slab thinner than the kernel reach (raise `halo` or `hops`)"
)


# -- the layout-level functions ----------------------------------------------------
def slab_density(
    x: Array,
    m: Array,
    h: Array,
    valid: Array,
    *,
    mesh: Mesh | None = None,
    box: Array | None = None,
    kernel: str = "cubic",
    axis: int = 0,
    hops: int | None = None,
    halo: int | None = None,
) -> Array:
    """Density of particles already in the slab layout (`Slabs.to_slabs`):
    x (D C, d), m and h (D C,), `valid` (D C,); zero in padding slots.

    `hops`: mesh neighbours on each side a device exchanges with; `halo`:
    slots per destination (static; None: measured from concrete data,
    `measure_halo`; under `jit` give both).
    A neighbour that would be lost raises `ValueError` (`error_if` under jit).
    Differentiable (reverse mode) in x, m and h.
    """
    cfg, box = _layout_config(x, h, valid, mesh, box, kernel, axis, hops, halo)
    rho, bad = _sharded(cfg, False, box is not None)(x, m, h, valid, jnp.zeros_like(m), box)
    return raise_if(rho, bad, _LOST)


def slab_density_loss(x, m, h, rho0, valid, **options) -> Array:
    """The loss sum over valid slots of (rho - rho0)^2 for layout arrays
    (`slab_density`'s options; `rho0` (D C,))."""
    cfg, box = _layout_config(x, h, valid, **options)
    loss, bad = _sharded(cfg, True, box is not None)(x, m, h, valid, rho0, box)
    return raise_if(loss, bad, _LOST)


def _layout_config(x, h, valid, mesh=None, box=None, kernel="cubic", axis=0, hops=None, halo=None):
    mesh, _, n_devices = mesh_axis(mesh)
    dim = x.shape[1]
    if x.shape[0] % n_devices:
        raise ValueError(f"layout arrays must hold D C rows (D = {n_devices}), got {x.shape[0]}")
    kernel = get_kernel(kernel).name
    if hops is not None:
        hops = check_static_int("hops", hops, 1)
    if box is not None:
        box = jnp.broadcast_to(jnp.asarray(box, x.dtype), (dim,))
    if halo is None or hops is None:
        # Under eager `grad` the primal values are concrete: measure on them.
        x, h, valid, measured_box = jax.lax.stop_gradient((x, h, valid, box))
        if any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves((x, h, valid, measured_box))):
            raise ValueError("hops and halo must be given (static) under jit: see sharding.measure_halo")
        hops, measured = measure_halo(x, h, valid, mesh=mesh, box=measured_box, axis=axis, hops=hops)
        halo = measured if halo is None else halo
    halo = check_static_int("halo", halo, 1)
    return Config(mesh, kernel, dim, axis, hops, halo, box is not None), box


# -- the particle-order functions ----------------------------------------------------
def _prepare(positions, masses, h, box, n_devices, axis, bounds, capacity):
    positions = checked_positions(positions, traced=False)
    n, dim = positions.shape
    dtype = positions.dtype
    masses = jnp.broadcast_to(jnp.asarray(masses, dtype), (n,))
    h = jnp.broadcast_to(check_range("h", h, lower=0.0).astype(dtype), (n,))
    box = checked_box(box, dim, dtype, h)
    slabs = decompose(positions, n_devices, axis=axis, box=box, bounds=bounds, capacity=capacity)
    return positions, masses, h, box, slabs


def _placed(mesh, axis_name, *arrays):
    sharding = NamedSharding(mesh, P(axis_name))
    return [jax.lax.with_sharding_constraint(a, sharding) for a in arrays]


def density(
    positions: ArrayLike,
    masses: ArrayLike,
    h: ArrayLike,
    *,
    mesh: Mesh | None = None,
    box: ArrayLike | None = None,
    kernel: str = "cubic",
    axis: int = 0,
    hops: int | None = None,
    halo: int | None = None,
    bounds: ArrayLike | None = None,
    capacity: int | None = None,
) -> Array:
    r"""`progenax.sph.density` over the devices of `mesh`: $\rho_i = \sum_j m_j W(r_{ij}, h_i)$.

    **Arguments:** `positions` (N, d), `masses` and `h` (scalars or (N,)),
    `box` and `kernel` as in `progenax.sph.density`; and

    - `mesh`: a one-axis `jax.sharding.Mesh` (default: every device,
      `particle_mesh()`).
    - `axis`: the axis the slabs cut (static).
    - `bounds`, `capacity`: the cut (`sharding.decompose`; default equal
      counts).
    - `hops`, `halo`: mesh neighbours per side and halo slots per
      destination (`slab_density`; None measures them from the data, which
      eager calls and eager `jax.grad` allow: under `jit` give both).

    **Returns:** ρ (N,) in particle order, equal to the one-device density to
    round-off. Differentiable (reverse mode) in positions, masses and h.

    ```python
    mesh = progenax.sharding.particle_mesh()
    rho = progenax.sharding.density(x, 1.0, 0.5, mesh=mesh, box=100.0)
    ```
    """
    mesh, axis_name, n_devices = mesh_axis(mesh)
    positions, masses, h, box, slabs = _prepare(positions, masses, h, box, n_devices, axis, bounds, capacity)
    x, m, hs, valid = _placed(mesh, axis_name, *_layout(slabs, positions, masses, h))
    rho = slab_density(x, m, hs, valid, mesh=mesh, box=box, kernel=kernel, axis=axis, hops=hops, halo=halo)
    return slabs.from_slabs(rho)


def density_loss(
    positions: ArrayLike,
    masses: ArrayLike,
    h: ArrayLike,
    rho0: ArrayLike,
    *,
    mesh: Mesh | None = None,
    box: ArrayLike | None = None,
    kernel: str = "cubic",
    axis: int = 0,
    hops: int | None = None,
    halo: int | None = None,
    bounds: ArrayLike | None = None,
    capacity: int | None = None,
) -> Array:
    r"""`progenax.sph.density_loss` over a mesh: $\sum_i (\rho_i - \rho_{0,i})^2$,
    `rho0` a scalar or (N,); the other arguments those of `density`.
    Differentiable in positions, masses, h and rho0.

    ```python
    grad = jax.grad(progenax.sharding.density_loss)(x, 1.0, 0.5, 10.0)
    ```
    """
    mesh, axis_name, n_devices = mesh_axis(mesh)
    positions, masses, h, box, slabs = _prepare(positions, masses, h, box, n_devices, axis, bounds, capacity)
    rho0 = jnp.broadcast_to(jnp.asarray(rho0, positions.dtype), masses.shape)
    x, m, hs, valid = _layout(slabs, positions, masses, h)
    x, m, hs, valid, r0 = _placed(mesh, axis_name, x, m, hs, valid, slabs.to_slabs(rho0))
    options = dict(mesh=mesh, box=box, kernel=kernel, axis=axis, hops=hops, halo=halo)
    return slab_density_loss(x, m, hs, r0, valid, **options)


def _layout(slabs: Slabs, positions, masses, h):
    return slabs.to_slabs(positions), slabs.to_slabs(masses), slabs.to_slabs(h), slabs.valid
