"""Build time of Plummer + Kroupa IMF + virial scaling, against a NumPy reference.

progenax: compile time (lower + compile, once per n) and build time after compile
(median of repeats). Reference: the classic NumPy recipe that AMUSE's
`new_plummer_model` and McLuster follow (radii by inverting M(r), speeds by von
Neumann rejection from the Plummer DF, Kroupa masses by inverse CDF, virial
scaling with the same spherical potential estimate). Both run on this machine's
CPU in float64.

King rows (no reference): `solve_king_profile` after compile (target <= 20 ms)
and `king_builder` (W0 = 6, Kroupa IMF, equilibrium velocities) after compile
(target <= 2 s at n = 1e6), with the unscaled Q of the built cluster.

    python benchmarks/builders.py [--sizes 10000 100000 1000000] [--repeats 5]
    python benchmarks/builders.py --plummer-only [--sizes 1000000] [--repeats 15]
    python benchmarks/builders.py --king-only [--king-sizes 100000 1000000]
    python benchmarks/builders.py --fractal-only [--fractal-sizes 100000 1000000]
    python benchmarks/builders.py --every-builder [--every-sizes 10000 100000]
    python benchmarks/builders.py --binaries [--sizes 100000 1000000]

Every-builder rows: each exported builder in its common settings called as a
user calls it, eagerly: the compile time (its first call less a later one:
tracing and XLA's compile), the build time (median of later calls), and the
same for the eager `jax.grad` of a scalar of every output (the masses' second
moments of positions and velocities) in its main continuous parameters.
Through the public API only, so the same script times another checkout side
by side (`PYTHONPATH=/path/to/other/src python benchmarks/builders.py
--every-builder`).

Fractal rows (no reference): `fractal_builder` (D = 1.6, Q = 0.5) after compile,
which above 20,000 stars scales Q with the nested-mesh P3M W; the fractal's own
part (Kroupa masses, `box_fractal`, `remap_to_plummer`); and that W alone
(`potential_energy(method="mesh")`), wall and process (CPU) time, median of
repeats; the machine may be shared, so process time is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import progenax  # noqa: E402
from progenax.diagnostics import virial_ratio  # noqa: E402

G = progenax.G_PHYSICAL


def numpy_reference(rng: np.random.Generator, n: int, r_h: float = 1.0, q_target: float = 0.5):
    """Plummer + Kroupa + virial scaling in plain NumPy (rejection for speeds)."""
    # Kroupa (2001) masses: two segments, inverse CDF per segment.
    a1, a2, m0, mb, m1 = 1.3, 2.3, 0.08, 0.5, 100.0
    n1 = (mb ** (1 - a1) - m0 ** (1 - a1)) / (1 - a1)
    n2 = mb ** (a2 - a1) * (m1 ** (1 - a2) - mb ** (1 - a2)) / (1 - a2)
    u = rng.random(n)
    low = u < n1 / (n1 + n2)
    v = np.where(low, u * (n1 + n2) / n1, (u * (n1 + n2) - n1) / n2)
    masses = np.where(
        low,
        (m0 ** (1 - a1) + v * (mb ** (1 - a1) - m0 ** (1 - a1))) ** (1 / (1 - a1)),
        (mb ** (1 - a2) + v * (m1 ** (1 - a2) - mb ** (1 - a2))) ** (1 / (1 - a2)),
    )
    a = r_h * np.sqrt(2 ** (2 / 3) - 1)
    r = a / np.sqrt(rng.random(n) ** (-2 / 3) - 1)
    # Von Neumann rejection for q = v / v_esc with g(q) = q^2 (1 - q^2)^3.5 <= 0.1.
    q = np.empty(n)
    todo = np.arange(n)
    while todo.size:
        x, y = rng.random(todo.size), 0.1 * rng.random(todo.size)
        ok = y < x**2 * (1 - x**2) ** 3.5
        q[todo[ok]] = x[ok]
        todo = todo[~ok]

    def directions():
        c = rng.uniform(-1, 1, n)
        p = rng.uniform(0, 2 * np.pi, n)
        s = np.sqrt(1 - c**2)
        return np.stack([s * np.cos(p), s * np.sin(p), c], 1)

    mtot = masses.sum()
    pos = r[:, None] * directions()
    vel = (q * np.sqrt(2 * G * mtot / np.sqrt(r**2 + a**2)))[:, None] * directions()
    pos -= (masses[:, None] * pos).sum(0) / mtot
    vel -= (masses[:, None] * vel).sum(0) / mtot
    rr = np.linalg.norm(pos, axis=1)
    order = np.argsort(rr)
    inside = np.cumsum(masses[order]) - masses[order]
    w = -G * np.sum(masses[order] * inside / rr[order])
    t = 0.5 * np.sum(masses * np.sum(vel**2, 1))
    vel *= np.sqrt(q_target * abs(w) / t)
    return pos, vel, masses


def compile_and_time(build, repeats: int):
    """(compile time, median build time after compile, last output) of the state
    builder `build(key)`: lower + compile once, then `repeats` keyed calls."""
    build = jax.jit(build)
    t0 = time.perf_counter()
    compiled = build.lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(compiled(jax.random.PRNGKey(i + 1)))
        times.append(time.perf_counter() - t0)
    return compile_s, statistics.median(times), state


def plummer_row(n: int, repeats: int) -> tuple[float, float, float, float, float]:
    """(compile s, median progenax build s, median NumPy s, median of the
    per-round ratios, built Q) for Plummer + Kroupa + Q = 0.5 at n stars.

    The two run in alternation, one call of each per round, so that a shared
    machine's changing speed weighs on both alike: the ratio of each round is
    taken before the median."""
    build = jax.jit(lambda key: progenax.plummer_builder(key, n=n, r_h=1.0, alpha=2.3, Q=0.5).state)
    t0 = time.perf_counter()
    compiled = build.lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t0
    ours, theirs = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(compiled(jax.random.PRNGKey(i + 1)))
        ours.append(time.perf_counter() - t0)
        rng = np.random.default_rng(i)
        t0 = time.perf_counter()
        numpy_reference(rng, n)
        theirs.append(time.perf_counter() - t0)
    ratio = statistics.median(b / a for a, b in zip(ours, theirs))
    # Spherical W (what the builder scales with above 20,000 stars; "auto" would
    # take the slower mesh estimate meant for substructured clusters).
    method = "exact" if n <= progenax.diagnostics.EXACT_MAX_N else "spherical"
    q = float(virial_ratio(state.positions, state.velocities, state.masses, method=method))
    return compile_s, statistics.median(ours), statistics.median(theirs), ratio, q


def plummer_rows(sizes: list[int], repeats: int) -> None:
    print(f"{'n':>9} {'compile [s]':>12} {'progenax [s]':>13} {'numpy ref [s]':>14} {'ratio':>7} {'Q built':>8}")
    for n in sizes:
        compile_s, build_s, ref_s, ratio, q = plummer_row(n, repeats)
        print(f"{n:>9} {compile_s:>12.2f} {build_s:>13.3f} {ref_s:>14.3f} {ratio:>7.2f} {q:>8.4f}")
    print("ratio = numpy time / progenax time (above 1: progenax faster), the median of the")
    print("rounds' ratios: each round times one progenax build and then one NumPy build.")
    print("Up to n = 20,000 progenax scales Q with the exact pairwise W (O(n^2));")
    print("the NumPy reference always uses the O(n log n) spherical estimate.")


def time_king_solve(repeats: int) -> tuple[float, float]:
    """Compile time and median time of solve_king_profile(W0, g=1), W0 varied."""
    solve = jax.jit(lambda w: progenax.solve_king_profile(w, 1.0))
    t0 = time.perf_counter()
    compiled = solve.lower(6.0).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(max(repeats, 10)):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(6.0 + 0.01 * i))
        times.append(time.perf_counter() - t0)
    return compile_s, statistics.median(times)


def time_king_builder(n: int, repeats: int) -> tuple[float, float, float]:
    build = lambda key: progenax.king_builder(key, n=n, W0=6.0, r_h=1.0).state
    compile_s, build_s, state = compile_and_time(build, repeats)
    origin = jax.numpy.zeros(3)
    q = float(virial_ratio(state.positions, state.velocities, state.masses, method="spherical", centre=origin))
    return compile_s, build_s, q


def king_rows(sizes: list[int], repeats: int) -> None:
    compile_s, solve_s = time_king_solve(repeats)
    print(
        f"King solve_king_profile (1024 nodes): compile {compile_s:.2f} s, after compile "
        f"{1e3 * solve_s:.1f} ms (target <= 20 ms)"
    )
    print(f"{'n':>9} {'compile [s]':>12} {'king [s]':>9} {'Q (no rescale)':>15}   target <= 2 s at n = 1e6")
    for n in sizes:
        compile_s, build_s, q = time_king_builder(n, repeats)
        print(f"{n:>9} {compile_s:>12.2f} {build_s:>9.3f} {q:>15.4f}")


def _timed(fn, repeats):
    """Median wall and process time of fn(i) over repeats (after a warm-up)."""
    jax.block_until_ready(fn(0))
    wall, cpu = [], []
    for i in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(i + 1))
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def fractal_rows(sizes: list[int], repeats: int) -> None:
    from progenax.builders._common import sample_masses
    from progenax.diagnostics import potential_energy
    from progenax.structure.fractal import box_fractal, remap_to_plummer

    fractal_builder = progenax.fractal_builder
    print(
        f"{'n':>9} {'fractal wall [s]':>17} {'cpu [s]':>8} {'box+remap wall [s]':>19} {'mesh W wall [s]':>16}"
        f" {'cpu [s]':>8} {'W mesh/spherical':>17}"
    )
    for n in sizes:
        build = jax.jit(lambda key: fractal_builder(key, n=n, D=1.6, Q=0.5).state)
        b_wall, b_cpu = _timed(lambda i: build(jax.random.PRNGKey(i)), repeats)
        s = build(jax.random.PRNGKey(0))

        # The fractal's own part: masses, box fractal and radial remap (no W).
        @jax.jit
        def positions(key):
            k_m, k_f, _ = jax.random.split(key, 3)
            masses = sample_masses(k_m, n, "kroupa", jnp.asarray(2.3))
            return remap_to_plummer(box_fractal(k_f, n, 1.6)[0], masses, jnp.asarray(1.0))

        p_wall, _ = _timed(lambda i: positions(jax.random.PRNGKey(i)), repeats)
        w = jax.jit(lambda x, m: potential_energy(x, m, method="mesh"))
        m_wall, m_cpu = _timed(lambda i: w(s.positions, s.masses), repeats)
        ratio = float(w(s.positions, s.masses) / potential_energy(s.positions, s.masses, method="spherical"))
        print(
            f"{n:>9} {b_wall:>17.2f} {b_cpu:>8.2f} {p_wall:>19.2f} {m_wall:>16.2f} {m_cpu:>8.2f} {ratio:>17.3f}",
            flush=True,
        )


EVERY_BUILDER = {
    "plummer": (lambda key, n, **p: progenax.plummer_builder(key, n=n, **p), {"r_h": 1.0, "Q": 0.5}),
    "eff": (lambda key, n, **p: progenax.eff_builder(key, n=n, **p), {"gamma": 3.0, "Q": 0.5}),
    "eff r_t": (lambda key, n, **p: progenax.eff_builder(key, n=n, r_t=10.0, **p), {"gamma": 2.5, "Q": 0.5}),
    "king": (lambda key, n, **p: progenax.king_builder(key, n=n, **p), {"W0": 6.0, "Q": 0.5}),
    "limepy ra": (lambda key, n, **p: progenax.limepy_builder(key, n=n, W0=5.0, **p), {"g": 1.5, "ra": 8.0}),
    "king mass_bins": (lambda key, n, **p: progenax.king_builder(key, n=n, mass_bins=4, **p), {"W0": 5.0}),
    "fractal": (lambda key, n, **p: progenax.fractal_builder(key, n=n, **p), {"D": 2.0, "Q": 0.5}),
    "gravoturb stars": (lambda key, n, **p: progenax.gravoturb.star_builder(key, n=n, grid=32, **p), {"Q": 0.5}),
    "gravoturb gas": (lambda key, n, **p: progenax.gravoturb.cloud_builder(key, n=n, grid=32, **p), {"mach": 5.0}),
}
"""Name -> (builder(key, n, **parameters), the parameters the gradient rows
differentiate, at these values)."""


def _observable(state) -> jax.Array:
    """A scalar of every output: the masses' second moments of x and v."""
    return jnp.sum(state.masses * (jnp.sum(state.positions**2, 1) + jnp.sum(state.velocities**2, 1)))


