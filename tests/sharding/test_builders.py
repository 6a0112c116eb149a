r"""Sharded builders on simulated CPU devices (`progenax.builders.sharded`).

Tolerances. Round-off only (1e-12): the ring's shell-theorem W against the
one-device sum (the same terms added in another order, measured 3e-16), a
one-device mesh against the plain build (the same program, measured 0), Q
after the exact scaling and the total momentum. float32 ring: 1e-5 (a few
hundred ulp of a sum of ~1e3 terms; measured 7e-8). Statistics: the
two-sample Kolmogorov-Smirnov distance between the sharded and the
one-device clusters of n stars each (the DF's own velocities, Q=None:
independent draws; a Q scaling would multiply every speed by one random
factor) is below $c\sqrt{2/n}$ with
$c = \sqrt{-\ln(\alpha/2)/2} = 1.95$ at $\alpha = 10^{-3}$ (0.0195 at
n = 20,000). Gradients: the exact scalings $O_x \propto r_h^2$ and
$O_v \propto Q$ to round-off (1e-10); central differences at steps 1e-4
and 1e-6 within 1e-6 (truncation ~1e-8 and round-off ~1e-10 relative;
measured 4e-8 at most), while a gradient summed twice over the mesh is off
by a factor of D.
"""

from __future__ import annotations

import math

import pytest

ROUND_OFF = 1e-12


def _ks_limit(n: int, alpha: float = 1e-3) -> float:
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt(2 / n)


def _check_build(figures: dict, n_devices: int) -> None:
    assert figures["one_device"] < ROUND_OFF
    assert figures["shards"] == n_devices and figures["shard_rows"] == [figures["n"] // n_devices]
    assert abs(figures["Q"] - 0.5) < ROUND_OFF
    assert figures["momentum"] < ROUND_OFF
    for name, distance in figures["ks"].items():
        assert distance < _ks_limit(figures["n"]), (name, figures["ks"])
    assert "segregation ranks every star" in figures["refused"]["segregation"]
    assert f"multiple of the mesh's {n_devices} devices" in figures["refused"]["n"]


def _check_gravoturb(figures: dict, n_devices: int) -> None:
    assert figures["one_device"] < ROUND_OFF
    assert figures["shards"] == n_devices
    for name, distance in figures["ks"].items():
        assert distance < _ks_limit(figures["n"]), (name, figures["ks"])
    assert "nested-mesh W" in figures["refused_Q"]


def test_four_devices(run_worker):
    """The ring energy, a one-device mesh, a King build's shares and
    statistics, an EFF build's Q, the refusals, gravoturbulent stars and gas,
    the gradient of a sharded Plummer build, float32."""
    results = run_worker(4, "ring_energy", "build", "build_gravoturb", "build_gradient", "build_float32")
    _check_gravoturb(results["build_gravoturb"], 4)
    assert results["ring_energy"]["float64"] < ROUND_OFF
    assert results["ring_energy"]["float32"] < 1e-5
    _check_build(results["build"], 4)
    gradient = results["build_gradient"]
    assert gradient["x_rh"] < 1e-10 and gradient["v_Q"] < 1e-10, gradient
    for name, value in gradient.items():
        if name.startswith("cd_"):
            assert value < 1e-6, (name, gradient)
    assert results["build_float32"] == {"dtype": "float32", "finite": True}


@pytest.mark.slow
def test_eight_devices(run_worker):
    """The ring energy and the builds on 8 devices."""
    results = run_worker(8, "ring_energy", "build", "build_gravoturb")
    assert results["ring_energy"]["float64"] < ROUND_OFF
    _check_build(results["build"], 8)
    _check_gravoturb(results["build_gravoturb"], 8)
