"""The fractal builder over simulated CPU devices (`fractal_builder(mesh=...)`,
`structure.fractal.box_fractal_share`, `remap_to_plummer_share`).

The tree over a mesh is the one-device tree cut into shares (the same slot
numbers, so the same random bits): compared bit for bit. The radial remap
and W over the mesh are the one-device sums in another order: round-off,
amplified by the outermost star (`remap_tolerance`). Statistics and
gradients: the `ks_limit` and `check_gradient` of conftest.py.
"""

from __future__ import annotations

import pytest

ROUND_OFF = 1e-12  # test_builders.py: the same terms in another order, a few ulp


def remap_tolerance(conditioning: float) -> float:
    """Tolerance of `remap_share`'s relative differences. The enclosed mass
    fractions are the same sums in another order, a few ulp apart (eps =
    2.2e-16), but the outermost star's Plummer radius r = a (mu^(-2/3) - 1)^(-1/2)
    ~ a (2 (1 - mu) / 3)^(-1/2) amplifies an error of mu by 1 / (2 (1 - mu)), and
    1 - mu = m / (2 M) there: a factor M / m, `conditioning` (5.7e4 at n = 2e4
    with these masses). The largest entry is that star's radius, so its
    relative error is ~eps M / m; the mass gradient goes through dr/dmu,
    whose error is larger by the same argument: 32 eps M / m covers both
    (measured 5e-12 and 2e-11 for M / m = 5.7e4 on four devices, i.e. 0.4
    and 1.5 eps M / m). A
    wrong enclosed mass (a share counted twice or not at all) moves radii
    by 10% or more."""
    return 32 * 2.2e-16 * conditioning


def _check_fractal(results: dict, n_devices: int, ks_limit) -> None:
    """The fractal over a mesh (`_worker.build_fractal`, `_fractal_cases`)."""
    build = results["build_fractal"]
    # Equal masses: the plain build's stars but for the remap's sums in another
    # order, amplified at the outermost star (`remap_tolerance`).
    for name in ("one_device", "all_devices"):
        assert build[name] < remap_tolerance(build["conditioning"]), (name, build)
    assert build["shards"] == n_devices and build["shard_rows"] == [build["n"] // n_devices]
    assert abs(build["Q"] - 0.5) < ROUND_OFF
    # The remap puts r_h within 0.9% for the most lopsided fractal seen (its docstring).
    assert abs(build["r_h"] - 1.0) < 1e-2
    assert abs(build["box_r_h"] - 1.0) < ROUND_OFF
    assert build["ks_m"] < ks_limit(build["n"])
    assert "segregation ranks every star" in build["refused"]
    # The tree over the mesh is the one-device tree, cut into shares: the same bits.
    tree = results["fractal_share"]
    assert tree["rows_per_device"] == [tree["expected_rows"]]
    assert tree["one_device_mesh"] == 0.0 and tree["mesh"] == 0.0 and tree["small_n"] == 0.0, tree
    remap = results["remap_share"]
    for name in ("positions", "loss", "grad_masses", "grad_r_h"):
        assert remap[name] < remap_tolerance(remap["conditioning"]), (name, remap)


def _check_overflow(figures: dict, n_devices: int) -> None:
    """The forced overflow (`_fractal_cases.fractal_overflow`): still exactly
    n / D rows a device and n distinct stars. Its statistics are not the
    one-device cluster's (growth stopped early), so none is asserted."""
    assert figures["rows_per_device"] == [figures["n"] // n_devices]
    for name, stats in figures.items():
        if name.startswith("D="):
            assert stats["fewest_distinct"] == figures["n"], (name, stats)


def test_four_devices(run_worker, ks_limit, check_gradient):
    """The tree's shares, the remap, equal-mass builds against the plain one
    (one device and four), a Kroupa build's Q, r_h and masses, the box
    profile, the refusal of segregation, and the gradient of a sharded build."""
    results = run_worker(4, "build_fractal", "fractal_share", "remap_share", "build_fractal_gradient")
    _check_fractal(results, 4, ks_limit)
    check_gradient(results["build_fractal_gradient"])


@pytest.mark.slow
def test_eight_devices(run_worker, ks_limit):
    """The same on 8 devices, and the forced overflow of a device's tree array."""
    results = run_worker(8, "build_fractal", "fractal_share", "remap_share", "fractal_overflow")
    _check_fractal(results, 8, ks_limit)
    _check_overflow(results["fractal_overflow"], 8)