def _first_and_later(call, repeats: int) -> tuple[float, float]:
    """Wall time of the first call (trace, compile and run) and the median of
    `repeats` later ones, each with a new key."""
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        jax.block_until_ready(call(jax.random.PRNGKey(i)))
        times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times[1:])


def every_builder_rows(sizes: list[int], repeats: int) -> None:
    """Each builder as a user calls it: its first call and its first gradient,
    both eager (compile = first call - a later call), and its build time."""
    print(
        f"{'builder':<16} {'n':>8} {'compile [s]':>12} {'build [s]':>10} {'grad compile [s]':>17}"
        f" {'grad [s]':>9}  gradient in"
    )
    for name, (make, params) in EVERY_BUILDER.items():
        for n in sizes:
            if name == "fractal" and n > 20_000:
                print(f"{name:<16} {n:>8}  (skipped: the mesh W takes ~5 s at 1e5; see --fractal-only)")
                continue
            first, later = _first_and_later(lambda key, make=make, n=n: make(key, n, **params).state, repeats)
            values = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
            grad = jax.grad(lambda p, key, make=make, n=n: _observable(make(key, n, **p).state))
            g_first, g_later = _first_and_later(lambda key, grad=grad: grad(values, key), repeats)
            print(
                f"{name:<16} {n:>8} {first - later:>12.2f} {later:>10.3f} {g_first - g_later:>17.2f}"
                f" {g_later:>9.3f}  {', '.join(params)}",
                flush=True,
            )


