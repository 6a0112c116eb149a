"""Sharded-against-one-device checks on simulated CPU devices, run in a subprocess.

`python tests/sharding/_worker.py CASE [CASE ...]`, with XLA_FLAGS forcing the device
count and JAX_ENABLE_X64 set by the caller (`run_worker` in tests/sharding/conftest.py);
prints one JSON line of the largest relative differences. Not collected by
pytest (no test_ prefix).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys

import _fractal_cases  # beside this file: the script's directory is on sys.path
import jax
import jax.numpy as jnp
import numpy as np

import progenax
from progenax import sharding, sph
from progenax.cli import CACHE_MAX_BYTES
from progenax.neighbours import minimum_image

# A hung worker prints where it is before the caller's timeout kills it (conftest.py).
if "PROGENAX_WORKER_STACK_AFTER_S" in os.environ:
    faulthandler.dump_traceback_later(float(os.environ["PROGENAX_WORKER_STACK_AFTER_S"]))

# The test run's compilation cache (tests/conftest.py), in the same mode.
if "PROGENAX_TEST_XLA_CACHE" in os.environ:
    jax.config.update("jax_compilation_cache_dir", os.environ["PROGENAX_TEST_XLA_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)


def gathered(*arrays):
    """Each array copied whole onto one device. The figures of a sharded build
    are measured there: XLA's CPU runtime can deadlock (one simulated device
    never joins a collective) in a long chain of small eager operations on
    arrays laid out over the simulated devices, as diagnostics run eagerly
    would be (reproduced with `half_mass_radius` called eagerly in a loop on
    a sharded fractal; see tests/sharding/conftest.py)."""
    out = tuple(jnp.asarray(np.asarray(a)) for a in arrays)
    return out if len(out) > 1 else out[0]


def rel(a, b) -> float:
    """Largest difference over the largest magnitude of the reference."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def compare(x, m, h, rho0, box, **options) -> dict:
    """Density, loss and the loss's gradient in x, m and h, sharded against
    one device: the loss and its gradient through `jax.vjp` of the density
    (two compiles a side, where `value_and_grad` of the loss beside the
    density would take three; `density_loss` is the same sum, run in
    `float32`)."""

    def through_vjp(density):
        rho, pullback = jax.vjp(lambda *a: density(*a, box=box), x, m, h)
        return rho, jnp.sum((rho - rho0) ** 2), pullback(2.0 * (rho - rho0))

    rho1, loss1, g1 = through_vjp(sph.density)
    rho, loss, g = through_vjp(lambda *a, box: sharding.density(*a, box=box, **options))
    return {
        "density": rel(rho, rho1),
        "loss": rel(loss, loss1),
        "grad_x": rel(g[0], g1[0]),
        "grad_m": rel(g[1], g1[1]),
        "grad_h": rel(g[2], g1[2]),
    }


def open_uneven(n_devices: int) -> dict:
    """Open 2D boundaries, N not a multiple of D, per-particle masses and h,
    a clustered (Gaussian) cloud cut by count, with a third of the particles
    on a few x values (ties, which a count cut splits across devices)."""
    key = jax.random.PRNGKey(0)
    n = 1501
    x = jax.random.normal(key, (n, 2))
    x = x.at[::3, 0].set(jnp.round(x[::3, 0], 1))
    m = jnp.linspace(0.5, 1.5, n)
    h = 0.1 * (1.0 + 0.3 * jnp.abs(x[:, 0]))
    # The central slabs are thinner than the reach at D = 8: two hops.
    return compare(x, m, h, 50.0, None, hops=2, halo=512)


def periodic_edges(n_devices: int) -> dict:
    """Periodic 2D box cut by edges: one slab empty (two equal edges; the
    mesh then needs hops=2 to bridge it) and particles exactly on edges."""
    length = 10.0
    key = jax.random.PRNGKey(1)
    n = 1203
    x = jax.random.uniform(key, (n, 2), minval=0.0, maxval=length)
    bounds = jnp.linspace(0.0, length, n_devices + 1)
    bounds = bounds.at[2].set(bounds[1])  # slab 1 is empty
    on_edge = jnp.arange(40) % n_devices + 1
    x = x.at[:40, 0].set(bounds[on_edge])  # 40 particles on edges
    h = 0.3 * jnp.ones(n)
    slabs = sharding.decompose(x, n_devices, box=jnp.full(2, length), bounds=bounds)
    counts = np.asarray(slabs.counts)
    out = compare(x, 1.0, h, 8.0, length, bounds=bounds, hops=2, halo=512)
    out["empty_devices"] = int(np.sum(counts == 0))
    return out


