"""The box fractal and its radial remap over a device mesh against one device.

Cases for `_worker.py` (run in a subprocess with XLA_FLAGS forcing 4 or 8
host devices and JAX_ENABLE_X64=1); each returns JSON-able figures.

- `fractal_share`: `box_fractal_share` gives n / D rows per device and, tree
  slot numbers and seeds being those of the whole tree, the stars of
  `box_fractal` bit for bit (on a one-device mesh and on the whole mesh).
- `fractal_overflow`: the same with a device's array forced far too small,
  so that an overflow ends the growth early on every key (the path that a
  real build takes with a device holding twice its share, never seen):
  exactly n / D rows and n distinct stars. Its statistics against one device
  (KS distances of the radii and speeds, fraction inside the unit sphere,
  mean neighbour count) are returned for information: stopped generations
  early with fewer candidates than n inside the sphere, it is not the
  one-device cluster, and the test asserts nothing about them.
- `remap_share`: `remap_to_plummer_share` against `remap_to_plummer` on the
  same stars, and their gradients in r_h and the masses.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from scipy.spatial import cKDTree

from progenax.sharding import particle_mesh
from progenax.structure import fractal
from progenax.structure.fractal import box_fractal, box_fractal_share, remap_to_plummer, remap_to_plummer_share

N = 20_000  # stars: a multiple of 4 and 8
DIMENSIONS = (1.6, 2.6)
KEYS = (0, 1, 2)
NEIGHBOUR_RADIUS = 0.02  # in units of the cube's half-side: a few of the last generations' cells
KS_ALPHA = 1e-3
"""Two-sample KS limit at this false-alarm rate: sqrt(-ln(alpha / 2) / 2) sqrt(2 / n) = 0.028 for n = 20,000
stars a side. The stars of one fractal are not independent (a clump moves together), so the limit is a
floor for a healthy build, not a test of its own: the clumpiness below is compared with its spread over keys."""


def _rows(mesh):
    """`box_fractal_share` on `mesh` for (key, n, D): jitted, n / D rows a device."""
    axis, n_devices = mesh.axis_names[0], mesh.devices.size

    @functools.cache
    def jitted(n, D):  # one trace and compile per (n, D), not one per key
        share = lambda k: box_fractal_share(k, n, D, axis, n_devices)  # noqa: E731
        return jax.jit(jax.shard_map(share, mesh=mesh, in_specs=P(), out_specs=P(axis)))

    def build(key, n, D):
        return jitted(n, D)(key)

    return build


def _largest_difference(build, keys=KEYS, dimensions=DIMENSIONS, n=N) -> float:
    """Largest |difference| of positions and velocities from `box_fractal`'s over keys and D."""
    worst = 0.0
    for D in dimensions:
        one = jax.jit(lambda k, D=D: box_fractal(k, n, D))
        for k in keys:
            got, want = build(jax.random.PRNGKey(k), n, D), one(jax.random.PRNGKey(k))
            worst = max(worst, *(float(jnp.max(jnp.abs(a - b))) for a, b in zip(got, want)))
    return worst


def fractal_share(n_devices: int) -> dict:
    """Rows per device; largest difference from `box_fractal` on a one-device mesh and on all devices."""
    mesh = particle_mesh()
    x, _ = _rows(mesh)(jax.random.PRNGKey(0), N, 1.6)
    return {
        "rows_per_device": sorted({s.data.shape[0] for s in x.addressable_shards}),
        "expected_rows": N // n_devices,
        "one_device_mesh": _largest_difference(_rows(particle_mesh(jax.devices()[:1])), keys=(0,)),
        "mesh": _largest_difference(_rows(mesh)),
        "small_n": _largest_difference(_rows(mesh), keys=tuple(range(12)), dimensions=(1.6,), n=8 * n_devices),
    }


