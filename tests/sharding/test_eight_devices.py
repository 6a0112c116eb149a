"""Sharded against one device on 8 simulated devices (tolerances: conftest.py)."""

from __future__ import annotations

import pytest


def test_open_uneven_and_float32(run_worker, assert_equal):
    """Open boundaries, a clustered cloud cut by count with ties on the cuts,
    N = 1501 over 8 devices (slabs thinner than the reach: two hops); and
    the public `density_loss` in float32 with hops and halo measured."""
    results = run_worker(8, "open_uneven", "float32")
    assert_equal(results["open_uneven"])
    assert results["float32"]["dtype"] == "float32"
    assert results["float32"]["float32"] < 1e-5


@pytest.mark.slow
def test_relaxations_and_edge_cut(run_worker, assert_equal, tolerance):
    """20 relaxation steps, periodic and open (with and without the radial
    hold), against `progenax.relax`; and
    the edge cut with an empty device the 4-device file runs."""
    results = run_worker(8, "relax", "relax_open", "periodic_edges")
    assert results["relax"]["relax"] < tolerance
    assert results["relax_open"]["relax"] < tolerance
    assert results["relax_open"]["relax_radii"] < tolerance
    assert_equal(results["periodic_edges"])