def relax(n_devices: int) -> dict:
    """20 steps of the periodic relaxation, sharded (re-cut every 7 steps,
    hops and halo measured) against `progenax.relax`."""
    length = 10.0
    n = 1000
    x = jax.random.uniform(jax.random.PRNGKey(3), (n, 2), minval=0.0, maxval=length)
    rho0 = 10.0
    m = rho0 * length**2 / n
    one = progenax.relax(x, target=rho0, box=length, steps=20, masses=m)
    many = sharding.relax(x, m, target=rho0, box=length, steps=20, block=7)
    moved = float(jnp.max(jnp.abs(minimum_image(one - x, length))))
    return {"relax": float(jnp.max(jnp.abs(minimum_image(many - one, length)))) / moved}


def three_d(n_devices: int) -> dict:
    """3D: open boundaries, and a periodic box cut along z (axis 2), with
    hops and halo measured from the data under eager `jax.grad`."""
    x = jax.random.normal(jax.random.PRNGKey(7), (2001, 3))
    out = {"open_" + k: v for k, v in compare(x, 1.0, 0.25, 10.0, None).items()}
    x = jax.random.uniform(jax.random.PRNGKey(8), (2001, 3), maxval=6.0)
    out.update({"periodic_" + k: v for k, v in compare(x, 1.0, 0.45, 10.0, 6.0, axis=2).items()})
    return out


def gaussian_target(x):
    """A 2D Gaussian of unit mass and unit width (mass / length^2)."""
    return jnp.exp(-0.5 * jnp.sum(x * x, axis=1)) / (2.0 * jnp.pi)


def relax_open(n_devices: int) -> dict:
    """20 steps in open space towards a Gaussian (live and frozen particles,
    the centre-of-mass hold), sharded against `progenax.relax`; and with the
    radial profile held (`keep_radii`, Lagrangian radii over the mesh)."""
    n = 1000
    x = 1.2 * jax.random.normal(jax.random.PRNGKey(6), (n, 2))
    m = 1.0 / n
    out = {}
    for name, hold in (("relax", False), ("relax_radii", True)):
        one = progenax.relax(x, target=gaussian_target, masses=m, steps=20, keep_radii=hold)
        many = sharding.relax(x, m, target=gaussian_target, steps=20, block=7, keep_radii=hold)
        moved = float(jnp.max(jnp.abs(one - x)))
        out[name] = float(jnp.max(jnp.abs(many - one))) / moved
        out[f"moved_{name}"] = moved
    return out


def float32(n_devices: int) -> dict:
    """`density_loss` in float32, with the halo measured (the default path)."""
    x = jax.random.normal(jax.random.PRNGKey(4), (800, 2), jnp.float32)
    one = sph.density_loss(x, 1.0, 0.2, 30.0)
    many = sharding.density_loss(x, 1.0, 0.2, 30.0)
    return {"float32": rel(many, one), "dtype": str(many.dtype)}


def lost(n_devices: int) -> dict:
    """Too few halo slots: a ValueError, not a silently wrong density."""
    x = jax.random.uniform(jax.random.PRNGKey(5), (600, 2))
    try:
        sharding.density(x, 1.0, 0.05, box=1.0, halo=8)
    except ValueError as err:
        return {"raised": "neighbour would be lost" in str(err)}
    return {"raised": False}


def _ks_two_sample(a, b) -> float:
    """The two-sample Kolmogorov-Smirnov distance sup |F_a - F_b|."""
    a, b = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    grid = np.concatenate([a, b])
    return float(
        np.max(np.abs(np.searchsorted(a, grid, "right") / a.size - np.searchsorted(b, grid, "right") / b.size))
    )


def ring_energy(n_devices: int) -> dict:
    """The ring's shell-theorem W of a set sharded in equal shares against the
    one-device sum, in float64 and float32."""
    from jax.sharding import PartitionSpec as P

    from progenax.diagnostics.energy import potential_energy, ring_spherical_potential

    mesh = sharding.particle_mesh()
    out = {}
    for dtype in (jnp.float64, jnp.float32):
        x = jax.random.normal(jax.random.PRNGKey(8), (301 * n_devices, 3), dtype)
        m = jax.random.uniform(jax.random.PRNGKey(9), (301 * n_devices,), dtype, 0.1, 2.0)
        ring = jax.shard_map(
            lambda r2, m: ring_spherical_potential(r2, m, "particles", n_devices),
            mesh=mesh,
            in_specs=P("particles"),
            out_specs=P(),
        )(jnp.sum(x**2, axis=-1), m)
        one = potential_energy(x, m, G=1.0, method="spherical", centre=jnp.zeros(3, dtype))
        out[str(np.dtype(dtype))] = rel(ring, one)
    return out


