"""The sharded SPH density-loss gradient on several hosts (`jax.distributed`).

On each of P hosts (one process per host, every local GPU a device):

    python docs/scripts/multihost.py --coordinator HOST0:12345 --num-processes P --process-id p

(under SLURM or Open MPI, `jax.distributed.initialize()` finds all three by
itself: pass `--auto`). A rehearsal on one machine, P processes of 2 CPU
devices each, checked against one device at the end:

    python docs/scripts/multihost.py --spawn 2 --check

Each process makes only its own particles (here a strip of a uniform periodic
2D box, one slab per local device, cut by count with `sharding.decompose`) and
hands them to `jax.make_array_from_process_local_data`: no host ever holds
the whole set. `hops` and `halo` are static, so they are set here from the
expected halo of a uniform box rather than measured (`sharding.measure_halo`
needs the data on one host).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys

NEIGHBOURS = 20  # particles inside the kernel support, on average


def spawn(args) -> None:
    """Start `args.spawn` processes of this script on this machine."""
    from progenax.sharding import simulate_cpu_devices

    env = dict(os.environ)
    simulate_cpu_devices(2, env)
    env["JAX_PLATFORMS"] = "cpu"
    common = [sys.executable, __file__, "--coordinator", "localhost:12355", "--num-processes", str(args.spawn)]
    common += ["--n-per-device", str(args.n_per_device)] + (["--check"] if args.check else [])
    children = [subprocess.Popen(common + ["--process-id", str(p)], env=env) for p in range(args.spawn)]
    sys.exit(max(child.wait() for child in children))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coordinator", default=None, help="host:port of process 0")
    parser.add_argument("--num-processes", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=None)
    parser.add_argument("--auto", action="store_true", help="let jax.distributed find the cluster (SLURM, MPI)")
    parser.add_argument("--n-per-device", type=int, default=20_000)
    parser.add_argument("--spawn", type=int, default=0, help="rehearse with this many local processes")
    parser.add_argument("--check", action="store_true", help="compare with one device (small N only)")
    args = parser.parse_args()
    if args.spawn:
        spawn(args)

    import jax  # after the environment is set (device count, platform)

    jax.config.update("jax_enable_x64", True)
    if args.auto:
        jax.distributed.initialize()
    else:
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from progenax import sharding, sph

    # One mesh axis over every device of every process, process by process,
    # so each process's devices hold consecutive slabs.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh = Mesh(np.asarray(devices), ("particles",))
    spec = NamedSharding(mesh, P("particles"))
    n_processes, me = jax.process_count(), jax.process_index()
    local = jax.local_device_count()
    n_local = args.n_per_device * local
    n_total = n_local * n_processes
    length = math.sqrt(n_total)  # unit number density
    h = math.sqrt(NEIGHBOURS / math.pi) / 2.0  # support 2h holds NEIGHBOURS particles
    box = jnp.full(2, length)

    def strip(p):
        """Process p's particles: the strip p/P <= x/L < (p+1)/P."""
        u = jax.random.uniform(jax.random.fold_in(jax.random.PRNGKey(0), p), (n_local, 2))
        return jnp.stack([(p + u[:, 0]) * length / n_processes, u[:, 1] * length], axis=1)

    x_local = strip(me)
    slabs = sharding.decompose(x_local, local, box=box)  # one slab per local device
    rows = [slabs.to_slabs(x_local), slabs.to_slabs(jnp.ones(n_local)), slabs.to_slabs(jnp.full(n_local, h))]
    rows += [slabs.to_slabs(jnp.ones(n_local)), slabs.valid]
    x, m, hs, rho0, valid = (jax.make_array_from_process_local_data(spec, np.asarray(a)) for a in rows)

    # Expected particles within the reach 2h of one slab side, N 2h / L, both
    # sides (two devices: one neighbour on either side), plus 6 sigma.
    mean = 2 * n_total * 2 * h / length
    halo = 8 * math.ceil((mean + 6 * math.sqrt(mean)) / 8)

    def loss(x, m, hs, rho0, valid):  # global arrays are arguments, never closed over
        return sharding.slab_density_loss(x, m, hs, rho0, valid, mesh=mesh, box=length, hops=1, halo=halo)

    value, grad = jax.jit(jax.value_and_grad(loss))(x, m, hs, rho0, valid)
    norm = jax.jit(lambda g: jnp.sum(g * g))(grad)
    value, norm = float(value.addressable_data(0)), float(norm.addressable_data(0))
    if me == 0:
        print(f"{n_processes} processes x {local} devices, N = {n_total}: loss {value:.12e}, |grad|^2 {norm:.12e}")
    if args.check and me == 0:
        everything = jnp.concatenate([strip(p) for p in range(n_processes)])
        one, g = jax.value_and_grad(lambda x: sph.density_loss(x, 1.0, h, 1.0, box=length))(everything)
        one_norm = float(jnp.sum(g * g))
        print(f"one device: loss {float(one):.12e}, |grad|^2 {one_norm:.12e}")
        print(f"relative differences {abs(value / float(one) - 1):.1e}, {abs(norm / one_norm - 1):.1e}")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
