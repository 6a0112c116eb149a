"""anisotropy_profile, rotation_curve and the Osipkov-Merritt Jeans solution on
synthetic data whose answer is known: exact where the velocities are built so
(fixed |v_r| and |v_t|, solid-body rotation, Plummer's closed-form Jeans
moments), statistical where they are drawn (Gaussian velocities of known beta),
with tolerances from the sample sizes. No builder is compiled."""

import numpy as np
import pytest
from scipy.integrate import quad

from progenax.diagnostics import (
    anisotropy_profile,
    osipkov_merritt_jeans,
    osipkov_merritt_jeans_binned,
    rotation_curve,
)

EDGES = np.array([0.0, 0.5, 1.0, 2.0, 4.0])


def _frame(rng, n, r_max=4.0):
    """n positions uniform in a ball, with their unit vectors e_r, e_theta, e_phi."""
    x = rng.standard_normal((n, 3))
    e_r = x / np.linalg.norm(x, axis=1, keepdims=True)
    r = r_max * rng.uniform(0.0, 1.0, n) ** (1.0 / 3.0)
    z = np.array([0.0, 0.0, 1.0])
    e_phi = np.cross(z, e_r)
    e_phi /= np.linalg.norm(e_phi, axis=1, keepdims=True)
    e_theta = np.cross(e_phi, e_r)
    return r[:, None] * e_r, e_r, e_theta, e_phi


def _true_beta(r):
    return r * r / (r * r + 1.0)  # Osipkov-Merritt with ra = 1


def _gaussian_velocities(rng, e_r, e_theta, e_phi, r):
    # sigma_r = 1, each tangential component sigma_r sqrt(1 - beta)
    s_t = np.sqrt(1.0 - _true_beta(r))[:, None]
    g = rng.standard_normal((r.size, 3))
    return g[:, :1] * e_r + s_t * (g[:, 1:2] * e_theta + g[:, 2:] * e_phi)


def test_fixed_radial_and_tangential_speeds_are_exact():
    rng = np.random.default_rng(0)
    x, e_r, e_t, e_p = _frame(rng, 5000)
    a, b = 2.0, 3.0  # |v_r| = a, |v_t| = b at every star: beta = 1 - b^2 / (2 a^2)
    angle = rng.uniform(0.0, 2.0 * np.pi, (5000, 1))
    sign = rng.choice([-1.0, 1.0], (5000, 1))
    v = sign * a * e_r + b * (np.cos(angle) * e_t + np.sin(angle) * e_p)
    p = anisotropy_profile(x, v, rng.uniform(0.5, 2.0, 5000), EDGES)
    np.testing.assert_allclose(p.v_r2, a * a, rtol=1e-12)
    np.testing.assert_allclose(p.v_t2, b * b, rtol=1e-12)
    np.testing.assert_allclose(p.beta, 1.0 - b * b / (2.0 * a * a), rtol=1e-12)
    np.testing.assert_allclose(p.sigma_r, a, rtol=1e-12)
    for err in (p.v_r2_err, p.v_t2_err, p.beta_err):
        assert np.all(err < 1e-10)
    assert p.count.sum() == 5000 and np.all(p.radius > EDGES[:-1]) and np.all(p.radius < EDGES[1:])


def test_equal_weights_match_the_sample_formulas():
    # Equal weights: the standard errors are the sample standard deviation
    # (ddof = 1) over sqrt(n), and beta's the delta method with np.cov.
    rng = np.random.default_rng(1)
    x, e_r, e_t, e_p = _frame(rng, 3000)
    r = np.linalg.norm(x, axis=1)
    v = _gaussian_velocities(rng, e_r, e_t, e_p, r)
    p = anisotropy_profile(x, v, np.full(3000, 0.7), EDGES)
    vr2 = np.sum(v * e_r, axis=1) ** 2
    vt2 = np.sum(v * v, axis=1) - vr2
    for k, (lo, hi) in enumerate(zip(EDGES[:-1], EDGES[1:])):
        s = (r >= lo) & (r < hi)
        n = s.sum()
        R, T = vr2[s].mean(), vt2[s].mean()
        se_R, se_T = vr2[s].std(ddof=1) / np.sqrt(n), vt2[s].std(ddof=1) / np.sqrt(n)
        cov = np.cov(vt2[s], vr2[s])[0, 1] / n
        d_T, d_R = -1.0 / (2.0 * R), T / (2.0 * R * R)
        se_beta = np.sqrt(d_T**2 * se_T**2 + d_R**2 * se_R**2 + 2.0 * d_T * d_R * cov)
        np.testing.assert_allclose(
            [p.count[k], p.v_r2[k], p.v_t2[k], p.beta[k], p.v_r2_err[k], p.v_t2_err[k], p.beta_err[k]],
            [n, R, T, 1.0 - T / (2.0 * R), se_R, se_T, se_beta],
            rtol=1e-10,
        )