def ring_mesh_energy(n_devices: int) -> dict:
    """The nested-mesh U of a clumpy set in equal shares (a fractal's rows in
    the builder's order: each share spread over the whole cluster) against
    the one-device estimate: the value and its gradient in positions and
    masses (float64), and the value in float32."""
    from jax.sharding import PartitionSpec as P

    from progenax.diagnostics.mesh import mesh_pair_energy, ring_mesh_pair_energy

    mesh = sharding.particle_mesh()
    ic = progenax.fractal_builder(0, n=3_000 * n_devices, D=1.6)
    out = {}
    for dtype in (jnp.float64, jnp.float32):
        x, m = ic.state.positions.astype(dtype), ic.state.masses.astype(dtype)
        ring = jax.shard_map(
            lambda x, m: ring_mesh_pair_energy(x, m, "particles", n_devices),
            mesh=mesh,
            in_specs=P("particles"),
            out_specs=P(),
        )
        if dtype == jnp.float32:
            out["float32"] = rel(jax.jit(ring)(x, m), mesh_pair_energy(x, m))
            continue
        u, g = jax.jit(jax.value_and_grad(ring, argnums=(0, 1)))(x, m)
        u1, g1 = jax.value_and_grad(mesh_pair_energy, argnums=(0, 1))(x, m)
        out.update(value=rel(u, u1), grad_x=rel(g[0], g1[0]), grad_m=rel(g[1], g1[1]))
    return out


def _king_stats(ic) -> dict:
    x, v, m = gathered(ic.state.positions, ic.state.velocities, ic.state.masses)
    from progenax.diagnostics.energy import virial_ratio

    return {
        "r": np.asarray(jnp.linalg.norm(x, axis=-1)),
        "speed": np.asarray(jnp.linalg.norm(v, axis=-1)),
        "m": np.asarray(m),
        "Q": float(virial_ratio(x, v, m, method="spherical", centre=jnp.zeros(3))),
        "momentum": float(jnp.linalg.norm(jnp.sum(m[:, None] * v, axis=0)) / jnp.sum(m * jnp.linalg.norm(v, axis=-1))),
    }


def build(n_devices: int) -> dict:
    """Sharded builds: a one-device mesh against the plain build (n above the
    exact-energy limit, so both scale with the shell-theorem W), a King
    cluster over every device (its shares, and its radii, speeds and masses
    against a one-device build by two-sample KS), an EFF one scaled to Q
    (Q and momentum), and the refusals."""
    mesh = sharding.particle_mesh()
    out = {}
    one_device = sharding.particle_mesh(jax.devices()[:1])
    plain = progenax.plummer_builder(3, n=24_000)
    meshed = progenax.plummer_builder(3, n=24_000, mesh=one_device)
    out["one_device"] = max(
        rel(meshed.state.positions, plain.state.positions),
        rel(meshed.state.velocities, plain.state.velocities),
        rel(meshed.state.masses, plain.state.masses),
    )
    n = 5_000 * n_devices
    king = progenax.king_builder(4, n=n, W0=7.0, mesh=mesh)
    shards = king.state.positions.addressable_shards
    out["shard_rows"] = sorted({s.data.shape[0] for s in shards})
    out["shards"] = len(shards)
    # The DF's own velocities (Q=None): every star an independent draw, as the
    # KS distance assumes; a Q scaling multiplies all speeds by one random factor.
    many, one = _king_stats(king), _king_stats(progenax.king_builder(4, n=n, W0=7.0))
    # EFF keeps its model centre too, so Q about the origin is the scaled one.
    scaled = _king_stats(progenax.eff_builder(5, n=n, gamma=3.0, Q=0.5, mesh=mesh))
    out["Q"] = scaled["Q"]
    out["momentum"] = scaled["momentum"]
    out["ks"] = {name: _ks_two_sample(many[name], one[name]) for name in ("r", "speed", "m")}
    out["n"] = n
    refused = {}
    for name, options in (("segregation", {"segregation": 0.3}), ("n", {"n": n + 1})):
        try:
            progenax.plummer_builder(5, **{"n": n, **options}, mesh=mesh)
            refused[name] = ""
        except ValueError as err:
            refused[name] = str(err)
    out["refused"] = refused
    return out


