"""Tidal truncation weights and Jacobi radii."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.builders import plummer_builder
from progenax.structure.tidal import (
    apply_tidal_truncation,
    jacobi_radius_flat_rotation,
    jacobi_radius_point_mass,
    tidal_weights,
)
from progenax.units import G_PHYSICAL


@pytest.fixture(scope="module")
def ic():
    return plummer_builder(jax.random.PRNGKey(0), n=500, r_h=1.0)


def weighted_mass(ic, r_t, kappa):
    return jnp.sum(apply_tidal_truncation(ic, r_t, kappa).weights * ic.state.masses)


def central_difference(f, x, rel=1e-6):
    # Float64, relative step 1e-6: truncation ~1e-12 and rounding ~1e-10 relative,
    # both far inside the 1e-5 requirement.
    h = rel * abs(x)
    return (f(x + h) - f(x - h)) / (2 * h)


def test_gradients_match_finite_differences(ic):
    f = jax.jit(weighted_mass)
    g_rt, g_kappa = jax.grad(weighted_mass, argnums=(1, 2))(ic, 2.0, 10.0)
    fd_rt = central_difference(lambda r: f(ic, r, 10.0), 2.0)
    fd_kappa = central_difference(lambda k: f(ic, 2.0, k), 10.0)
    np.testing.assert_allclose(g_rt, fd_rt, rtol=1e-5)
    np.testing.assert_allclose(g_kappa, fd_kappa, rtol=1e-5)
    assert float(g_rt) > 0  # a larger tidal radius keeps more mass


def test_sigmoid_values():
    r = jnp.array([0.0, 0.9, 1.0, 1.1, 3.0])
    w = tidal_weights(r, 1.0, kappa=10.0)
    np.testing.assert_allclose(w, 1.0 / (1.0 + np.exp(-10.0 * (1.0 - np.asarray(r)))), rtol=1e-14)
    assert float(w[2]) == 0.5


def test_hard_mode_is_exact(ic):
    out = apply_tidal_truncation(ic, 1.5, mode="hard")
    w = np.asarray(out.weights)
    centre = np.sum(np.asarray(ic.state.masses)[:, None] * np.asarray(ic.state.positions), 0) / float(
        ic.state.total_mass
    )
    r = np.linalg.norm(np.asarray(ic.state.positions) - centre, axis=1)
    assert set(np.unique(w)) <= {0.0, 1.0}
    np.testing.assert_array_equal(w, (r <= 1.5).astype(float))
    assert 0 < w.sum() < w.size


def test_truncations_compose_and_keep_particles(ic):
    once = apply_tidal_truncation(ic, 2.0)
    twice = apply_tidal_truncation(once, 2.0)
    np.testing.assert_allclose(twice.weights, once.weights**2, rtol=1e-14)
    np.testing.assert_array_equal(twice.state.positions, ic.state.positions)
    assert float(twice.params["r_t_tidal"]) == 2.0


@pytest.mark.parametrize("kappa", [0.0, -1.0])
def test_bad_kappa(ic, kappa):
    with pytest.raises(ValueError, match="kappa must be > 0"):
        apply_tidal_truncation(ic, 2.0, kappa)


def test_bad_r_t_and_mode(ic):
    with pytest.raises(ValueError, match="r_t must be > 0"):
        apply_tidal_truncation(ic, -1.0)
    with pytest.raises(ValueError, match="mode"):
        apply_tidal_truncation(ic, 1.0, mode="soft")


def jacobi_from_potential(phi, m, R, G):
    """r_J^3 = G m / (Omega^2 - Phi''(R)), with Omega^2 = Phi'(R) / R, by autodiff."""
    d1 = jax.grad(phi)
    d2 = jax.grad(d1)
    return (G * m / (d1(R) / R - d2(R))) ** (1.0 / 3.0)


def test_jacobi_point_mass():
    M, m, R = 1e11, 1e4, 8000.0
    phi = lambda r: -G_PHYSICAL * M / r
    np.testing.assert_allclose(
        jacobi_radius_point_mass(m, M, R), jacobi_from_potential(phi, m, R, G_PHYSICAL), rtol=1e-12
    )


def test_jacobi_flat_rotation_curve():
    V, m, R = 220.0, 1e4, 8000.0
    phi = lambda r: V**2 * jnp.log(r)
    np.testing.assert_allclose(
        jacobi_radius_flat_rotation(m, V, R), jacobi_from_potential(phi, m, R, G_PHYSICAL), rtol=1e-12
    )
    with pytest.raises(ValueError, match="V_c"):
        jacobi_radius_flat_rotation(m, 0.0, R)


def test_float32(ic):
    with jax.enable_x64(False):
        x = jnp.asarray(ic.state.positions, jnp.float32)
        r = jnp.linalg.norm(x, axis=1)
        w = tidal_weights(r, jnp.float32(1.0), jnp.float32(10.0))
        g = jax.grad(lambda rt: jnp.sum(tidal_weights(r, rt, 10.0)))(jnp.float32(1.0))
        assert w.dtype == jnp.float32 and np.isfinite(float(g))


def test_a_model_kept_about_its_centre_is_truncated_about_it():
    # An untruncated EFF keeps its stars about the model centre (its centre of
    # mass scatters without bound: 4.8e3 pc at gamma = 2.5, seed 0), and the
    # truncation cut about the centre of mass kept 0 of 20,000 stars at 5 pc.
    from progenax.builders import eff_builder

    ic = eff_builder(jax.random.PRNGKey(0), n=2000, gamma=2.5)
    out = apply_tidal_truncation(ic, 5.0, mode="hard")
    inside = np.linalg.norm(np.asarray(ic.state.positions), axis=1) <= 5.0
    np.testing.assert_array_equal(np.asarray(out.weights) > 0, inside)
    assert inside.sum() > 1000  # most of an r_h = 1 pc cluster lies within 5 pc