def test_weights_centre_and_empty_bins():
    rng = np.random.default_rng(2)
    x, e_r, e_t, e_p = _frame(rng, 1000)
    v = _gaussian_velocities(rng, e_r, e_t, e_p, np.linalg.norm(x, axis=1))
    w = rng.integers(1, 4, 1000).astype(float)
    # an integer weight is the star repeated, for the means
    p = anisotropy_profile(x, v, w, EDGES)
    rep = np.repeat(np.arange(1000), w.astype(int))
    q = anisotropy_profile(x[rep], v[rep], np.ones(rep.size), EDGES)
    np.testing.assert_allclose([p.v_r2, p.v_t2, p.beta], [q.v_r2, q.v_t2, q.beta], rtol=1e-12)
    # weight 0 drops a star; a shifted cluster with its centre gives the same
    w0 = np.where(np.arange(1000) < 300, 0.0, w)
    dropped = anisotropy_profile(x[300:], v[300:], w[300:], EDGES)
    shifted = anisotropy_profile(x + 5.0, v, w0, EDGES, centre=[5.0, 5.0, 5.0])
    np.testing.assert_allclose(np.array(shifted[1:]), np.array(dropped[1:]), rtol=1e-9)
    # a bin without stars is NaN, not an error
    empty = anisotropy_profile(x, v, w, [0.0, 1.0, 10.0, 20.0])
    assert empty.count[2] == 0 and np.isnan(empty.beta[2]) and np.isfinite(empty.beta[0])
    with pytest.raises(ValueError, match="edges"):
        anisotropy_profile(x, v, w, [1.0, 0.5])
    with pytest.raises(ValueError, match="weights"):
        rotation_curve(x, v, w[:10], EDGES)


def test_beta_of_drawn_velocities_and_its_error():
    # Gaussian velocities with beta(r) = r^2/(r^2 + 1) exactly. Each bin's
    # beta within 3 of its own standard error of the bin-mean of the true beta;
    # then the error itself: over 200 independent draws of 2000 stars, the
    # scatter of the estimates equals the mean reported error within 3 relative
    # standard errors of a standard deviation from 200 samples, 1/sqrt(2 * 199).
    rng = np.random.default_rng(3)
    x, e_r, e_t, e_p = _frame(rng, 20_000)
    r = np.linalg.norm(x, axis=1)
    v = _gaussian_velocities(rng, e_r, e_t, e_p, r)
    w = rng.uniform(0.1, 1.0, r.size)
    p = anisotropy_profile(x, v, w, EDGES)
    for k, (lo, hi) in enumerate(zip(EDGES[:-1], EDGES[1:])):
        s = (r >= lo) & (r < hi)
        # beta of the bin: 1 - <s_t^2>/<s_r^2> with the weighted moments of the model
        expected = np.sum(w[s] * _true_beta(r[s])) / np.sum(w[s])
        assert abs(p.beta[k] - expected) < 3.0 * p.beta_err[k], (k, p.beta[k], expected, p.beta_err[k])
    estimates, errors = [], []
    edges = np.array([0.0, 2.5, 4.0])  # ~490 and ~1510 stars: the delta method's regime
    for _ in range(200):
        x, e_r, e_t, e_p = _frame(rng, 2000)
        v = _gaussian_velocities(rng, e_r, e_t, e_p, np.linalg.norm(x, axis=1))
        q = anisotropy_profile(x, v, rng.uniform(0.1, 1.0, 2000), edges)
        estimates.append(q.beta)
        errors.append(q.beta_err)
    ratio = np.std(estimates, axis=0, ddof=1) / np.mean(errors, axis=0)
    assert np.all(np.abs(ratio - 1.0) < 3.0 / np.sqrt(2 * 199)), ratio


