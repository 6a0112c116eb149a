"""`sharding.simulate_cpu_devices`: the flags it writes and when it refuses."""

import os
import subprocess
import sys

import jax
import pytest

from progenax.sharding import simulate_cpu_devices
from progenax.sharding.cpu import COLLECTIVE_TIMEOUT_S


def test_sets_the_count_and_the_collective_wait_and_keeps_other_flags():
    env = {"XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=2"}
    simulate_cpu_devices(4, env)
    flags = env["XLA_FLAGS"].split()
    assert flags == [
        "--xla_dump_to=/tmp/x",
        "--xla_force_host_platform_device_count=4",
        f"--xla_cpu_collective_call_terminate_timeout_seconds={COLLECTIVE_TIMEOUT_S}",
    ]
    simulate_cpu_devices(8, env, collective_timeout_s=60)  # replaced, not appended
    assert env["XLA_FLAGS"].split()[1:] == [
        "--xla_force_host_platform_device_count=8",
        "--xla_cpu_collective_call_terminate_timeout_seconds=60",
    ]
    empty = {}
    simulate_cpu_devices(1, empty)
    assert empty["XLA_FLAGS"].startswith("--xla_force_host_platform_device_count=1 ")


@pytest.mark.parametrize("bad", [0, -2, 2.0, True])
def test_rejects_a_bad_count_or_timeout(bad):
    with pytest.raises(ValueError, match="n_devices"):
        simulate_cpu_devices(bad, {})
    with pytest.raises(ValueError, match="collective_timeout_s"):
        simulate_cpu_devices(2, {}, collective_timeout_s=bad)


def test_this_xla_takes_the_flags():
    """A fresh process with the flags sees the devices (an XLA that does not
    know a flag aborts at start-up instead)."""
    env = dict(os.environ)
    simulate_cpu_devices(3, env)
    done = subprocess.run(
        [sys.executable, "-c", "import jax; print(jax.device_count())"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "3"


def test_refuses_this_process_once_its_backend_has_started():
    jax.devices()
    with pytest.raises(RuntimeError, match="before any array"):
        simulate_cpu_devices(2)
