"""The unbinned King likelihood: normalised densities, gradients, a feasible start."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

from progenax.infer import ObservedCluster, king_log_likelihood, king_model, simulate_king
from progenax.infer.king import king_initial_values, king_phase_space_logpdf
from progenax.profiles.king import solve_king_profile
from progenax.units import G_PHYSICAL

R_H, Q, W0, M = 0.9, 0.45, 5.0, 800.0


def _gl(lo, hi, panels=200, order=16):
    """Composite Gauss-Legendre nodes and weights on [lo, hi] (accurate to well below
    1e-9 on the smooth integrands here; the ends vanish as a power >= 2)."""
    nodes, weights = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(lo, hi, panels + 1)
    half = 0.5 * np.diff(edges)[:, None]
    return (edges[:-1, None] + half * (1.0 + nodes)).ravel(), (weights * half).ravel()


# The King likelihood compiles a profile solve (tens of seconds per new
# shape on 2 cores): the heavier checks run with `make validate`.
@pytest.mark.slow
def test_position_density_is_normalised():
    profile = solve_king_profile(W0, num_points=256)
    r_t = float(profile.r_t) * R_H / float(profile.r_h)
    r, w = _gl(0.0, r_t)
    data = ObservedCluster(np.stack([r, 0 * r, 0 * r], axis=1))
    log_p = king_phase_space_logpdf(data, R_H, Q, W0)
    # The density comes from the cubic Hermite interpolant of W between the
    # 256 profile nodes (d ln r = 0.08), whose O(d^4) error is ~1e-6 relative.
    assert abs(np.sum(4 * np.pi * r**2 * np.exp(np.asarray(log_p)) * w) - 1.0) < 1e-5
    # No star beyond the tidal radius: density exactly 0, never NaN.
    outside = king_phase_space_logpdf(ObservedCluster([[1.01 * r_t, 0.0, 0.0]]), R_H, Q, W0)
    assert np.isneginf(float(outside[0]))


@pytest.mark.slow
@pytest.mark.parametrize("los", [False, True])
def test_velocity_density_is_normalised(los):
    """At a fixed position, integrating p(v | x) over all velocities gives 1."""
    profile = solve_king_profile(W0, num_points=256)
    length = R_H / float(profile.r_h)
    s = np.sqrt(2 * Q * 4 * np.pi * G_PHYSICAL * M / (9 * length * float(profile.total_mass)))
    x0 = 0.4
    # v_escape = sqrt(2 W) s <= sqrt(2 W0) s bounds the integration range.
    v_max = np.sqrt(2 * W0) * s
    v, w = _gl(-v_max if los else 0.0, v_max)
    pos = np.tile([x0, 0.0, 0.0], (v.size, 1))
    vel = v if los else np.stack([v, 0 * v, 0 * v], axis=1)
    data = ObservedCluster(pos, vel)
    log_p = np.asarray(king_phase_space_logpdf(data, R_H, Q, W0, total_mass=M))
    log_x = float(king_phase_space_logpdf(ObservedCluster([[x0, 0.0, 0.0]]), R_H, Q, W0)[0])
    p_v = np.exp(log_p - log_x)
    total = np.sum(p_v * w) if los else np.sum(4 * np.pi * v**2 * p_v * w)
    assert abs(total - 1.0) < 1e-7


@pytest.fixture(scope="module")
def data():
    return simulate_king(4, n=150, r_h=1.0, alpha=2.3, Q=0.5, W0=6.0)


@pytest.mark.slow
def test_gradient_matches_finite_differences(data):
    start = king_initial_values(data, None, G_PHYSICAL)

    def f(p):
        return king_log_likelihood(
            data,
            p[0],
            p[1],
            p[2],
            p[3],
            centre=start["centre"] + p[4:7],
            bulk_velocity=start["bulk_velocity"] + p[7:10],
        )

    f = jax.jit(f)
    p0 = jnp.concatenate([jnp.array([start["r_h"], 2.2, start["Q"], start["W0"]]), jnp.zeros(6)])
    assert np.isfinite(float(f(p0)))
    grad = np.asarray(jax.grad(f)(p0))
    h = 1e-6
    fd = np.array([(f(p0.at[i].add(h)) - f(p0.at[i].add(-h))) / (2 * h) for i in range(p0.size)])
    # Rounding in the central difference ~ eps |f| / h ~ 2e-16 * 1e3 / 1e-6 = 2e-7;
    # truncation O(h^2 f''') is smaller. The profile solve's gradient is exact
    # autodiff through the profile solve, so 1e-5 of the largest component leaves a margin.
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, fd, atol=1e-5 * np.max(np.abs(fd)), rtol=1e-5)


@pytest.mark.slow
def test_data_derived_start_is_feasible_and_close(data):
    start = king_initial_values(data, None, G_PHYSICAL)
    log_l = king_log_likelihood(
        data, start["r_h"], 2.3, start["Q"], start["W0"], centre=start["centre"], bulk_velocity=start["bulk_velocity"]
    )
    assert np.isfinite(float(log_l))
    # The median radius estimates r_h to ~ 2/sqrt(150) ~ 16 % (1-sigma ~ 8 %): 30 % margin.
    assert abs(float(start["r_h"]) - 1.0) < 0.3


def test_projected_data_is_refused():
    with pytest.raises(NotImplementedError, match="3D positions"):
        king_log_likelihood(ObservedCluster(np.ones((3, 2))), 1.0, 2.3, 0.5, 6.0)


def test_model_reads_the_table_when_the_w0_prior_allows(data):
    """`king_model`'s likelihood factor is the tabulated one under the default W0 prior,
    the solved one under a prior reaching below the table (0.5), and the two agree to
    well below what matters for a posterior (table accuracy ~2e-6 relative in the
    profile's scales, times ~150 stars' log-density slopes of order 1: ~1e-3)."""
    # Near the truth (r_h = 1, Q = 0.5, W0 = 6): every star inside r_t and bound.
    params = {"r_h": 1.05, "alpha": 2.2, "Q": 0.6, "W0": 5.8, "centre": jnp.zeros(3), "bulk_velocity": jnp.zeros(3)}

    def factor(priors):
        kwargs = {"reparametrize": False, "priors": priors}
        factor = jax.jit(lambda p: log_density(king_model, (data,), kwargs, p)[1]["log_likelihood"]["fn"].log_factor)
        return float(factor(params))

    def direct(tabulated):
        args = (params["r_h"], 2.2, params["Q"], params["W0"])
        frame = {"centre": params["centre"], "bulk_velocity": params["bulk_velocity"]}
        return float(jax.jit(lambda: king_log_likelihood(data, *args, **frame, tabulated=tabulated))())

    table, solved = direct(True), direct(False)
    assert np.isfinite(table) and table != solved and abs(table - solved) < 1e-3
    assert factor(None) == pytest.approx(table, rel=1e-13)
    assert factor({"W0": dist.Uniform(0.1, 12.0)}) == pytest.approx(solved, rel=1e-13)


def test_a_table_that_does_not_cover_the_w0_prior_is_refused(data):
    # `tabulated=True` with a prior reaching below the table's 0.5 used to start
    # sampling and fail at the first proposal below 0.5, mid-warmup.
    with pytest.raises(ValueError, match="tabulated=True reads W0 from the King table"):
        log_density(king_model, (data,), {"priors": {"W0": dist.Uniform(0.1, 15.0)}, "tabulated": True}, {})