def test_solid_rotation_is_exact():
    rng = np.random.default_rng(4)
    x, _, _, e_phi = _frame(rng, 2000)
    omega = 1.5
    v = omega * np.cross([0.0, 0.0, 1.0], x)  # v_phi = Omega R at every star
    w = rng.uniform(0.5, 2.0, 2000)
    c = rotation_curve(x, v, w, EDGES)
    np.testing.assert_allclose(c.v_phi, omega * c.radius, rtol=1e-12)
    R = np.hypot(x[:, 0], x[:, 1])
    for k, (lo, hi) in enumerate(zip(EDGES[:-1], EDGES[1:])):
        s = (R >= lo) & (R < hi)
        np.testing.assert_allclose(c.radius[k], np.sum(w[s] * R[s]) / np.sum(w[s]), rtol=1e-12)
    counter = rotation_curve(x + [1.0, -2.0, 3.0], -v, w, EDGES, centre=[1.0, -2.0, 0.0])
    np.testing.assert_allclose(counter.v_phi, -c.v_phi, rtol=1e-12)
    np.testing.assert_allclose(counter.v_phi_err, c.v_phi_err, rtol=1e-12)


def test_rotation_of_flipped_signs():
    # v = +-u e_phi with P(+) = 3/4: mean v_phi = u / 2, and with equal weights
    # the error is the sample standard deviation over sqrt(n); 3 of it.
    rng = np.random.default_rng(5)
    x, _, _, e_phi = _frame(rng, 8000)
    u = 2.0
    sign = np.where(rng.uniform(0.0, 1.0, (8000, 1)) < 0.75, 1.0, -1.0)
    v = sign * u * e_phi
    c = rotation_curve(x, v, np.ones(8000), EDGES)
    R = np.hypot(x[:, 0], x[:, 1])
    for k, (lo, hi) in enumerate(zip(EDGES[:-1], EDGES[1:])):
        s = (R >= lo) & (R < hi)
        np.testing.assert_allclose(c.v_phi_err[k], np.std(u * sign[s, 0], ddof=1) / np.sqrt(s.sum()), rtol=1e-10)
        assert abs(c.v_phi[k] - 0.5 * u) < 3.0 * c.v_phi_err[k]


def _plummer_sigma_r2(r, ra):
    """Plummer's Osipkov-Merritt sigma_r^2 in closed form (G = M = a = 1), u = 1 + r^2:
    rho sigma_r^2 = 3/(4 pi) [(ra^2 - 1) u^-3 / 6 + u^-2 / 4] / (r^2 + ra^2)."""
    u = 1.0 + r * r
    return ((ra * ra - 1.0) * u**-3 / 6.0 + u**-2 / 4.0) / ((r * r + ra * ra) * u**-2.5)


def _plummer():
    rho = lambda r: 3.0 / (4.0 * np.pi) * (1.0 + r * r) ** -2.5  # noqa: E731
    mass = lambda r: r**3 / (1.0 + r * r) ** 1.5  # noqa: E731
    return rho, mass


@pytest.mark.parametrize("ra", [None, 0.75, 2.0])
def test_jeans_against_plummer_closed_form(ra):
    rho, mass = _plummer()
    r = np.array([0.05, 0.5, 1.0, 3.0])
    sr2, st2 = osipkov_merritt_jeans(r, rho, mass, ra)
    if ra is None:
        expected = 1.0 / (6.0 * np.sqrt(1.0 + r * r))  # isotropic: G M / (6 sqrt(r^2 + a^2))
        beta = 0.0
    else:
        expected = _plummer_sigma_r2(r, ra)
        beta = r * r / (r * r + ra * ra)
    np.testing.assert_allclose(sr2, expected, rtol=1e-8)
    np.testing.assert_allclose(st2, 2.0 * (1.0 - beta) * expected, rtol=1e-8)
    # twice G: twice the dispersions
    np.testing.assert_allclose(osipkov_merritt_jeans(r, rho, mass, ra, G=2.0)[0], 2.0 * expected, rtol=1e-8)


def test_binned_jeans_is_the_mass_weighted_mean():
    rho, mass = _plummer()
    ra, edges = 1.0, np.array([0.0, 0.5, 1.5])
    sr2, st2 = osipkov_merritt_jeans_binned(edges, rho, mass, ra)
    for k, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        m = quad(lambda s: s * s * rho(s), lo, hi)[0]
        r_mean = quad(lambda s: s * s * rho(s) * _plummer_sigma_r2(s, ra), lo, hi)[0] / m
        t_mean = quad(lambda s: s * s * rho(s) * _plummer_sigma_r2(s, ra) * 2 * ra**2 / (s * s + ra**2), lo, hi)[0] / m
        np.testing.assert_allclose([sr2[k], st2[k]], [r_mean, t_mean], rtol=1e-8)
