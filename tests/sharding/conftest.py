"""Running `_worker.py` on simulated devices, and the tolerance of its checks.

Each check runs `_worker.py` in a subprocess whose CPU is split into 4 or 8
simulated devices (`progenax.sharding.simulate_cpu_devices`: the device
count, and a collective wait long enough for two loaded cores), in float64; the 4- and 8-device checks are separate
files so that the suite's two workers can run them side by side.

Tolerance: 1e-12 relative to the largest entry. The sharded and one-device
sums add the same pair terms in different orders (other cell grids, halo
particles appended), so they differ by round-off: a few ulp (about 1e-16
each) times the ~20 to 60 terms of a density, measured 1e-16 to 7e-16. A
lost or doubled neighbour changes a density by its whole term (1e-2 or
more), and a gradient summed twice over the mesh is off by a factor D: both
fail by ten orders of magnitude. The 20-step relaxations compound round-off
through the steps (measured 2e-14 to 8e-14 of the largest displacement;
2e-13 with the radial hold, whose Lagrangian radii divide by differences
of neighbouring stars' cumulative mass fractions), still below 1e-12. float32: 1e-5, about 100 ulp of a sum of ~20
positive terms (measured 2e-7).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import warnings

import pytest

from progenax.sharding import simulate_cpu_devices

WORKER = pathlib.Path(__file__).with_name("_worker.py")
TOLERANCE = 1e-12


# The longest worker takes about 100 s beside the rest of the suite on 2 cores.
# A 4-device worker used to hang instead in about one full suite run in three:
# every thread waiting on a futex, no CPU used, XLA reporting an all-reduce
# whose rendezvous one simulated device never joined. gdb showed that
# device's launch blocked on its in-flight computation semaphore
# (`Semaphore::Acquire` in `CpuPjRtRawLoadedExecutable::Execute`) while the
# other devices waited at the collective; faulthandler placed Python in
# `half_mass_radius`, run eagerly on the sharded arrays. A loop of that call
# alone reproduces it (4 processes at once on 2 cores, 3,000 calls each: one
# of the 4 hung, after tens of thousands of eager dispatches). The workers therefore measure sharded results on a
# gathered copy or inside `jax.jit` (`_worker.gathered`). A worker that still
# outlives WORKER_TIMEOUT_S is run once more from the start: a hang, not a
# wrong figure, is what the retry forgives; the worker prints its Python
# stack just before the timeout, and the retry warning shows it. The workers
# also keep out of the run's shared compilation cache.
WORKER_TIMEOUT_S = 450
WORKER_ATTEMPTS = 2


def _run_worker(n_devices: int, *cases: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PROGENAX_TEST_XLA_CACHE", "PROGENAX_COMPILE_CACHE")}
    simulate_cpu_devices(n_devices, env)
    env["JAX_ENABLE_X64"] = "1"
    env["PROGENAX_WORKER_STACK_AFTER_S"] = str(WORKER_TIMEOUT_S - 15)
    command = [sys.executable, str(WORKER), *cases]
    for attempt in range(1, WORKER_ATTEMPTS + 1):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired as hung:
            if attempt == WORKER_ATTEMPTS:
                raise
            stack = (hung.stderr or b"")[-3000:]
            stack = stack.decode(errors="replace") if isinstance(stack, bytes) else stack
            # a warning: pytest lists it in the run's summary although the retry passes
            message = f"sharding worker {cases} hung past {WORKER_TIMEOUT_S} s, run again; its stack:\n{stack}"
            warnings.warn(message, stacklevel=2)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["devices"] == n_devices
    return results


def _assert_equal(figures: dict, prefix: str = "") -> None:
    for name in ("density", "loss", "grad_x", "grad_m", "grad_h"):
        assert figures[prefix + name] < TOLERANCE, (prefix + name, figures)


@pytest.fixture
def run_worker():
    """`run_worker(n_devices, *cases) -> dict` of the worker's figures."""
    return _run_worker


@pytest.fixture
def assert_equal():
    """`assert_equal(figures, prefix="")`: density, loss and gradients below `TOLERANCE`."""
    return _assert_equal


@pytest.fixture
def tolerance():
    return TOLERANCE


def _ks_limit(n: int, alpha: float = 1e-3) -> float:
    r"""Two-sample Kolmogorov-Smirnov limit for two samples of n:
    $c\sqrt{2/n}$, $c = \sqrt{-\ln(\alpha/2)/2}$ (1.95 at $\alpha = 10^{-3}$)."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt(2 / n)


def _check_gradient(gradient: dict) -> None:
    """A sharded build's gradient figures (`_worker._gradient_figures`): the
    exact scalings to round-off (1e-10) and central differences within 1e-6
    (truncation ~1e-8 and round-off ~1e-10 relative)."""
    assert gradient["x_rh"] < 1e-10 and gradient["v_Q"] < 1e-10, gradient
    for name, value in gradient.items():
        if name.startswith("cd_"):
            assert value < 1e-6, (name, gradient)


@pytest.fixture
def ks_limit():
    """`ks_limit(n)`: the two-sample KS distance limit for samples of n."""
    return _ks_limit


@pytest.fixture
def check_gradient():
    """`check_gradient(figures)`: a sharded build's gradient figures."""
    return _check_gradient
