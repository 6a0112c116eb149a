"""Files keep primordial binaries: pairs in the native formats, binaries first in NBODY6."""

import jax
import numpy as np
import pytest

import progenax
import progenax.io as pio
from progenax.binaries import pair_elements
from progenax.io.summary import format_summary


@pytest.fixture(scope="module")
def cluster():
    return progenax.plummer_builder(jax.random.PRNGKey(5), n=400, binaries=progenax.BinaryPopulation(0.5))


@pytest.mark.parametrize("suffix", [".h5", ".npz"])
def test_native_files_keep_the_pairs(tmp_path, cluster, suffix):
    back = pio.read(pio.write(cluster, tmp_path / f"c{suffix}"))
    np.testing.assert_array_equal(np.asarray(back.pairs), np.asarray(cluster.pairs))
    np.testing.assert_array_equal(np.asarray(back.state.positions), np.asarray(cluster.state.positions))


def test_single_star_files_have_no_pairs(tmp_path):
    # binaries=None (the default) is the single-star build: no pairs, and its
    # output bit-identical to 0.1.0's (tests/builders/test_output_hashes.py).
    ic = progenax.plummer_builder(0, n=200)
    assert ic.pairs is None
    assert pio.read(pio.write(ic, tmp_path / "s.h5")).pairs is None


def test_nbody6_writes_binaries_first_and_keeps_their_orbits(tmp_path, cluster):
    path = pio.write(cluster, tmp_path / "fort.10", format="nbody6")
    back = pio.read(path, format="nbody6")
    k = cluster.pairs.shape[0]
    np.testing.assert_array_equal(np.asarray(back.pairs), np.arange(2 * k).reshape(-1, 2))
    h = cluster.to_henon()
    before = pair_elements(h.state.positions, h.state.velocities, h.state.masses, h.pairs, 1.0)
    after = pair_elements(back.state.positions, back.state.velocities, back.state.masses, back.pairs, 1.0)
    # 17 significant digits: the elements survive to float64 rounding of the
    # relative vectors (cancellation x_2 - x_1 of ~1e-6 of the positions).
    np.testing.assert_allclose(np.asarray(after.a), np.asarray(before.a), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(after.e), np.asarray(before.e), atol=1e-7)


def test_info_reports_the_binaries(cluster):
    text = format_summary(cluster)
    k = cluster.pairs.shape[0]
    assert f"binaries          {k} of 400 systems" in text
    # The systems were scaled to Q = 0.5 (the stars' Q includes the orbits).
    assert "systems' Q = 0.5000" in text