def _ks(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov distance."""
    grid = np.sort(np.concatenate([a, b]))
    return float(
        np.max(
            np.abs(
                np.searchsorted(np.sort(a), grid, "right") / a.size
                - np.searchsorted(np.sort(b), grid, "right") / b.size
            )
        )
    )


def _figures(x, v) -> dict:
    """Radii about the centroid, speeds, the fraction inside the unit sphere and the
    mean number of neighbours within `NEIGHBOUR_RADIUS` (grows fast as D falls)."""
    x, v = np.asarray(x), np.asarray(v)
    pairs = cKDTree(x).count_neighbors(cKDTree(x), NEIGHBOUR_RADIUS) - len(x)
    return {
        "r": np.linalg.norm(x - x.mean(axis=0), axis=1),
        "speed": np.linalg.norm(v - v.mean(axis=0), axis=1),
        "inside": float(np.mean(np.sum(x**2, axis=1) <= 1.0)),
        "neighbours": pairs / len(x),
        "distinct": len(np.unique(x, axis=0)),
    }


def _compare(build, n_devices: int, keys=tuple(range(6))) -> dict:
    """Statistics of `build` against `box_fractal`'s over `keys` for each D: the
    largest KS distances (key by key), the largest difference of the inside
    fraction, and the mean neighbour count's shift over its spread across keys."""
    out = {}
    for D in DIMENSIONS:
        one = jax.jit(lambda k, D=D: box_fractal(k, N, D))
        a = [_figures(*build(jax.random.PRNGKey(k), N, D)) for k in keys]
        b = [_figures(*one(jax.random.PRNGKey(k))) for k in keys]
        spread = np.std([f["neighbours"] for f in b], ddof=1)
        out[f"D={D}"] = {
            "ks_r": max(_ks(p["r"], q["r"]) for p, q in zip(a, b)),
            "ks_speed": max(_ks(p["speed"], q["speed"]) for p, q in zip(a, b)),
            "inside": max(abs(p["inside"] - q["inside"]) for p, q in zip(a, b)),
            "neighbours_mesh": float(np.mean([f["neighbours"] for f in a])),
            "neighbours_one": float(np.mean([f["neighbours"] for f in b])),
            "neighbours_shift_over_spread": float(
                abs(np.mean([f["neighbours"] for f in a]) - np.mean([f["neighbours"] for f in b])) / spread
            ),
            "fewest_distinct": min(f["distinct"] for f in a),
        }
    out["ks_limit"] = math.sqrt(-math.log(KS_ALPHA / 2) / 2) * math.sqrt(2 / N)
    return out


def fractal_overflow(n_devices: int) -> dict:
    """The overflow path, forced: a device's array holds an eighth of its
    usual slots, so every key's growth stops early. Rows per device, the
    fewest distinct stars, and statistics against one device (`_compare`)."""
    original = fractal._device_slots
    fractal._device_slots = lambda target, d: max(original(target, d) // 8, fractal.TOP_CELLS_PER_DEVICE)
    try:
        build = _rows(particle_mesh())
        x, _ = build(jax.random.PRNGKey(0), N, 1.6)
        rows = sorted({s.data.shape[0] for s in x.addressable_shards})
        return {"rows_per_device": rows, "n": N, **_compare(build, n_devices)}
    finally:
        fractal._device_slots = original


def _masses(n: int):
    return jnp.exp(jax.random.normal(jax.random.PRNGKey(7), (n,)))  # log-normal, a spread like an IMF's


def remap_share(n_devices: int) -> dict:
    """`remap_to_plummer_share` against `remap_to_plummer` on the stars of one
    D = 1.6 fractal split into shares: positions and the gradients in r_h and
    the masses of a loss of them, largest difference over the largest entry
    (the same sums in another order; see `test_builders.remap_tolerance`)."""
    mesh = particle_mesh()
    axis = mesh.axis_names[0]
    x, _ = box_fractal(jax.random.PRNGKey(3), N, 1.6)
    weights = jax.random.normal(jax.random.PRNGKey(8), x.shape)
    share = jax.shard_map(
        lambda x, m, r_h: remap_to_plummer_share(x, m, r_h, axis, n_devices),
        mesh=mesh,
        in_specs=(P(axis), P(axis), P()),
        out_specs=P(axis),
    )

    def loss(remap):  # x an argument: as a constant, XLA would fold the remap's sort while compiling
        return jax.jit(jax.value_and_grad(lambda m, r_h, x: jnp.sum(weights * jnp.tanh(remap(x, m, r_h))), (0, 1)))

    m, r_h = _masses(N), jnp.asarray(1.3)
    one = jax.jit(remap_to_plummer)(x, m, r_h)
    got = jax.jit(share)(x, m, r_h)
    (loss1, (gm1, gr1)), (loss_, (gm, gr)) = loss(remap_to_plummer)(m, r_h, x), loss(share)(m, r_h, x)
    rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))  # noqa: E731
    outermost = jnp.argmax(jnp.sum((x - jnp.mean(x, axis=0)) ** 2, axis=-1))
    return {
        "positions": rel(got, one),
        "loss": rel(loss_, loss1),
        "grad_masses": rel(gm, gm1),
        "grad_r_h": rel(gr, gr1),
        "conditioning": float(jnp.sum(m) / m[outermost]),
    }


CASES = {"fractal_share": fractal_share, "fractal_overflow": fractal_overflow, "remap_share": remap_share}
