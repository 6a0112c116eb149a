r"""Sharded builders on simulated CPU devices (`progenax.builders.sharded`).

Tolerances. Round-off only (1e-12): the ring's shell-theorem W against the
one-device sum (the same terms added in another order, measured 3e-16), a
one-device mesh against the plain build (the same program, measured 0), Q
after the exact scaling and the total momentum. float32 ring: 1e-5 (a few
hundred ulp of a sum of ~1e3 terms; measured 7e-8). The nested-mesh U
over the ring against one device: round-off (the same pair terms in
another order: the pair function ignores candidates beyond the reach, so
the cell grids do not matter; measured 5e-16 at most, gradients 1e-15;
float32 9e-7). Statistics: the
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

import pytest

ROUND_OFF = 1e-12


def _check_build(figures: dict, n_devices: int, ks_limit) -> None:
    assert figures["one_device"] < ROUND_OFF
    assert figures["shards"] == n_devices and figures["shard_rows"] == [figures["n"] // n_devices]
    assert abs(figures["Q"] - 0.5) < ROUND_OFF
    assert figures["momentum"] < ROUND_OFF
    for name, distance in figures["ks"].items():
        assert distance < ks_limit(figures["n"]), (name, figures["ks"])
    assert "segregation ranks every star" in figures["refused"]["segregation"]
    assert f"multiple of the mesh's {n_devices} devices" in figures["refused"]["n"]


def _check_gravoturb(figures: dict, n_devices: int, ks_limit) -> None:
    assert figures["one_device"] < ROUND_OFF
    assert figures["shards"] == n_devices
    for name, distance in figures["ks"].items():
        assert distance < ks_limit(figures["n"]), (name, figures["ks"])
    assert abs(figures["Q"] - 0.5) < ROUND_OFF


def _check_mesh_energy(figures: dict) -> None:
    for name in ("value", "grad_x", "grad_m"):
        assert figures[name] < ROUND_OFF, (name, figures)
    assert figures["float32"] < 1e-5, figures


def test_four_devices(run_worker, ks_limit, check_gradient):
    """The ring energies (shells, nested mesh), a one-device mesh, a King
    build's shares and statistics, an EFF build's Q, the refusals,
    gravoturbulent stars and gas, the gradient of a sharded Plummer build,
    float32."""
    cases = ("ring_energy", "ring_mesh_energy", "build", "build_gravoturb", "build_gradient", "build_float32")
    results = run_worker(4, *cases)
    _check_mesh_energy(results["ring_mesh_energy"])
    _check_gravoturb(results["build_gravoturb"], 4, ks_limit)
    assert results["ring_energy"]["float64"] < ROUND_OFF
    assert results["ring_energy"]["float32"] < 1e-5
    _check_build(results["build"], 4, ks_limit)
    check_gradient(results["build_gradient"])
    assert results["build_float32"] == {"dtype": "float32", "finite": True}


@pytest.mark.slow
def test_eight_devices(run_worker, ks_limit):
    """The ring energy and the builds on 8 devices."""
    results = run_worker(8, "ring_energy", "ring_mesh_energy", "build", "build_gravoturb")
    assert results["ring_energy"]["float64"] < ROUND_OFF
    _check_mesh_energy(results["ring_mesh_energy"])
    _check_build(results["build"], 8, ks_limit)
    _check_gravoturb(results["build_gravoturb"], 8, ks_limit)
