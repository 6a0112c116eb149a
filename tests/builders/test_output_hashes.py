"""Every exported builder's output at fixed keys is bit-identical to the recorded one.

The hashes in `tests/data/builder_hashes.json` were recorded before the model
layer moved any code (0.1.0's builders): a refactoring that changes a single bit
of a position, velocity, mass or weight fails here. A deliberate change of
output regenerates the file with

    python tests/builders/test_output_hashes.py --record

and says so in the changelog. The test computes the hashes in a subprocess with
XLA's default flags, as a user's program runs (the suite compiles with faster,
test-only flags: tests/conftest.py); the builders are called eagerly, so they
compile with the library's own run-once options (`progenax._compile`).
The hashes hold for one jax/XLA version and one kind of CPU in float64: XLA
compiles for the host's instruction set (AVX2 or AVX-512, FMA, the vendor's
tuning), which changes the last bit of reductions and transcendentals. So the
file keeps one set of hashes per CPU signature (`cpu_signature()`), `--record`
writes this machine's set beside the others, and a machine with none recorded,
or another jax version, skips rather than fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

import progenax  # noqa: E402

TEST_ONLY_XLA_FLAG_PREFIXES = ("--xla_cpu_use_fusion_emitters", "--xla_backend_optimization_level")
FIXTURE = pathlib.Path(__file__).parent.parent / "data" / "builder_hashes.json"
KEYS = (0, 12345)
N = 300

CASES = {
    "plummer": lambda key: progenax.plummer_builder(key, n=N),
    "plummer_segregated_henon": lambda key: progenax.plummer_builder(
        key, n=N, r_h=0.8, Q=0.4, segregation=0.5, units="henon"
    ),
    "plummer_equal_noQ": lambda key: progenax.plummer_builder(key, n=N, imf="equal", Q=None),
    "eff": lambda key: progenax.eff_builder(key, n=N, gamma=3.5),
    "eff_truncated": lambda key: progenax.eff_builder(key, n=N, gamma=2.5, r_t=5.0, segregation=0.3),
    "king": lambda key: progenax.king_builder(key, n=N, W0=6.0),
    "king_multimass": lambda key: progenax.king_builder(key, n=N, W0=5.0, mass_bins=4, Q=0.5),
    "limepy_ra": lambda key: progenax.limepy_builder(key, n=N, W0=5.0, g=1.5, ra=8.0),
    "fractal": lambda key: progenax.fractal_builder(key, n=N, D=2.0),
    "gravoturb_stars": lambda key: progenax.gravoturb.star_builder(key, n=N, grid=16, Q=0.5),
}


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, np.float64))
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def output_hash(name: str, key: int) -> str:
    ic = CASES[name](jax.random.PRNGKey(key))
    s = ic.state
    return _digest(s.positions, s.velocities, s.masses, ic.weights)


def cpu_signature() -> str:
    """The machine, its CPU vendor and the vector extensions XLA compiles for,
    e.g. "x86_64 AuthenticAMD avx2 fma"."""
    vendor, flags = "", set()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id":
                vendor = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    isa = next((f for f in ("avx512f", "avx2", "avx") if f in flags), "")
    return " ".join(part for part in (platform.machine(), vendor, isa, "fma" if "fma" in flags else "") if part)


def _recorded() -> dict:
    return json.loads(FIXTURE.read_text())


def compute_all() -> dict:
    """Every case's hash at every key, and the gravoturb gas cloud's."""
    hashes = {name: {str(k): output_hash(name, k) for k in KEYS} for name in sorted(CASES)}
    cloud = {}
    for k in KEYS:
        gas = progenax.gravoturb.cloud_builder(jax.random.PRNGKey(k), n=N, grid=16)
        cloud[str(k)] = _digest(gas.state.positions, gas.state.velocities, gas.state.masses)
    hashes["gravoturb_cloud"] = cloud
    return hashes


def _default_xla_flags() -> str:
    """XLA_FLAGS less the compile-time flags the suite adds (tests/conftest.py)."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    return " ".join(f for f in flags if not f.startswith(TEST_ONLY_XLA_FLAG_PREFIXES))


@pytest.fixture(scope="module")
def computed() -> dict:
    """The hashes as a user's process computes them: in a fresh interpreter with
    XLA's default flags (the suite itself compiles with its faster legacy CPU
    emitters, whose transcendental functions round differently in the last bit)."""
    env = {**os.environ, "XLA_FLAGS": _default_xla_flags()}
    result = subprocess.run([sys.executable, __file__, "--print"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def recorded() -> dict:
    recorded = _recorded()
    if recorded["jax"] != jax.__version__:
        pytest.skip(f"hashes recorded with jax {recorded['jax']}, running {jax.__version__}")
    signature = cpu_signature()
    if signature not in recorded["hashes"]:
        pytest.skip(f"no hashes recorded for this CPU ({signature}): run {FIXTURE.name}'s --record here")
    return recorded["hashes"][signature]


@pytest.mark.parametrize("name", sorted(CASES))
def test_builder_output_is_bit_identical(name, computed, recorded):
    if name not in recorded:  # a builder whose output changed on purpose, not yet recorded on this CPU
        pytest.skip(f"no {name} hashes recorded for this CPU: run {FIXTURE.name}'s --record here")
    for key in KEYS:
        assert computed[name][str(key)] == recorded[name][str(key)], (name, key)


def test_gas_cloud_output_is_bit_identical(computed, recorded):
    for key in KEYS:
        assert computed["gravoturb_cloud"][str(key)] == recorded["gravoturb_cloud"][str(key)], key


def record() -> None:
    """This CPU's hashes, beside the other CPUs' (all dropped with a new jax)."""
    previous = _recorded() if FIXTURE.exists() else {}
    by_cpu = previous["hashes"] if previous.get("jax") == jax.__version__ else {}
    signature = cpu_signature()
    by_cpu[signature] = compute_all()
    FIXTURE.write_text(json.dumps({"jax": jax.__version__, "n": N, "hashes": by_cpu}, indent=1) + "\n")
    print(f"wrote {FIXTURE} for {signature}")


if __name__ == "__main__" and "--record" in sys.argv:
    record()
elif __name__ == "__main__" and "--print" in sys.argv:
    print(json.dumps(compute_all()))
