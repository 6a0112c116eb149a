"""`sharding.simulate_cpu_devices`: the flags it writes and when it refuses."""

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
def test_rejects_a_bad_count(bad):
    with pytest.raises(ValueError, match="n_devices"):
        simulate_cpu_devices(bad, {})


def test_refuses_this_process_once_its_backend_has_started():
    jax.devices()
    with pytest.raises(RuntimeError, match="before any array"):
        simulate_cpu_devices(2)
