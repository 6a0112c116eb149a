"""The King model's wall reparametrization: same posterior, support walls off the sampled space."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density
from scipy import stats

from progenax.infer import king_model, simulate_king
from progenax.infer.framework import site_above_wall

# Composite Gauss-Legendre on u in [-60, 60]: the integrands fall as e^-|u| (the
# sigmoid map) or faster (e^u below, exp(-e^u) above for the exp map), so the
# tails left out are ~1e-26; 1200 panels of 16 nodes resolve them to ~1e-12.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(16)
_EDGES = np.linspace(-60.0, 60.0, 1201)
_HALF = 0.5 * np.diff(_EDGES)[:, None]
U = (_EDGES[:-1, None] + _HALF * (1.0 + _NODES)).ravel()
W_U = (_WEIGHTS * _HALF).ravel()


def _wall_model(prior, wall):
    site_above_wall("x", prior, jnp.asarray(wall), jnp.asarray(wall + 0.1))


def _log_density_and_value(prior, wall, u):
    def one(u):
        params = {"x_unconstrained": u}
        log_p, trace = log_density(_wall_model, (prior, wall), {}, params)
        return log_p, trace["x"]["value"]

    return jax.jit(jax.vmap(one))(jnp.asarray(u))


@pytest.mark.parametrize(
    "prior, wall, mass",
    [
        # interval support: the sigmoid map
        (dist.LogUniform(0.1, 10.0), 0.5, np.log(10.0 / 0.5) / np.log(100.0)),
        (dist.Uniform(0.2, 1.0), 0.45, 0.55 / 0.8),
        (dist.LogUniform(0.1, 10.0), 0.05, 1.0),  # wall below the prior's range
        # lower-bounded and real support: the exp map
        (dist.Exponential(1.0), 0.7, np.exp(-0.7)),
        (dist.Normal(0.0, 1.0), 0.3, stats.norm.sf(0.3)),
    ],
)
def test_density_of_the_mapped_site_is_the_truncated_prior(prior, wall, mass):
    """Integrated over u, the site's density is the prior's mass above the wall (Jacobian right),
    and every u maps above the wall and inside the prior's support."""
    log_p, value = _log_density_and_value(prior, wall, U)
    assert abs(np.sum(np.exp(np.asarray(log_p)) * W_U) - mass) < 1e-8
    value = np.asarray(value)
    assert np.all(value >= wall) and np.all(np.asarray(prior.support(value)))
    # Distinct u give distinct values away from the saturated ends (the map is a bijection).
    middle = (U > -30) & (U < 3)  # sigmoid(3) < 1 - 1e-16 still
    assert np.all(np.diff(value[middle]) > 0)


def test_wall_above_the_prior_range_gives_zero_density_and_finite_gradient():
    def f(u):
        return log_density(_wall_model, (dist.LogUniform(0.1, 10.0), 20.0), {}, {"x_unconstrained": u})[0]

    value, grad = jax.jit(jax.value_and_grad(f))(0.3)
    assert np.isneginf(float(value)) and np.isfinite(float(grad))


def test_unsupported_prior_support_is_refused():
    with pytest.raises(ValueError, match="reparametrize=False"):
        _wall_model(dist.Bernoulli(0.5), 0.5)


# The King profile solve compiles for tens of seconds on 2 cores: `make validate`.
@pytest.mark.slow
def test_reparametrized_king_model_is_the_same_posterior():
    """log p_reparam(u) = log p_plain(theta(u)) + log|d theta / d u| at points off the start."""
    data = simulate_king(4, n=150, r_h=1.0, alpha=2.3, Q=0.5, W0=6.0)
    base = {
        "alpha": 2.25,
        "W0": 5.5,
        "centre": jnp.array([0.02, -0.01, 0.03]),
        "bulk_velocity": jnp.array([0.01, 0.0, -0.02]),
    }
    # Points off the start, feasible under the prior (a smaller r_h puts the outermost
    # stars so near r_t that no Q <= 1 binds them: -inf in both parametrizations).
    for u_r, u_q in [(-4.0, -2.0), (-3.0, -3.5), (-2.5, -1.0)]:

        def reparam(u):
            params = dict(base, r_h_unconstrained=u[0], Q_unconstrained=u[1])
            log_p, trace = log_density(king_model, (data,), {}, params)
            return log_p, (trace["r_h"]["value"], trace["Q"]["value"])

        u = jnp.array([u_r, u_q])
        log_p, (r_h, Q) = jax.jit(reparam)(u)
        # The map is triangular: d r_h / d u_Q = 0, so |J| = (d r_h/d u_r)(d Q/d u_Q).
        jac = np.asarray(jax.jit(jax.jacobian(lambda u: jnp.stack(reparam(u)[1])))(u))
        assert jac[0, 1] == 0.0 and jac[0, 0] > 0 and jac[1, 1] > 0
        plain = jax.jit(
            lambda r_h, Q: log_density(king_model, (data,), {"reparametrize": False}, dict(base, r_h=r_h, Q=Q))[0]
        )(r_h, Q)
        assert np.isfinite(float(log_p)) and np.isfinite(float(plain))
        np.testing.assert_allclose(float(log_p), float(plain) + np.log(jac[0, 0] * jac[1, 1]), rtol=1e-12, atol=1e-9)


def test_king_model_checks_before_the_start_values():
    """Refused before any profile solve: a prior support the map cannot handle, velocities without mass."""
    from numpyro import handlers

    from progenax.infer import ObservedCluster

    rng = np.random.default_rng(0)
    x, v, m = rng.normal(size=(20, 3)), rng.normal(size=(20, 3)), np.full(20, 0.5)
    with pytest.raises(ValueError, match="reparametrize=False"):
        handlers.seed(king_model, 0)(ObservedCluster(x, v, m), priors={"Q": dist.Bernoulli(0.5)})
    with pytest.raises(ValueError, match="total_mass is required"):
        handlers.seed(king_model, 0)(ObservedCluster(x, v, None))