def binary_rows(sizes: list[int], repeats: int) -> None:
    """Plummer systems with and without binaries (fraction 1, Kroupa 1995 periods,
    thermal eccentricities), side by side: the issue's bound is a ratio <= 1.5."""
    population = progenax.BinaryPopulation(1.0)
    print(f"{'n systems':>10} {'single [s]':>11} {'binaries [s]':>13} {'ratio':>6} {'compile single/binaries [s]':>28}")
    for n in sizes:
        c0, t0, _ = compile_and_time(lambda key, n=n: progenax.plummer_builder(key, n=n).state, repeats)
        c1, t1, _ = compile_and_time(
            lambda key, n=n: progenax.plummer_builder(key, n=n, binaries=population).state, repeats
        )
        print(f"{n:>10} {t0:>11.3f} {t1:>13.3f} {t1 / t0:>6.2f} {c0:>13.2f} / {c1:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--king-sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--king-only", action="store_true", help="only the King rows")
    parser.add_argument("--fractal-sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--fractal-only", action="store_true", help="only the fractal rows")
    parser.add_argument("--every-sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--every-builder", action="store_true", help="compile and build time of every builder")
    parser.add_argument("--binaries", action="store_true", help="Plummer with and without binaries (--sizes)")
    parser.add_argument("--plummer-only", action="store_true", help="only the Plummer rows (--sizes)")
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, float64; median of {args.repeats}")
    if args.king_only:
        king_rows(args.king_sizes, args.repeats)
        return
    if args.fractal_only:
        fractal_rows(args.fractal_sizes, args.repeats)
        return
    if args.binaries:
        binary_rows(args.sizes, args.repeats)
        return
    if args.every_builder:
        print(f"progenax from {progenax.__file__}")
        every_builder_rows(args.every_sizes, args.repeats)
        return
    plummer_rows(args.sizes, args.repeats)
    if args.plummer_only:
        return
    print()
    king_rows(args.king_sizes, args.repeats)
    print()
    fractal_rows(args.fractal_sizes, args.repeats)


if __name__ == "__main__":
    main()
