r"""`progenax.relax`'s step over a device mesh.

Each step is the one-device step of `sph.relaxation` (preconditioned,
projected heavy ball on the density loss at fixed h; same settings, same
cosine schedule), with its two neighbour sums run per device on own
particles plus halo (`sharding.halo`): first the densities, then the
gradient's pair part `sph.adaptive.loss_gradient_pair`, which reads
$e_j = 2(\rho_j - \rho_{t,j})$ of the neighbours, so the own $e$ are sent
through the same exchange before the second sum. The smallest and largest
live $h$ (the latter sets the reach: only live particles are queries, and
both sums stay inside a query's own ball) and, with open boundaries, the
centre-of-mass hold's two sums are mesh-wide reductions; everything else is
per particle. Both sums are exact for any cell layout (the gradient pair has
an explicit ball edge), so one cell list per device gives the banded
one-device result to round-off.

**Load balance.** The steps run in blocks of `block` (default
$\lceil\sqrt{\text{steps}}\rceil$); before each block the particles are cut
again by count (`slabs.decompose`), so a device keeps
$\lceil N/D \rceil$ particles however they move. `hops` and the halo
capacity are fixed for the whole run; a step that would need more raises,
never drops a neighbour.

Projections: `LimitStep`, and with open boundaries the centre of mass
(`KeepCentreOfMass` with the stars' masses), as `progenax.relax` takes for
bare positions and a given target; with `keep_radii=True` the radial
profile hold `KeepRadii` first, as `progenax.relax` takes for a cluster,
its Lagrangian radii each step over the mesh (the shares sorted on their
devices and passed around the ring, `diagnostics.ring`). Forward only: the
sharded relaxation is not differentiated (the one-device `progenax.relax`
is).
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .._types import Array, ArrayLike
from ..diagnostics.ring import ring_weighted_quantiles
from ..neighbours import make_pair_sum, minimum_image
from ..sampling import safe_norm
from ..sph.adaptive import loss_gradient_features, loss_gradient_pair
from ..sph.density import checked_box, checked_masses, checked_positions
from ..sph.kernels import SUPPORT
from ..sph.pairs import density_pair_sum
from ..sph.projections import KeepRadii, LimitStep, centre_of_mass, knot_fractions, project

# Private helpers of the one-device step, imported so that each formula (the
# smoothing lengths and the target's slope, the cosine schedule, the target's
# resolution and check) is written once.
from ..sph.relaxation import RELAX_KERNEL, RelaxSettings, _schedule, _smoothing_lengths_and_slope
from ..sph.targets import _check_target_values, _resolve_target
from ..validation import check_static_int
from ._device import Config, mesh_axis, plan_exchange, query_cells, raise_if, shard_map_particles, with_halo
from .density import measure_halo
from .slabs import decompose, slab_coordinate


class _KeepRadiiOverMesh(KeepRadii):
    """`sph.projections.KeepRadii` for one device's own particles (padding
    slots weigh 0): the Lagrangian radii of the whole set, over the mesh
    (`diagnostics.ring.ring_weighted_quantiles`)."""

    axis_name: str = eqx.field(static=True)
    n_devices: int = eqx.field(static=True)

    def now_knots(self, y: Array) -> Array:
        fractions = knot_fractions(self.knots.shape[0] + 1, y.dtype)
        radii = safe_norm(y - self.centre)
        return ring_weighted_quantiles(radii, self.weights, fractions, self.axis_name, self.n_devices)


def _step(cfg: Config, s: RelaxSettings, target, x, v, m, valid, t, box, centre, radii):
    """One relaxation step of one device's own particles (inside `shard_map`);
    `radii`: None, or the knots and centre of the radial hold."""
    dim = x.shape[1]
    h, rho_t, live, slope = _smoothing_lengths_and_slope(x, m, target, s.eta, s.live_scale)
    live = live & valid
    # Where the target is not positive h is the smallest live h, mesh-wide.
    h_live_min = jax.lax.pmin(jnp.min(jnp.where(live, h, jnp.inf)), cfg.axis_name)
    h = jnp.where(rho_t > 0, h, jax.lax.stop_gradient(h_live_min))
    # Only live particles are queries, and both sums stay inside a query's
    # own ball: the reach is the largest live support (the far halo's large
    # h would otherwise make every particle a halo particle).
    h_max = jax.lax.pmax(jnp.max(jnp.where(live, h, 0.0)), cfg.axis_name)
    h_max = jnp.where(h_max > 0, h_max, 1.0)  # no live particle: no query either
    reach = SUPPORT * h_max
    coord = slab_coordinate(x, cfg.axis, box)
    length = None if box is None else box[cfg.axis]
    if box is not None:
        # Unwrapped about the slab's centre at the cut: a particle that
        # crossed the box edge keeps its device's extent one interval.
        coord = centre + minimum_image(coord - centre, length)
    plan, bad = plan_exchange(cfg, coord, valid, reach, box)
    xs, ms, hs, real = with_halo(cfg, plan, x, m, h, valid, reach, h_max, box)
    query = jnp.concatenate([live, jnp.zeros(plan.received.shape, bool)])
    cells = query_cells(cfg, xs, reach, box, query)
    layout = cfg.layout
    own = x.shape[0]
    rho = density_pair_sum(cfg.kernel, dim, layout)(cells, {"x": xs, "m": ms, "h": hs})[:own, 0]
    e = jnp.where(live, 2.0 * (rho - rho_t), 0.0)
    es = jnp.where(real, jnp.concatenate([e, plan.exchange(e)]), 0.0)
    gradient = _gradient_sum(cfg.kernel, dim, layout)
    g = gradient(cells, loss_gradient_features(cfg.kernel, xs, ms, hs, es))[:own]
    g = g - e[:, None] * slope
    spacing = h / s.eta
    rho_safe = jnp.where(live, rho_t, 1.0)
    v = s.momentum * v - _schedule(t, s, x.dtype) * (spacing**2 / rho_safe**2)[:, None] * g
    v = jnp.where(live[:, None], v, 0.0)
    trust = jnp.where(live, s.max_step * spacing, 0.0)
    projections = (LimitStep(),)
    if radii is not None:
        knots, radii_centre = radii
        weights = jnp.where(valid, m, 0.0)
        hold = _KeepRadiiOverMesh(knots, weights, radii_centre, cfg.axis_name, cfg.n_devices)
        projections = (hold,) + projections
    v = project(projections, x, v, trust)
    if box is None:
        v = _keep_centre_of_mass(cfg.axis_name, m, v, trust)
        return x + v, v, bad
    return jnp.mod(x + v, box), v, bad


def _keep_centre_of_mass(axis_name: str, w: Array, dx: Array, trust: Array) -> Array:
    """`sph.projections.KeepCentreOfMass` (the one-device relaxation's hold
    for open boundaries) with its two sums taken over the mesh: the mean
    displacement removed in proportion to each particle's trust radius."""
    drift = jax.lax.psum(jnp.sum(w[:, None] * dx, axis=0), axis_name) / jax.lax.psum(jnp.sum(w * trust), axis_name)
    return dx - trust[:, None] * drift


