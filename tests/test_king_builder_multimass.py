"""Multi-mass lowered-isothermal models: the self-consistent solve and the builder."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax import king_builder, solve_king_profile
from progenax.diagnostics import virial_ratio
from progenax.profiles.king import solve_multimass_king_profile

solve_mm = jax.jit(solve_multimass_king_profile, static_argnames=("num_iterations",))
solve_king = jax.jit(solve_king_profile)
TWO = (jnp.array([0.5, 2.0]), jnp.array([0.6, 0.4]))  # light / heavy: m_j, M_j


@pytest.mark.slow  # its own compile (K = 1); delta = 0 below checks the same in the default suite
def test_single_component_is_the_king_model():
    one = solve_mm(6.0, jnp.array([1.0]), jnp.array([1.0]), 1.0, 0.5)
    king = solve_king(6.0, 1.0)
    # Same ODE, same steps (the component-mass state is an extra, passive
    # integral): agreement to rounding.
    for name in ("r_t", "r_h", "total_mass"):
        np.testing.assert_allclose(float(getattr(one, name)), float(getattr(king, name)), rtol=1e-10)
    np.testing.assert_allclose(float(one.r_h_j[0]), float(king.r_h), rtol=1e-10)


def test_two_component_model_is_self_consistent_and_segregated():
    p = solve_mm(6.0, *TWO, 1.0, 0.5)
    # 16 fixed iterations contract the mass-fraction error ~3x each (module docs).
    assert float(p.mass_fraction_error) < 1e-6
    fractions = np.asarray(p.total_mass_j) / float(np.sum(p.total_mass_j))
    np.testing.assert_allclose(fractions, [0.6, 0.4], rtol=1e-6)
    # The component integrals add up to the mass from Poisson's equation
    # (same Tsit5 steps: ~1e-9 relative, as for the single-mass quadrature test).
    np.testing.assert_allclose(np.asarray(p.mass_j).sum(axis=0), np.asarray(p.mass), rtol=1e-7, atol=1e-12)
    r_h_light, r_h_heavy = (float(x) for x in p.r_h_j)
    assert r_h_heavy < float(p.r_h) < r_h_light
    # Heavy stars see a deeper potential b_j W0 (b = mu^(2 delta)).
    b = np.asarray(p.b_j)
    assert b[1] > 1 > b[0]


def test_delta_zero_removes_segregation():
    # With delta = 0 both components share one DF, so they have the same shape:
    # equal half-mass radii, equal to that of the whole (which the slow test
    # above ties to the single-mass King model).
    p = solve_mm(6.0, *TWO, 1.0, 0.0)
    np.testing.assert_allclose(np.asarray(p.r_h_j), float(p.r_h), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(p.b_j), 1.0, rtol=1e-14)


def test_a_dominant_heavy_component_fits_the_grid():
    # Issue 25 item 11: the heaviest bin of a Kroupa IMF (mean mass ~2.8 Msun
    # against ~0.2 for the rest, ~60% of the mass) dominates the centre, so in
    # King radii of the total central density the light stars reach out to
    # ~3e7 r_0: beyond the single-mass grid (1e5), which made king_builder fail
    # for most keys at W0 = 6 with 8 or 10 bins. Same shapes as TWO: no new compile.
    p = solve_mm(6.0, jnp.array([0.2, 2.8]), jnp.array([0.4, 0.6]), 1.0, 0.5)
    assert 1e5 < float(p.r_t) < 1e10
    assert float(p.mass_fraction_error) < 1e-5  # converged (measured 6e-7)
    assert float(p.r_h_j[1]) < float(p.r_h_j[0])  # heavy stars more concentrated
    # Beyond even the multi-mass grid: the message names what a builder user can change.
    with pytest.raises(Exception, match="lower W0, delta or mass_bins"):
        solve_mm(6.0, jnp.array([0.1, 3.0]), jnp.array([0.4, 0.6]), 1.0, 0.5).r_t.block_until_ready()


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(mass_bins=0), "mass_bins"),
        (dict(mass_bins=2, delta=2.0000001), "delta must be >= 0.0 and <= 2.0"),
        (dict(mass_bins=2.5), "mass_bins"),
        (dict(mass_bins=2, imf="equal"), "equal"),
        (dict(mass_bins=2, delta=-0.1), "delta"),
    ],
)
def test_bad_multimass_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        king_builder(0, n=10, **kwargs)


@pytest.mark.slow  # ~40 s: compiles the multi-mass builder (16 solves) at n = 1e5
def test_two_component_cluster_matches_the_model():
    ic = king_builder(jax.random.PRNGKey(3), n=100_000, W0=6.0, mass_bins=2)
    s = ic.state
    r = np.linalg.norm(np.asarray(s.positions), axis=1)
    m = np.asarray(s.masses)
    r_h_model = np.asarray(ic.params["component_r_h"])
    m_j = np.asarray(ic.params["component_masses"])
    assert m_j[1] > m_j[0]
    # Bins hold equal expected numbers, split at the IMF median mass. Within a
    # bin positions do not depend on the individual masses, so the bin's number
    # median radius estimates the component's half-mass radius; with ~5e4 stars
    # its relative standard error is sqrt(0.25 / 5e4) / (d ln N / d ln r) < 0.5%:
    # the required 2% is > 4 sigma.
    split = np.sort(m)[m.size // 2]
    measured = [np.median(r[m < split]), np.median(r[m >= split])]
    assert measured[1] < measured[0]
    np.testing.assert_allclose(measured, r_h_model, rtol=0.02)
    assert r.max() <= float(ic.params["r_t"]) * (1 + 1e-12)
    # Equilibrium without rescaling. Kroupa masses make the mass-weighted T and W
    # noisier than equal masses: relative scatter ~ sqrt(<m^2>/<m>^2 / n) ~ 1.2%,
    # so sigma(Q) ~ 0.006 and 0.02 is > 3 sigma.
    q = virial_ratio(s.positions, s.velocities, s.masses, method="spherical", centre=jnp.zeros(3))
    assert abs(float(q) - 0.5) < 0.02


@pytest.mark.slow  # reverse mode through 16 profile solves: ~1 min to compile
def test_multimass_gradients_match_finite_differences():
    def heavy_r_h(W0, delta):
        return solve_multimass_king_profile(W0, *TWO, 1.0, delta).r_h_j[1]

    grad = jax.jit(jax.grad(heavy_r_h, argnums=(0, 1)))(6.0, 0.5)
    f = jax.jit(heavy_r_h)
    h = 1e-5
    fd_W0 = (f(6.0 + h, 0.5) - f(6.0 - h, 0.5)) / (2 * h)
    fd_delta = (f(6.0, 0.5 + h) - f(6.0, 0.5 - h)) / (2 * h)
    # Fixed steps and fixed iterations: smooth in both; the iteration residual
    # (~1e-7) and FD truncation (~1e-10) bound the mismatch: 1e-5.
    np.testing.assert_allclose(float(grad[0]), float(fd_W0), rtol=1e-5)
    np.testing.assert_allclose(float(grad[1]), float(fd_delta), rtol=1e-5)


@pytest.mark.slow  # reverse mode through the multi-mass builder: ~2 min to compile
def test_multimass_builder_gradients_match_finite_differences():
    """d O / d (W0, delta, alpha) of O = sum m (x^2 + v^2) for a 4-bin cluster.

    Bin membership is fixed by each star's mass quantile, so the observable is
    smooth in alpha as well; FD with h = 1e-5 (truncation ~1e-10, rounding
    ~1e-11 relative) against the implicit/reverse-mode gradient: 1e-5.
    """

    def observable(W0, delta, alpha):
        s = king_builder(jax.random.PRNGKey(5), n=256, W0=W0, delta=delta, alpha=alpha, mass_bins=4).state
        return jnp.sum(s.masses * (jnp.sum(s.positions**2, 1) + jnp.sum(s.velocities**2, 1)))

    args = (6.0, 0.5, 2.3)
    grad = jax.jit(jax.grad(observable, argnums=(0, 1, 2)))(*args)
    f = jax.jit(observable)
    h = 1e-5
    for i in range(3):
        up = list(args)
        down = list(args)
        up[i] += h
        down[i] -= h
        fd = (f(*up) - f(*down)) / (2 * h)
        assert np.isfinite(float(grad[i])) and float(grad[i]) != 0.0
        np.testing.assert_allclose(float(grad[i]), float(fd), rtol=1e-5)
