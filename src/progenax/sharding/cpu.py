"""Simulated devices on one CPU: `simulate_cpu_devices`.

XLA can split one CPU into D devices (`--xla_force_host_platform_device_count`),
which is how a mesh is tried out, tested and timed without accelerators. Its
collectives (`psum`, `all_gather`, `ppermute`) then meet in one process: each
device's thread waits at a collective until all D have arrived, and XLA aborts
the whole process (SIGABRT, "Termination timeout ... of 40 seconds exceeded")
when one arrives more than `xla_cpu_collective_call_terminate_timeout_seconds`
(40 s by default) after the first. On a machine with fewer cores than devices,
or shared with other work, one device's part of a large program can lag that
much (a sharded fractal build on 4 devices, beside a test run, on 2 cores).
`simulate_cpu_devices` asks for the devices and raises that limit.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping

COLLECTIVE_TIMEOUT_S = 3600
"""How long (s) a simulated device may wait at a collective for the others
before XLA aborts the process (`simulate_cpu_devices`)."""

_FLAG_NAMES = ("xla_force_host_platform_device_count", "xla_cpu_collective_call_terminate_timeout_seconds")
_TIMEOUT_FLAG_SINCE = (0, 10)
"""The first jaxlib known here to take the timeout flag (0.10.2 was checked); an
XLA that does not know a flag in XLA_FLAGS aborts at start-up, so an older one
gets the device count alone."""


def _jaxlib_takes_the_timeout() -> bool:
    import jaxlib

    major_minor = tuple(int(part) for part in re.findall(r"\d+", jaxlib.__version__)[:2])
    return major_minor >= _TIMEOUT_FLAG_SINCE


def simulate_cpu_devices(
    n_devices: int, environ: MutableMapping[str, str] | None = None, *, collective_timeout_s: int = COLLECTIVE_TIMEOUT_S
) -> None:
    """Split the CPU into `n_devices` XLA devices, set in `XLA_FLAGS` of `environ`
    (default `os.environ`; a dict for a subprocess's environment).

    Sets `--xla_force_host_platform_device_count` and raises the time a device
    may wait at a collective (`collective_timeout_s`, module notes; with jaxlib
    0.10 or later, the first known to take that flag); other flags
    in `XLA_FLAGS` are kept, earlier values of these two replaced. In this
    process it works only before JAX's backends start (the first array or
    `jax.devices()`: `RuntimeError` after); `import progenax` starts none.

    ```python
    from progenax import sharding

    sharding.simulate_cpu_devices(8)  # before any array is made
    mesh = sharding.particle_mesh()  # over the 8 devices
    ```
    """
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
        raise ValueError(f"n_devices must be a positive int, got {n_devices!r}")
    if isinstance(collective_timeout_s, bool) or not isinstance(collective_timeout_s, int) or collective_timeout_s < 1:
        raise ValueError(f"collective_timeout_s must be a positive int, got {collective_timeout_s!r}")
    if environ is None:
        from jax._src import xla_bridge  # no public test of whether the backends started

        if xla_bridge.backends_are_initialized():
            raise RuntimeError("simulate_cpu_devices: JAX's backends have started; call it before any array is made")
        environ = os.environ
    kept = [flag for flag in environ.get("XLA_FLAGS", "").split() if flag.lstrip("-").split("=")[0] not in _FLAG_NAMES]
    ours = [f"--{_FLAG_NAMES[0]}={n_devices}"]
    if _jaxlib_takes_the_timeout():
        ours.append(f"--{_FLAG_NAMES[1]}={collective_timeout_s}")
    environ["XLA_FLAGS"] = " ".join(kept + ours)
