"""Elements <-> relative phase space: round trip, energy, angular momentum, orientations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.binaries import (
    elements_to_phase_space,
    orbital_period,
    phase_space_to_elements,
    sample_orientations,
    semi_major_axis,
)

stats = pytest.importorskip("scipy.stats")

G = 4.300917270e-3
N = 20_000
# Under the null hypothesis a KS p-value is uniform on (0, 1): with a fixed key
# a threshold of 1e-3 fails by chance once in a thousand keys, whatever N (the
# critical distance, about 1.95 / sqrt(N), shrinks with the sample).
P_MIN = 1e-3


def _elements(key, n):
    k_a, k_e, k_m, k_o = jax.random.split(key, 4)
    a = 10 ** jax.random.uniform(k_a, (n,), minval=-6.0, maxval=-1.0)
    e = jax.random.uniform(k_e, (n,), maxval=0.999)
    mass = 10 ** jax.random.uniform(k_m, (n,), minval=-1.0, maxval=2.0)
    return (a, e, *sample_orientations(k_o, (n,)), mass)


@pytest.fixture(scope="module")
def orbits():
    a, e, inc, node, peri, M, mass = _elements(jax.random.PRNGKey(3), N)
    r, v = jax.jit(elements_to_phase_space)(a, e, inc, node, peri, M, mass, G)
    return (a, e, inc, node, peri, M, mass), r, v


def _angle_gap(x, y):
    return np.abs(np.angle(np.exp(1j * (np.asarray(x) - np.asarray(y)))))


def test_round_trip(orbits):
    (a, e, inc, node, peri, M, mass), r, v = orbits
    back = jax.jit(phase_space_to_elements)(r, v, mass, G)
    # 1/a = 2/r - v^2/mu cancels by a factor up to 2/(1 - e) at pericentre, and
    # omega, M inherit an error ~ eps / e from the direction of the e vector.
    scale = 1e-14 / (1 - np.asarray(e)) + 1e-14 / np.asarray(e)
    assert np.all(np.abs(back.a / a - 1) < scale)
    assert np.all(np.abs(back.e - e) < 1e-13)
    assert np.all(np.abs(back.inclination - inc) < 1e-12)
    assert np.all(_angle_gap(back.ascending_node, node) < 1e-10)
    assert np.all(_angle_gap(back.periapsis, peri) < 100 * scale)
    assert np.all(_angle_gap(back.mean_anomaly, M) < 100 * scale)


def test_energy_and_angular_momentum(orbits):
    (a, e, _, _, _, _, mass), r, v = orbits
    mu = G * mass
    energy = 0.5 * jnp.sum(v * v, axis=1) - mu / jnp.linalg.norm(r, axis=1)
    assert np.allclose(energy, -mu / (2 * a), rtol=1e-12, atol=0)
    h = jnp.linalg.norm(jnp.cross(r, v), axis=1)
    assert np.allclose(h, jnp.sqrt(mu * a * (1 - e**2)), rtol=1e-12, atol=0)
    assert np.allclose(semi_major_axis(orbital_period(a, mass, G), mass, G), a, rtol=1e-14)


def test_orientations_isotropic_and_mean_anomaly_uniform(orbits):
    (_, _, inc, node, peri, M, _), _, _ = orbits
    two_pi = 2 * np.pi
    p = [
        stats.kstest(np.cos(np.asarray(inc)), "uniform", args=(-1, 2)).pvalue,
        stats.kstest(np.asarray(node), "uniform", args=(0, two_pi)).pvalue,
        stats.kstest(np.asarray(peri), "uniform", args=(0, two_pi)).pvalue,
        stats.kstest(np.asarray(M), "uniform", args=(0, two_pi)).pvalue,
    ]
    print("KS p-values cos i, Omega, omega, M:", np.round(p, 3))
    assert min(p) > P_MIN


def test_gradient_matches_central_differences():
    a, e, inc, node, peri, M, mass = (x[:8] for x in _elements(jax.random.PRNGKey(5), 8))

    @jax.jit
    def observable(params):
        r, v = elements_to_phase_space(*params, G)
        return jnp.sum(r[:, 0] * jnp.arange(1, 9)) + jnp.sum(v**2 * jnp.arange(1, 9)[:, None]) * 1e-4

    params = (a, e, inc, node, peri, M, mass)
    grads = jax.jit(jax.grad(observable))(params)
    for k, (x, g) in enumerate(zip(params, grads)):
        h = 1e-6 * jnp.maximum(jnp.abs(x), 1e-3)
        for i in range(2):
            up = list(params)
            dn = list(params)
            up[k], dn[k] = x.at[i].add(h[i]), x.at[i].add(-h[i])
            fd = (observable(up) - observable(dn)) / (2 * h[i])
            assert np.isclose(g[i], fd, rtol=1e-5, atol=1e-9 * abs(float(fd)) + 1e-12), (k, i)