@functools.cache
def _gradient_sum(kernel, dim, layout):
    return make_pair_sum(loss_gradient_pair(kernel, dim), layout)


@functools.cache
def _block_fn(cfg: Config, s: RelaxSettings, block: int):
    """The jitted block loop: cut by count, `block` steps per device, and back."""
    spec = P(cfg.axis_name)

    def device_block(x, v, m, valid, t0, box, target, radii):
        coord = slab_coordinate(x, cfg.axis, box)
        centre = 0.5 * (jnp.min(jnp.where(valid, coord, jnp.inf)) + jnp.max(jnp.where(valid, coord, -jnp.inf)))
        centre = jnp.where(jnp.any(valid), centre, 0.0)

        def one(carry, k):
            x, v, bad = carry
            t = t0[0] + k
            new_x, new_v, new_bad = _step(cfg, s, target, x, v, m, valid, t, box, centre, radii)
            going = t < s.steps  # the last block's padding steps do nothing
            x, v = jnp.where(going, new_x, x), jnp.where(going, new_v, v)
            return (x, v, bad | (going & new_bad)), None

        (x, v, bad), _ = jax.lax.scan(one, (x, v, jnp.zeros((), bool)), jnp.arange(block))
        return x, v, bad[None]

    def run(x, v, m, box, target, radii, n_blocks):
        def one_block(b, carry):
            x, v, bad = carry
            slabs = decompose(x, cfg.n_devices, axis=cfg.axis, box=box)
            t0 = jnp.full(cfg.n_devices, b * block, jnp.int32)

            def body(xs, vs, ms, valid, t0, shared):
                return device_block(xs, vs, ms, valid, t0, *shared)

            # The box and the target's leaves go in replicated (P()).
            mapped = shard_map_particles(cfg, body, 5, True, (spec, spec, spec))  # `shared` replicated
            layout = (slabs.to_slabs(x), slabs.to_slabs(v), slabs.to_slabs(m), slabs.valid, t0)
            xs, vs, bads = mapped(*layout, (box, target, radii))
            return slabs.from_slabs(xs), slabs.from_slabs(vs), bad | jnp.any(bads)

        return jax.lax.fori_loop(0, n_blocks, one_block, (x, v, jnp.zeros((), bool)))

    return jax.jit(run, static_argnums=(6,))


