"""The slab cut (`sharding.decompose`), the mesh offsets, and a one-device mesh, in this process."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import progenax
from progenax import sharding


def test_count_cut_is_balanced_and_a_permutation():
    x = jax.random.normal(jax.random.PRNGKey(0), (1001, 2))
    slabs = sharding.decompose(x, 4)
    assert slabs.capacity == 251
    np.testing.assert_array_equal(np.sort(np.asarray(slabs.counts)), [250, 250, 250, 251])
    slots = np.asarray(slabs.slot)
    assert np.unique(slots).size == 1001
    np.testing.assert_array_equal(np.asarray(slabs.from_slabs(slabs.to_slabs(x))), np.asarray(x))
    # Slabs are ordered along the axis: every particle of device d lies at or
    # below every particle of device d + 1.
    device = slots // slabs.capacity
    xs = np.asarray(x[:, 0])
    for d in range(3):
        assert xs[device == d].max() <= xs[device == d + 1].min()


def test_edge_cut_puts_edge_particles_above_and_allows_empty_slabs():
    x = jnp.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [2.5, 0.0], [3.0, 0.0]])
    slabs = sharding.decompose(x, 4, bounds=jnp.array([0.0, 1.0, 1.0, 3.0, 4.0]))
    np.testing.assert_array_equal(np.asarray(slabs.counts), [1, 0, 3, 1])
    assert slabs.capacity == 3
    with pytest.raises(ValueError, match="capacity"):
        sharding.decompose(x, 4, bounds=jnp.array([0.0, 1.0, 1.0, 3.0, 4.0]), capacity=2)
    with pytest.raises(ValueError, match="bounds"):
        sharding.decompose(x, 4, bounds=jnp.array([0.0, 1.0, 4.0]))


def test_mesh_offsets():
    assert sharding.mesh_offsets(8, 1, periodic=True) == (1, 7)
    assert sharding.mesh_offsets(2, 1, periodic=True) == (1,)  # left and right are one device
    assert sharding.mesh_offsets(3, 2, periodic=True) == (1, 2)
    assert sharding.mesh_offsets(4, 2, periodic=False) == (-2, -1, 1, 2)
    assert sharding.mesh_offsets(1, 1, periodic=True) == ()


def test_king_core_load_balance():
    """A King W0 = 9 cluster (a dense core in a wide halo) cut into 8 slabs by
    count: the largest device share is at most 1.2 times the mean (it is
    ceil(N/D) / (N/D) = 1 here, by construction); slabs of equal width over
    the same extent, which the check must be able to tell apart, put most
    particles on one or two devices."""
    ic = progenax.king_builder(jax.random.PRNGKey(7), n=4000, W0=9.0)
    x = ic.state.positions
    by_count = sharding.decompose(x, 8)
    assert float(by_count.share()) <= 1.2
    lo, hi = float(jnp.min(x[:, 0])), float(jnp.max(x[:, 0]))
    by_width = sharding.decompose(x, 8, bounds=jnp.linspace(lo, hi, 9))
    assert float(by_width.share()) > 3.0


@pytest.mark.slow
def test_one_device_mesh_has_no_halo():
    """A mesh of one device (no exchange at all) equals `sph.density`
    (round-off: see tests/sharding/conftest.py)."""
    mesh = sharding.particle_mesh(jax.devices()[:1])
    x = jax.random.normal(jax.random.PRNGKey(9), (700, 2))
    one = progenax.sph.density(x, 1.0, 0.2)
    many = sharding.density(x, 1.0, 0.2, mesh=mesh)
    assert float(jnp.max(jnp.abs(many - one)) / jnp.max(jnp.abs(one))) < 1e-12