def build_gravoturb(n_devices: int) -> dict:
    """Sharded gravoturbulent stars and gas: a one-device mesh against the
    plain builds (the stars scaled to Q with the nested-mesh W), builds over
    every device against one-device builds of the same size by two-sample KS
    (positions per axis, speeds; the gas's h), and the Q of stars scaled
    over every device, measured with the one-device nested-mesh W."""
    from progenax import gravoturb
    from progenax.diagnostics import virial_ratio

    out = {}
    n = 5_000 * n_devices
    one_device = sharding.particle_mesh(jax.devices()[:1])
    options = dict(n=24_000, grid=32, Q=0.5)
    plain, meshed = (gravoturb.star_builder(1, **options, mesh=m) for m in (None, one_device))
    # n stars as below: the plain cloud shares its program with the one-device-statistics build
    gas = [gravoturb.cloud_builder(1, n=n, grid=32, mesh=m) for m in (None, one_device)]
    out["one_device"] = max(
        rel(meshed.state.positions, plain.state.positions),
        rel(meshed.state.velocities, plain.state.velocities),
        rel(gas[1].state.positions, gas[0].state.positions),
        rel(gas[1].state.velocities, gas[0].state.velocities),
        rel(gas[1].smoothing_length, gas[0].smoothing_length),
    )
    mesh = sharding.particle_mesh()
    stars = [gravoturb.star_builder(2, n=n, grid=32, mesh=m) for m in (mesh, None)]
    clouds = [gravoturb.cloud_builder(2, n=n, grid=32, mesh=m) for m in (mesh, None)]
    ks = {}
    for kind, (a, b) in (("stars", stars), ("gas", clouds)):
        for axis in range(3):
            ks[f"{kind}_x{axis}"] = _ks_two_sample(a.state.positions[:, axis], b.state.positions[:, axis])
        speeds = [np.linalg.norm(np.asarray(c.state.velocities), axis=-1) for c in (a, b)]
        ks[f"{kind}_speed"] = _ks_two_sample(*speeds)
    ks["gas_h"] = _ks_two_sample(clouds[0].smoothing_length, clouds[1].smoothing_length)
    out["ks"] = ks
    out["n"] = n
    out["shards"] = len(stars[0].state.positions.addressable_shards)
    scaled = gravoturb.star_builder(2, n=n, grid=32, Q=0.5, mesh=mesh).state
    out["Q"] = float(virial_ratio(*gathered(scaled.positions, scaled.velocities, scaled.masses), method="mesh"))
    return out


def build_fractal(n_devices: int) -> dict:
    """Sharded fractals. Equal masses (24,000 stars, above the exact-energy
    limit: every build scales with the nested-mesh W): a one-device mesh and
    every device against the plain build (the same tree; the radial remap's
    and W's sums in another order). Kroupa masses (the devices' own
    streams): the shares, Q measured with the one-device nested-mesh W, the
    half-mass radius, the masses against a one-device build by two-sample
    KS, the pure box fractal's half-mass radius, and the refusal of
    segregation."""
    from progenax.diagnostics import half_mass_radius, virial_ratio

    def largest_difference(a, b):
        return max(rel(getattr(a.state, k), getattr(b.state, k)) for k in ("positions", "velocities", "masses"))

    mesh = sharding.particle_mesh()
    one_device = sharding.particle_mesh(jax.devices()[:1])
    plain, meshed, many = (progenax.fractal_builder(3, n=24_000, imf="equal", mesh=m) for m in (None, one_device, mesh))
    out = {"one_device": largest_difference(meshed, plain), "all_devices": largest_difference(many, plain)}
    out["conditioning"] = 24_000  # total mass over the outermost star's (`test_builders.remap_tolerance`)
    n = 5_000 * n_devices
    kroupa, one = (progenax.fractal_builder(4, n=n, mesh=m).state for m in (mesh, None))
    out["shards"] = len(kroupa.positions.addressable_shards)
    out["shard_rows"] = sorted({s.data.shape[0] for s in kroupa.positions.addressable_shards})
    x, v, m = gathered(kroupa.positions, kroupa.velocities, kroupa.masses)
    out["Q"] = float(virial_ratio(x, v, m, method="mesh"))
    out["r_h"] = float(half_mass_radius(x, m))
    out["ks_m"] = _ks_two_sample(kroupa.masses, one.masses)
    out["n"] = n
    box = progenax.fractal_builder(4, n=n, profile="box", r_h=2.0, mesh=mesh).state
    out["box_r_h"] = float(half_mass_radius(*gathered(box.positions, box.masses))) / 2.0
    try:
        progenax.fractal_builder(5, n=n, segregation=0.3, mesh=mesh)
        out["refused"] = ""
    except ValueError as err:
        out["refused"] = str(err)
    return out


