"""A subprocess for tests/io/test_atomic.py: writes clusters, to be killed or limited.

    python _write_worker.py loop DIR FORMAT...   write every format in turn, forever
    python _write_worker.py fsize DIR LIMIT      old files, then big writes past RLIMIT_FSIZE

Both first write the "old" version (0, a few stars) of every target and print
"ready". `loop` then writes versions 1, 2, 1, 2, ... of the big cluster until it
is killed; `fsize` sets the file-size limit to LIMIT bytes, tries one big write
per format and prints a JSON line {format: the error it raised}. The fake AMUSE
of conftest.py stands in for AMUSE (not a dependency). Clusters are in Henon
units, so writing them needs no potential energy (an O(N^2) sum at this N).
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import conftest  # noqa: E402  (the fake AMUSE package)

sys.modules.update(conftest._fake_amuse_modules())

import progenax.io as pio  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import henon_units  # noqa: E402

jax.config.update("jax_enable_x64", True)

TARGETS = {
    "hdf5": "cluster.h5",
    "npz": "cluster.npz",
    "gadget": "snap.hdf5",
    "nbody6": "fort.10",
    "csv": "stars.csv",
    "amuse": "set.amuse",
}
N_OLD = 64


def version(k: int, n: int) -> InitialConditions:
    """Cluster number k of n stars, in Henon units (k = 0: the old file)."""
    rng = np.random.default_rng(k)
    state = ParticleState(
        jnp.asarray(rng.standard_normal((n, 3))),
        jnp.asarray(rng.standard_normal((n, 3))),
        jnp.asarray(rng.uniform(0.5, 1.5, n) / n),
    )
    units = henon_units(jnp.asarray(1000.0 + k), jnp.asarray(1.0 + k))
    return InitialConditions(state, jnp.ones(n), "plummer", {"version": jnp.asarray(k)}, units)


def write(ic, directory: Path, fmt: str) -> None:
    pio.write(ic, directory / TARGETS[fmt], format=fmt)


def main(mode: str, directory: str, *rest: str) -> None:
    directory = Path(directory)
    for fmt in TARGETS:
        write(version(0, N_OLD), directory, fmt)
    if mode == "loop":
        big = {k: version(k, int(rest[0])) for k in (1, 2)}
        formats = rest[1:]
        print("ready", flush=True)
        k = 1
        while True:
            for fmt in formats:
                write(big[k], directory, fmt)
            k = 3 - k
    elif mode == "fsize":
        big = version(1, 20_000)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(rest[0]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        print("ready", flush=True)
        errors = {}
        for fmt in TARGETS:
            try:
                write(big, directory, fmt)
                errors[fmt] = None
            except (OSError, RuntimeError) as err:
                errors[fmt] = f"{type(err).__name__}: {err}"
        print(json.dumps(errors), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
