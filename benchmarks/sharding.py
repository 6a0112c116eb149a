"""Weak scaling of the sharded density-loss gradient, and its memory per device.

    python benchmarks/sharding.py                       # 1, 2, 4, 8 simulated devices
    python benchmarks/sharding.py --per-device 50000 --memory-n 4000000

For each device count D a subprocess splits the CPU into D simulated devices
(`progenax.sharding.simulate_cpu_devices`, set before jax starts) and, on a
uniform periodic 2D box at fixed particles per device (about 20 neighbours
each), compiles `jax.jit(jax.grad(sharding.slab_density_loss))`, runs it, and
prints its wall time and XLA's memory analysis of the compiled program (one
device's: arguments, outputs and temporaries). Beside the run, the same
gradient at `--memory-n` particles in total is only compiled (no buffers are
allocated), for the memory per device as a function of N and D.

Simulated devices share this machine's cores, so wall time at fixed N per
device grows with D here; on real devices (one per GPU, or hosts) it is the
per-device time plus the halo exchange. The figures this prints are in
docs/scaling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

NEIGHBOURS = 20  # particles inside the kernel support 2h, on average


def _child(n_devices: int, per_device: int, memory_n: int, repeats: int, build_n: int) -> dict:
    import jax  # after XLA_FLAGS is set: the device count is read at start-up

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from progenax import sharding

    mesh = sharding.particle_mesh()
    spec = NamedSharding(mesh, P(mesh.axis_names[0]))

    def problem(n, seed=0):
        length = float(np.sqrt(n))  # unit number density
        h = float(np.sqrt(NEIGHBOURS / np.pi)) / 2.0
        x = jax.random.uniform(jax.random.PRNGKey(seed), (n, 2), minval=0.0, maxval=length)
        slabs = sharding.decompose(x, n_devices, box=jnp.full(2, length))
        layout = [slabs.to_slabs(x), slabs.to_slabs(jnp.ones(n)), slabs.to_slabs(jnp.full(n, h))]
        layout += [slabs.to_slabs(jnp.ones(n)), slabs.valid]
        return [jax.device_put(a, spec) for a in layout], length

    def gradient(length, hops, halo):
        def loss(x, m, h, rho0, valid):
            options = dict(mesh=mesh, box=length, hops=hops, halo=halo)
            return sharding.slab_density_loss(x, m, h, rho0, valid, **options)

        return jax.jit(jax.grad(loss))

    def memory(compiled) -> dict:
        stats = compiled.memory_analysis()
        parts = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
        out = {k: int(getattr(stats, k)) for k in parts}
        out["total_bytes"] = sum(out.values())
        return out

    out = {"devices": n_devices}
    if build_n:
        out["build"] = _build(mesh, n_devices, build_n, memory)
    if per_device:
        layout, length = problem(per_device * n_devices)
        hops, halo = sharding.measure_halo(layout[0], layout[2], layout[4], mesh=mesh, box=length)
        fn = gradient(length, hops, halo)
        start = time.perf_counter()
        compiled = fn.lower(*layout).compile()
        out["compile_s"] = time.perf_counter() - start
        jax.block_until_ready(compiled(*layout))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(compiled(*layout))
            times.append(time.perf_counter() - start)
        out.update(n=per_device * n_devices, hops=hops, halo=halo, run_s=min(times), memory=memory(compiled))
    if memory_n:
        layout, length = problem(memory_n, seed=1)
        hops, halo = sharding.measure_halo(layout[0], layout[2], layout[4], mesh=mesh, box=length)
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=spec) for a in layout]
        del layout
        compiled = gradient(length, hops, halo).lower(*shapes).compile()
        out["big"] = {"n": memory_n, "hops": hops, "halo": halo, "memory": memory(compiled)}
    return out


def _build(mesh, n_devices: int, n: int, memory) -> dict:
    """Compile and run one Plummer build of n stars over the mesh (plain on one device)."""
    import resource

    import jax

    import progenax

    on_mesh = mesh if n_devices > 1 else None
    build = jax.jit(lambda key: progenax.plummer_builder(key, n=n, mesh=on_mesh).state)
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    compiled = build.lower(key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    state = jax.block_until_ready(compiled(key))
    run_s = time.perf_counter() - start
    rows = sorted({shard.data.shape[0] for shard in state.positions.addressable_shards})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"n": n, "compile_s": compile_s, "run_s": run_s, "rows": rows, "memory": memory(compiled), "peak": peak}


def _run(n_devices: int, args) -> dict:
    env = dict(os.environ)
    from progenax.sharding import simulate_cpu_devices

    simulate_cpu_devices(n_devices, env)
    command = [sys.executable, __file__, "--child", str(n_devices), "--per-device", str(args.per_device)]
    command += ["--memory-n", str(args.memory_n), "--repeats", str(args.repeats), "--build", str(args.build)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--per-device", type=int, default=20_000, help="particles per device (0: skip the runs)")
    parser.add_argument("--memory-n", type=int, default=4_000_000, help="total N compiled for memory (0: skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build", type=int, default=0, help="stars of a sharded Plummer build (0: skip)")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.per_device, args.memory_n, args.repeats, args.build)))
        return
    rows = [_run(d, args) for d in args.devices]
    mib = 2.0**20
    if args.build:
        print(f"Plummer build of {args.build:.3g} stars, float64 (D = 1: the plain builder)")
        print(f"{'D':>3} {'rows/device':>11} {'compile s':>9} {'run s':>7} {'MiB/device':>10} {'peak RSS GiB':>12}")
        for r in rows:
            b = r["build"]
            line = f"{r['devices']:>3} {b['rows'][0]:>11} {b['compile_s']:>9.2f} {b['run_s']:>7.2f}"
            print(f"{line} {b['memory']['total_bytes'] / mib:>10.1f} {b['peak'] / 2**30:>12.2f}")
    if args.per_device:
        print(f"weak scaling, {args.per_device} particles per device, 2D periodic, float64, gradient of the loss")
        print(f"{'D':>3} {'N':>9} {'hops':>4} {'halo':>6} {'compile s':>9} {'run s':>7} {'MiB/device':>10}")
        for r in rows:
            mem = r["memory"]["total_bytes"] / mib
            line = f"{r['devices']:>3} {r['n']:>9} {r['hops']:>4} {r['halo']:>6} {r['compile_s']:>9.2f}"
            print(f"{line} {r['run_s']:>7.3f} {mem:>10.1f}")
    if args.memory_n:
        base = rows[0]["big"]["memory"]["total_bytes"] * rows[0]["devices"]
        print(f"\nmemory per device at N = {args.memory_n:.3g} (2D, float64), compiled only")
        print(f"{'D':>3} {'halo':>6} {'args MiB':>9} {'temp MiB':>9} {'total MiB':>9} {'x D / first x D1':>16}")
        for r in rows:
            big, mem = r["big"], r["big"]["memory"]
            total = mem["total_bytes"]
            args_mib, temp_mib = mem["argument_size_in_bytes"] / mib, mem["temp_size_in_bytes"] / mib
            ratio = total * r["devices"] / base
            sizes = f"{args_mib:>9.1f} {temp_mib:>9.1f} {total / mib:>9.1f}"
            print(f"{r['devices']:>3} {big['halo']:>6} {sizes} {ratio:>16.3f}")


if __name__ == "__main__":
    main()
