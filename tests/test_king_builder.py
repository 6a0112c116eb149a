"""King / LIMEPY builders against the solved model (issue 3 acceptance figures)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax import G_PHYSICAL, king_builder, limepy_builder, solve_king_profile
from progenax.diagnostics import half_mass_radius, virial_ratio
from progenax.kinematics.king_df import mean_square_speed, sample_speed_fraction, speed_table
from progenax.profiles.king import king_potential

N = 100_000
ORIGIN = jnp.zeros(3)
solve = jax.jit(solve_king_profile)


@jax.jit
def moments_check(W0, g, W, u):
    """2 W q^2 for draws q at potential W (one compile for every parameter set)."""
    q = sample_speed_fraction(speed_table(W0, g), jnp.full(u.shape, W), u)
    return q, 2 * W * q**2


@pytest.fixture(scope="module")
def king6():
    """King W0 = 6 at N = 1e5, equal masses (the mass-weighted statistics then
    have the plain 1/sqrt(N) scatter used in the tolerances below), and the model
    units recovered independently from the solved profile."""
    ic = king_builder(jax.random.PRNGKey(11), n=N, W0=6.0, r_h=1.0, imf="equal")
    p = solve(6.0, 1.0)
    s = ic.state
    length = 1.0 / float(p.r_h)  # pc per King radius (r_h = 1 pc)
    # G M / (s^2 L) = (9 / 4 pi) M_t in King units.
    s2 = 4 * np.pi * G_PHYSICAL * float(jnp.sum(s.masses)) / (9 * length * float(p.total_mass))
    r = np.linalg.norm(np.asarray(s.positions), axis=1) / length
    v2 = np.sum(np.asarray(s.velocities) ** 2, axis=1) / s2
    return ic, p, r, v2


def test_virial_ratio_without_rescaling(king6):
    # Q = None keeps the DF's velocities. With equal masses T is a mean of N
    # independent v^2 (relative scatter ~ sqrt(2/3 / N) = 0.26%), W's spherical
    # estimate about the model centre scatters similarly: sigma(Q) ~ 0.002, so
    # 0.01 is a ~5 sigma bound that still catches a 2% error in the speeds.
    ic = king6[0]
    s = ic.state
    q = virial_ratio(s.positions, s.velocities, s.masses, method="spherical", centre=ORIGIN)
    assert abs(float(q) - 0.5) < 0.01


def test_enclosed_mass_profile(king6):
    _, p, r, _ = king6
    r_grid, m_grid = np.asarray(p.r), np.asarray(p.mass) / float(p.total_mass)
    r_t = float(p.r_t)
    # 8 radii from where the model encloses 25% of the mass out to 0.95 r_t. The
    # measured fraction f has relative standard error sqrt((1 - f) / (f N)) <= 0.55%
    # at f >= 0.25, so the required 2% is > 3.6 sigma at every radius.
    r_lo = np.interp(0.25, m_grid[r_grid < r_t], r_grid[r_grid < r_t])
    radii = np.geomspace(r_lo, 0.95 * r_t, 8)
    model = np.interp(radii, r_grid, m_grid)
    measured = np.array([np.mean(r < x) for x in radii])
    np.testing.assert_allclose(measured, model, rtol=0.02)


def test_velocity_dispersion_profile(king6):
    _, p, r, v2 = king6
    g = 1.0
    # 8 equal-count radial bins (12,500 stars each) inside r_t. The model <v^2>
    # at each star's potential is the closed form 3 P(g+5/2, W) / P(g+3/2, W),
    # with W interpolated linearly on the solver grid (independent of the
    # builder's interpolant). The bin dispersion has relative standard error
    # ~ 0.5 sqrt(2/3 / 12,500) = 0.4%: the required 3% is > 7 sigma.
    W = np.interp(r, np.asarray(p.r), np.asarray(p.W))
    model_v2 = np.asarray(mean_square_speed(W, g))
    edges = np.quantile(r, np.linspace(0, 1, 9))
    which = np.clip(np.searchsorted(edges, r, side="right") - 1, 0, 7)
    for b in range(8):
        sel = which == b
        sigma_measured = np.sqrt(np.mean(v2[sel]) / 3)
        sigma_model = np.sqrt(np.mean(model_v2[sel]) / 3)
        assert abs(sigma_measured / sigma_model - 1) < 0.03, (b, sigma_measured, sigma_model)


def test_no_star_beyond_r_t_or_unbound(king6):
    ic, p, r, v2 = king6
    r_t = float(p.r_t)
    assert r.max() <= r_t * (1 + 1e-12)
    np.testing.assert_allclose(float(ic.params["r_t"]), r_t / float(p.r_h), rtol=1e-12)
    # Bound: v^2 / 2 < W(r) in units of s^2, with the model potential. Velocities
    # were shifted to the centre-of-mass frame (|v_com|^2 ~ 3 sigma^2 / N ~ 1e-5):
    # allow that much.
    W = np.asarray(king_potential(p, jnp.asarray(r)))
    assert np.all(0.5 * v2 < W + 1e-4)
    assert np.all(W > 0)


def test_half_mass_radius(king6):
    ic = king6[0]
    # The median radius of N stars has relative standard error
    # sqrt(0.25 / N) / (r f(r)) ~ 0.4% here: 1.5% is ~4 sigma.
    r_h = half_mass_radius(ic.state.positions, ic.state.masses, centre=ORIGIN)
    assert abs(float(r_h) - 1.0) < 0.015


@pytest.mark.parametrize("W0,g", [(6.0, 1.0), (3.0, 0.0), (9.0, 2.0), (5.0, 3.0), (20.0, 1.0)])
def test_speed_table_moments(W0, g):
    """The tabulated speed CDF reproduces the closed-form <v^2>(W).

    Stratified u = (k + 1/2) / M makes the mean over draws a quadrature of the
    tabulated distribution (error ~1 / M^2 ~ 1e-10), so what is left is the table's
    own error: measured <= 2e-5 away from W -> 0; 1e-4 leaves a margin.
    """
    m = 50_000
    u = (jnp.arange(m) + 0.5) / m
    for frac in (0.1, 0.37, 0.8, 1.0):
        W = frac * W0
        q, v2 = moments_check(W0, g, W, u)
        assert float(q.min()) >= 0.0 and float(q.max()) <= 1.0
        np.testing.assert_allclose(float(jnp.mean(v2)), float(mean_square_speed(W, g)), rtol=1e-4)


def test_speed_sampler_inverts_its_cdf_and_is_differentiable():
    """Speeds are monotone in u, and d q / d W0 matches central differences."""
    u = jnp.linspace(0.01, 0.99, 64)

    def q_of(W0):
        return sample_speed_fraction(speed_table(W0, 1.0), 0.6 * W0 * jnp.ones_like(u), u)

    q_jit = jax.jit(q_of)
    q = q_jit(6.0)
    assert np.all(np.diff(np.asarray(q)) > 0)
    h = 1e-5
    grad = jax.jit(jax.jacfwd(q_of))(6.0)
    fd = (q_jit(6.0 + h) - q_jit(6.0 - h)) / (2 * h)
    # The sample is C^1 in W0 (bicubic Hermite table, implicit root): FD
    # truncation ~h^2 and rounding ~1e-16 / h leave ~1e-9; 1e-6 is strict.
    np.testing.assert_allclose(np.asarray(grad), np.asarray(fd), rtol=1e-6, atol=1e-10)


@pytest.fixture(scope="module")
def small_limepy():
    """A jitted float32 LIMEPY build at n = 64: one compile serves the float32
    smoke test and the run-time error checks."""
    build = jax.jit(lambda key, W0, g: limepy_builder(key, n=64, W0=W0, g=g))

    def run(key, W0, g):
        with jax.enable_x64(False):
            ic = build(key, jnp.float32(W0), jnp.float32(g))
            return jax.block_until_ready(ic)

    return run


def test_float32_smoke(small_limepy):
    ic = small_limepy(jax.random.PRNGKey(0), 7.0, 1.0)
    s = ic.state
    assert s.positions.dtype == jnp.float32 and s.velocities.dtype == jnp.float32
    for x in (s.positions, s.velocities, s.masses):
        assert np.all(np.isfinite(np.asarray(x)))
    r = np.linalg.norm(np.asarray(s.positions), axis=1)
    assert r.max() <= float(ic.params["r_t"]) * (1 + 1e-5)


def test_limepy_too_large_for_grid_raises(small_limepy):
    # g = 3 pushes r_t past the solver's r_max = 1e5 King radii for W0 = 6.
    with pytest.raises(Exception, match="too large for the solver grid"):
        small_limepy(jax.random.PRNGKey(0), 6.0, 3.0)
    ic = small_limepy(jax.random.PRNGKey(0), 5.0, 2.0)  # Wilson: fine
    assert np.all(np.isfinite(np.asarray(ic.state.velocities)))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(W0=0.0), "W0"),
        (dict(W0=-2.0), "W0"),
        (dict(W0=float("nan")), "W0"),
        (dict(W0=25.0), "W0"),
        (dict(g=-0.5), "g"),
        (dict(g=3.5), "g"),
        (dict(ra=0.0), "ra"),
        (dict(ra=-1.0), "ra"),
        (dict(r_h=0.0), "r_h"),
    ],
)
def test_bad_input_raises(kwargs, name):
    with pytest.raises(ValueError, match=name):
        limepy_builder(0, n=10, **kwargs)


def test_anisotropy_not_yet_implemented():
    with pytest.raises(NotImplementedError, match="ra"):
        limepy_builder(0, n=10, ra=5.0)


def test_traced_bad_input_raises(small_limepy):
    with pytest.raises(Exception, match="W0"):
        small_limepy(jax.random.PRNGKey(0), -1.0, 1.0)
    with pytest.raises(Exception, match="g must be"):
        small_limepy(jax.random.PRNGKey(0), 5.0, 3.6)
