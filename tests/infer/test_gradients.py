"""Autodiff of the unbinned log-likelihood against central finite differences (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.infer import ObservedCluster, plummer_log_likelihood, simulate_plummer


@pytest.fixture(scope="module")
def data3d():
    return simulate_plummer(3, n=200, r_h=1.0, alpha=2.3, Q=0.5)


def _check(data, ndim):
    def f(p):
        return plummer_log_likelihood(data, p[0], p[1], p[2], centre=p[3 : 3 + ndim], bulk_velocity=p[3 + ndim :])

    f = jax.jit(f)
    p0 = jnp.concatenate([jnp.array([1.05, 2.2, 0.55]), jnp.full(ndim, 0.01), jnp.full(3, 0.02)])
    grad = np.asarray(jax.grad(f)(p0))
    h = 1e-6
    fd = np.array([(f(p0.at[i].add(h)) - f(p0.at[i].add(-h))) / (2 * h) for i in range(p0.size)])
    # Central differences have truncation error O(h^2 f''') and rounding error
    # ~ eps |f| / h = 2e-16 * 2e3 / 1e-6 ~ 4e-7 (|log L| ~ 2e3): 1e-5 relative
    # to the largest component leaves a margin over both.
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, fd, atol=1e-5 * np.max(np.abs(fd)), rtol=1e-5)


def test_gradient_matches_finite_differences_3d(data3d):
    _check(data3d, 3)


def test_gradient_matches_finite_differences_projected(data3d):
    projected = ObservedCluster(data3d.positions[:, :2], data3d.velocities, data3d.masses)
    _check(projected, 2)


def test_gradient_in_the_centre_is_finite_with_a_star_on_it(data3d):
    # 3D positions and velocities: r = sqrt(|x|^2) gave 0 * inf = NaN in d/d centre
    # with the centre exactly on a star (where `init_to_data` starts a one-star
    # catalogue, so NUTS found no valid start). The log-density is smooth there
    # (it reads r^2 only): the gradient is the limit from beside the star.
    def f(centre):
        return plummer_log_likelihood(data3d, 1.0, 2.3, 0.95, centre=centre, bulk_velocity=jnp.zeros(3))

    on_star = data3d.positions[5]
    np.testing.assert_allclose(jax.grad(f)(on_star), jax.grad(f)(on_star + 1e-9), rtol=1e-6)