def _gradient_figures(build) -> dict:
    """d/d(r_h, Q, alpha) of O = sum m|x|^2 + sum m|v|^2 through `build(r_h,
    Q, alpha)` (a state): exact scalings (O_x proportional to r_h^2, O_v to
    Q) and central differences; a gradient summed twice over the mesh is D
    times off."""

    def parts(r_h, Q, alpha):
        s = build(r_h, Q, alpha)
        return jnp.sum(s.masses * jnp.sum(s.positions**2, -1)), jnp.sum(s.masses * jnp.sum(s.velocities**2, -1))

    p0 = (1.3, 0.4, 2.1)
    # jitted: two programs (forward and pullback), not a chain of eager ones (`gathered`)
    jitted = jax.jit(parts)
    (ox, ov), vjp = jax.vjp(jitted, *map(jnp.asarray, p0))
    grad_x, grad_v = vjp((1.0, 0.0)), vjp((0.0, 1.0))
    out = {"x_rh": rel(grad_x[0], 2.0 * ox / p0[0]), "v_Q": rel(grad_v[1], ov / p0[1])}

    def total(*p):
        # the forward program of the pullback above at other points: no compile of its own
        return sum(jax.vjp(jitted, *map(jnp.asarray, p))[0])

    for i, name in enumerate(("r_h", "Q", "alpha")):
        auto = float(grad_x[i] + grad_v[i])
        for step in (1e-4, 1e-6):
            up = [*p0]
            down = [*p0]
            up[i] += step
            down[i] -= step
            cd = (float(total(*up)) - float(total(*down))) / (2 * step)
            out[f"cd_{name}_{step:g}"] = abs(cd - auto) / abs(auto)
    return out


def build_gradient(n_devices: int) -> dict:
    """`_gradient_figures` of a sharded Plummer build."""
    mesh = sharding.particle_mesh()

    def build(r_h, Q, alpha):
        return progenax.plummer_builder(7, n=3_000 * n_devices, r_h=r_h, Q=Q, alpha=alpha, mesh=mesh).state

    return _gradient_figures(build)


def build_fractal_gradient(n_devices: int) -> dict:
    """`_gradient_figures` of a sharded fractal build (W by the nested mesh
    over the devices, and the radial remap's ring)."""
    mesh = sharding.particle_mesh()

    def build(r_h, Q, alpha):
        return progenax.fractal_builder(7, n=1_000 * n_devices, r_h=r_h, Q=Q, alpha=alpha, mesh=mesh).state

    return _gradient_figures(build)


def build_float32(n_devices: int) -> dict:
    """A sharded build with x64 off: float32 throughout."""
    with jax.enable_x64(False):
        ic = progenax.plummer_builder(8, n=1_000 * n_devices, mesh=sharding.particle_mesh())
        jax.block_until_ready(ic.state)
    finite = bool(jnp.all(jnp.isfinite(ic.state.positions)) & jnp.all(jnp.isfinite(ic.state.velocities)))
    return {"dtype": str(ic.state.positions.dtype), "finite": finite}


CASES = {
    "build": build,
    "build_gravoturb": build_gravoturb,
    "build_fractal": build_fractal,
    "build_gradient": build_gradient,
    "build_fractal_gradient": build_fractal_gradient,
    "build_float32": build_float32,
    "ring_energy": ring_energy,
    "ring_mesh_energy": ring_mesh_energy,
    "lost": lost,
    "open_uneven": open_uneven,
    "periodic_edges": periodic_edges,
    "relax": relax,
    "relax_open": relax_open,
    "float32": float32,
    "three_d": three_d,
    **_fractal_cases.CASES,
}

if __name__ == "__main__":
    n_devices = jax.device_count()
    results = {"devices": n_devices}
    for case in sys.argv[1:]:
        results[case] = CASES[case](n_devices)
    print(json.dumps(results))