def relax(
    positions: ArrayLike,
    masses: ArrayLike,
    *,
    target,
    box: ArrayLike | None = None,
    steps: int = 200,
    mesh=None,
    block: int | None = None,
    eta: float = 1.2,
    step_size: float | None = None,
    momentum: float | None = None,
    max_step: float | None = None,
    kernel: str = RELAX_KERNEL,
    axis: int = 0,
    hops: int | None = None,
    halo: int | None = None,
    headroom: float = 1.25,
    keep_radii: bool = False,
) -> Array:
    r"""Relax `positions` (N, d) towards `target`, sharded over `mesh`.

    The result is `progenax.relax(positions, target=target, box=box,
    masses=masses, steps=steps, ...)` to round-off, with the same settings.

    **Arguments:**

    - `masses`: scalar or (N,).
    - `target`: a constant density (periodic `box` only) or a pointwise
      callable rho(x): (N, d) -> (N,).
    - `box`: the periodic box (scalar or one per axis), or None for open
      boundaries (the centre of mass is then held, as `progenax.relax` does).
    - `mesh`: a one-axis mesh (default: every device).
    - `eta`, `step_size`, `momentum`, `max_step`, `kernel`: as for
      `progenax.relax` (the last three left None: `sph.relaxation.OPEN` in
      open space, `PERIODIC` in a box).
    - `block`: steps between re-cuts by count (static; default
      ceil(sqrt(steps))).
    - `axis`, `hops`, `halo`: as in `sharding.density`. None: measured on the
      input with the reach widened by the farthest a particle can move in a
      block (each step moves it at most `max_step` spacings), the halo then
      times `headroom` for the blocks after the first.
    - `keep_radii`: hold the radial mass profile each step, as
      `progenax.relax(..., keep_radii=True)` does (`sph.projections.KeepRadii`
      about the input's centre of mass, weights `masses`; open boundaries
      only), the Lagrangian radii taken over the mesh.

    **Returns:** the relaxed positions (N, d) (wrapped into a periodic box).
    Raises `ValueError` if a step would lose a neighbour (raise `halo` or
    `hops`).
    """
    mesh, _, n_devices = mesh_axis(mesh)
    x0 = checked_positions(positions, dims=(2, 3), traced=False)
    n, dim = x0.shape
    settings = RelaxSettings(
        steps=steps, eta=eta, step_size=step_size, momentum=momentum, max_step=max_step, kernel=kernel, n_bands=1
    ).for_boundary(box is not None)
    box = checked_box(box, dim, x0.dtype)
    target_fn, _ = _resolve_target(target, None, box, x0.dtype)
    if not isinstance(target_fn, jax.tree_util.Partial):
        target_fn = jax.tree_util.Partial(target_fn)  # a pytree: a jit argument, the function static
    m = checked_masses(masses, n, x0.dtype)
    _check_target_values(target_fn(x0))
    if keep_radii and box is not None:
        raise ValueError("keep_radii applies to open boundaries (box=None)")
    if steps == 0:
        return x0
    radii = None
    if keep_radii:
        hold = KeepRadii.of(x0, m)
        radii = (hold.knots, hold.centre)
    block = max(1, math.isqrt(steps - 1) + 1) if block is None else check_static_int("block", block, 1)
    if halo is None or hops is None:
        hops, halo = _measure(x0, m, target_fn, settings, block, mesh, box, axis, hops, headroom)
    hops, halo = check_static_int("hops", hops, 1), check_static_int("halo", halo, 1)
    cfg = Config(mesh, settings.kernel, dim, axis, hops, halo, box is not None)
    x, _, bad = _block_fn(cfg, settings, block)(x0, jnp.zeros_like(x0), m, box, target_fn, radii, -(-steps // block))
    if box is None:
        x = x + (centre_of_mass(x0, m) - centre_of_mass(x, m))  # round-off only, as progenax.relax
    return raise_if(x, bad, "sharded relax: a step would lose a neighbour (raise `halo` or `hops`)")


def _measure(x0, m, target_fn, s: RelaxSettings, block, mesh, box, axis, hops, headroom) -> tuple[int, int]:
    """`(hops, halo)` for a relaxation: measured on the input with each live
    h widened by the farthest move in a block, `block * max_step` of the
    largest live spacing (the trust radius bounds every step): the halo of
    any step of the first block is within that reach of the slab's extent."""
    n_devices = len(mesh.devices.flat)
    h, _, live, _ = _smoothing_lengths_and_slope(x0, m, target_fn, s.eta, s.live_scale)
    move = block * s.max_step * jnp.max(jnp.where(live, h, 0.0)) / s.eta
    # SUPPORT * sizing = the reach + 2 moves (both devices' extents grow).
    sizing = jnp.where(live, h + 2.0 * move / SUPPORT, 0.0)
    slabs = decompose(x0, n_devices, axis=axis, box=box)
    layout = (slabs.to_slabs(x0), slabs.to_slabs(sizing), slabs.valid)
    return measure_halo(*layout, mesh=mesh, box=box, axis=axis, hops=hops, headroom=headroom)
