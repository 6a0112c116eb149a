"""Recorded potential energies are recalled for the very arrays they belong to, and only while those live."""

import gc

import jax
import jax.numpy as jnp
import numpy as np

from progenax.diagnostics import known_energy
from progenax.diagnostics.known_energy import recall_potential_energy, record_potential_energy


def _arrays(n=5):
    return jnp.ones((n, 3)), jnp.ones(n), jnp.ones(n)


def test_recalled_for_the_same_arrays_and_method_only():
    x, m, wt = _arrays()
    w = jnp.asarray(-2.5)
    record_potential_energy(x, m, wt, "mesh", w)
    assert recall_potential_energy(x, m, wt, "mesh") is w
    assert recall_potential_energy(x, m, wt, "exact") is None
    # Equal values in other arrays are other clusters as far as the record knows.
    assert recall_potential_energy(x, m, jnp.ones(5), "mesh") is None
    assert recall_potential_energy(x, jnp.ones(5), wt, "mesh") is None
    assert recall_potential_energy(jnp.ones((5, 3)), m, wt, "mesh") is None


def test_forgotten_when_an_array_is_freed():
    x, m, wt = _arrays()
    record_potential_energy(x, m, wt, "mesh", jnp.asarray(-1.0))
    key = id(x)
    assert key in known_energy._RECORDS
    del wt
    gc.collect()
    assert key not in known_energy._RECORDS  # its id may name another array next


def test_tracers_and_host_arrays_are_not_recorded():
    before = dict(known_energy._RECORDS)

    @jax.jit
    def inside(x, m, wt):
        record_potential_energy(x, m, wt, "mesh", jnp.sum(m))
        return x

    x, m, wt = _arrays(4)
    inside(x, m, wt)
    record_potential_energy(np.ones((4, 3)), np.ones(4), np.ones(4), "mesh", np.float64(-1.0))
    assert known_energy._RECORDS == before
