"""Sharded against one device on 4 simulated devices (tolerances: conftest.py)."""

from __future__ import annotations

import pytest


def test_periodic_edges_empty_device_and_lost_neighbours(run_worker, assert_equal):
    """Periodic box cut by edges: uneven counts (N = 1203), one device with
    no particle, 40 particles exactly on slab edges; and too small a halo
    raises instead of dropping neighbours."""
    results = run_worker(4, "periodic_edges", "lost")
    figures = results["periodic_edges"]
    assert figures["empty_devices"] == 1
    assert_equal(figures)
    assert results["lost"]["raised"]


@pytest.mark.slow
def test_relaxations_and_open_cut(run_worker, assert_equal, tolerance):
    """20 relaxation steps (re-cut every 7), periodic and open (with and
    without the radial hold), against `progenax.relax`; and the open count cut the 8-device file runs."""
    results = run_worker(4, "relax", "relax_open", "open_uneven")
    assert results["relax"]["relax"] < tolerance
    assert results["relax_open"]["relax"] < tolerance
    assert results["relax_open"]["relax_radii"] < tolerance
    assert_equal(results["open_uneven"])


@pytest.mark.slow
def test_three_dimensions(run_worker, assert_equal):
    """3D, open and periodic (cut along z), hops and halo measured."""
    figures = run_worker(4, "three_d")["three_d"]
    assert_equal(figures, "open_")
    assert_equal(figures, "periodic_")
