"""EFF profile: CDF, normalisation, half-mass radius, Jeans dispersion, sampler, gradients."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

from progenax.profiles.eff import (
    eff_density,
    eff_density_norm,
    eff_mass_fraction,
    eff_projected_half_mass_radius,
    eff_sample_radii,
    eff_scale_radius,
    eff_velocity_dispersion,
)
from progenax.sampling import uniform_open

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py


def padded(f):
    """jit(f) on radii padded to a multiple of 256: one compile per call structure
    (r_t given or not; parameters are traced), whatever the number of radii."""
    f = jax.jit(f)

    def call(r, *args):
        r = np.atleast_1d(np.asarray(r, dtype=float))
        buffer = np.ones(-(-r.size // 256) * 256)
        buffer[: r.size] = r
        return np.asarray(f(buffer, *args))[: r.size]

    return call


fraction = padded(eff_mass_fraction)
density = padded(eff_density)
density_scalar = jax.jit(eff_density)  # for scipy's quad, one radius at a time
dispersion = padded(eff_velocity_dispersion)
sample = jax.jit(eff_sample_radii)

TRUNCATED = [(3.0, 5.0), (0.5, 50.0), (2.0, 3.0), (6.0, 0.5)]  # (gamma, r_t / a)


# Scalar functions whose gradients are checked; module-level so compiles are shared.
def frac_u(r, g, a):
    return eff_mass_fraction(r, g, a)


def frac_t(r, g, a, t):
    return eff_mass_fraction(r, g, a, t)


def sigma_u(r, g, a, m):
    return eff_velocity_dispersion(r, g, a, m, 0.7)


def sigma_t(r, g, a, t):
    return eff_velocity_dispersion(r, g, a, 2.0, 0.7, t)


def density_t(r, g, a, t):
    return eff_density(r, g, a, 1.0, t)


def scale_u(rh, g):
    return eff_scale_radius(rh, g)


def scale_t(rh, g, t):
    return eff_scale_radius(rh, g, t)


@functools.cache
def compiled(f, n):
    """jit(value_and_grad(f)) in all n arguments, compiled once per function."""
    return jax.jit(jax.value_and_grad(f, argnums=tuple(range(n))))


def assert_gradients(f, args, rtol=1e-6, h=1e-5):
    """jax.grad of scalar f against relative central differences in every argument."""
    run = compiled(f, len(args))
    for i, g in enumerate(run(*args)[1]):
        up, down = list(args), list(args)
        up[i], down[i] = float(args[i] * (1 + h)), float(args[i] * (1 - h))
        fd = (run(*up)[0] - run(*down)[0]) / (2 * h * args[i])
        assert np.isfinite(g)
        np.testing.assert_allclose(g, fd, rtol=rtol, atol=1e-12, err_msg=f"argument {i}")


def quad_mass(s, gamma, r_max=np.inf):
    """Unnormalised M(<s) of rho = (1 + s^2)^(-(gamma+1)/2), a = 1, by adaptive quadrature
    (in t up to 1, in ln t beyond, where the integrand is smooth and decays)."""
    s = min(s, r_max)
    core = lambda t: 4 * np.pi * t**2 * (1 + t * t) ** (-(gamma + 1) / 2)
    halo = lambda v: 4 * np.pi * np.exp(3 * v - (gamma + 1) / 2 * np.logaddexp(0, 2 * v))
    inner = integrate.quad(core, 0, min(s, 1.0), epsabs=0, epsrel=1e-13)[0]
    outer = integrate.quad(halo, 0, np.log(s), epsabs=0, epsrel=1e-13, limit=200)[0] if s > 1 else 0.0
    return inner + outer


# -- enclosed mass ---------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [2.2, 2.5, 3.0, 4.0, 5.5, 8.0])
def test_mass_fraction_matches_betainc(gamma):
    q = np.logspace(-4, 4, 161)
    ours = np.asarray(fraction(q, gamma, 1.0))
    ref = special.betainc(1.5, (gamma - 2) / 2, q**2 / (1 + q**2))
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)
    # Same with a != 1: only r/a matters.
    np.testing.assert_allclose(np.asarray(fraction(2.5 * q, gamma, 2.5)), ours, rtol=1e-13)


def test_mass_fraction_halo_against_quadrature():
    # scipy's betainc itself drifts to ~1e-10 at gamma = 2.2, r/a = 1e4; the halo series
    # is checked here against direct quadrature of the complement, to 1e-12.
    gamma, q = 2.2, np.array([3.0, 30.0, 1e3, 1e4])
    b = (gamma - 2) / 2
    y = 1 / (1 + q**2)
    outside = [integrate.quad(lambda s: s ** (b - 1) * np.sqrt(1 - s), 0, yi, epsabs=0, epsrel=1e-13)[0] for yi in y]
    ref = 1 - np.array(outside) / special.beta(1.5, b)
    np.testing.assert_allclose(np.asarray(fraction(q, gamma, 1.0)), ref, rtol=1e-12)


@pytest.mark.parametrize("gamma, r_t", TRUNCATED)
def test_truncated_mass_fraction_against_quadrature(gamma, r_t):
    q = np.array([1e-3, 0.1, 0.5, 0.99, 2.0, 10.0, 49.0]) * min(r_t, 1.0)
    q = np.append(q[q < r_t], [r_t, 2 * r_t])
    ref = np.array([quad_mass(s, gamma, r_t) for s in q]) / quad_mass(r_t, gamma)
    np.testing.assert_allclose(np.asarray(fraction(q, gamma, 1.0, r_t)), ref, rtol=1e-11)


@pytest.mark.parametrize("gamma, r_t", [(2.5, None), (3.0, None), (6.0, None)] + TRUNCATED)
def test_density_integrates_to_total_mass(gamma, r_t):
    a, total = 1.7, 3.0
    rho = lambda r: float(density_scalar(r, gamma, a, total, r_t))
    edge = np.inf if r_t is None else r_t * a
    pieces = [0.0, a, 10 * a, np.inf] if r_t is None else [0.0, min(a, edge), edge]
    mass = sum(
        integrate.quad(lambda r: 4 * np.pi * r**2 * rho(r), lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]
        for lo, hi in zip(pieces[:-1], pieces[1:])
        if hi > lo
    )
    np.testing.assert_allclose(mass, total, rtol=1e-9)
    if r_t is None:  # the normaliser is Euler's Beta function
        beta = special.beta(1.5, (gamma - 2.0) / 2.0)
        np.testing.assert_allclose(eff_density_norm(gamma, a), beta, rtol=1e-13)
    r = np.array([0.0, 0.5, 2.0]) * a
    np.testing.assert_array_equal(
        eff_density(r, gamma, a, total, r_t, norm=eff_density_norm(gamma, a, r_t)), eff_density(r, gamma, a, total, r_t)
    )
    if r_t is not None:
        assert density(1.01 * edge, gamma, a, total, r_t)[0] == 0.0
    # dM/dr = 4 pi r^2 rho, with M from the series and the derivative from autodiff.
    r = np.array([0.3, 1.0, 2.9]) * min(a, edge)
    if r_t is None:
        dm = [total * compiled(frac_u, 3)(float(ri), gamma, a)[1][0] for ri in r]
    else:
        dm = [total * compiled(frac_t, 4)(float(ri), gamma, a, r_t)[1][0] for ri in r]
    np.testing.assert_allclose(dm, 4 * np.pi * r**2 * density(r, gamma, a, total, r_t), rtol=1e-12)


# -- half-mass radii --------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [2.3, 3.0, 4.0, 8.0])
def test_scale_radius_round_trip(gamma):
    a = float(compiled(scale_u, 2)(1.3, gamma)[0])  # shares the compile of the gradient test
    np.testing.assert_allclose(fraction(1.3, gamma, a), 0.5, rtol=1e-12)
    if gamma == 4.0:  # Plummer: r_h = a / sqrt(2^(2/3) - 1)
        np.testing.assert_allclose(a, 1.3 * np.sqrt(2 ** (2 / 3) - 1), rtol=1e-12)


@pytest.mark.parametrize("gamma, r_t", [(3.0, 5.0), (0.5, 1.4), (2.0, 10.0), (6.0, 1.5), (1.0, 1.3)])
def test_truncated_scale_radius_round_trip(gamma, r_t):
    a = float(compiled(scale_t, 3)(1.0, gamma, r_t)[0])
    np.testing.assert_allclose(fraction(1.0, gamma, a, r_t), 0.5, rtol=1e-12)


def test_scale_radius_rejects_impossible_truncation():
    with pytest.raises(ValueError, match="r_h"):
        eff_scale_radius(1.0, 3.0, 1.2)  # half the mass can never lie within 0.83 r_t
    with pytest.raises(ValueError, match="gamma"):
        eff_scale_radius(1.0, 1.9)  # untruncated needs gamma > 2


def test_projected_half_mass_radius():
    for gamma in [2.5, 3.0, 4.0, 7.0]:
        a = 1.4
        R = float(eff_projected_half_mass_radius(gamma, a))
        sigma = lambda R: 2 * np.pi * R * (1 + (R / a) ** 2) ** (-gamma / 2)
        inside = integrate.quad(sigma, 0, R, epsabs=0, epsrel=1e-12)[0]
        total = integrate.quad(sigma, 0, np.inf, epsabs=0, epsrel=1e-12)[0]
        np.testing.assert_allclose(inside / total, 0.5, rtol=1e-9)
    np.testing.assert_allclose(eff_projected_half_mass_radius(4.0, 1.0), 1.0, rtol=1e-14)  # Plummer


# -- Jeans velocity dispersion -------------------------------------------------------------


def test_dispersion_plummer_closed_form():
    r = np.logspace(-3, 3, 61)
    r = np.append(r, 0.0)
    G, M, a = 4.3e-3, 1e4, 0.8
    sigma = np.asarray(dispersion(r, 4.0, a, M, G, None))
    np.testing.assert_allclose(sigma**2, G * M / (6 * np.sqrt(r**2 + a**2)), rtol=1e-8)


@pytest.mark.parametrize("gamma, r_t", [(3.0, None), (3.0, 5.0), (0.5, 50.0), (2.0, 3.0)])
def test_dispersion_against_nested_quadrature(gamma, r_t):
    # sigma^2(r) = G/rho(r) int_r^edge rho(s) M(<s) / s^2 ds, a = 1, M = G = 1.
    edge = np.inf if r_t is None else r_t
    m_total = quad_mass(edge, gamma)
    rho = lambda s: (1 + s * s) ** (-(gamma + 1) / 2)

    def sigma2(r):
        f = lambda s: rho(s) * quad_mass(s, gamma) / m_total / s**2
        pieces = [r, max(r, 1.0), max(r, 30.0), edge] if r_t is None else [r, edge]
        parts = [integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0] for lo, hi in zip(pieces, pieces[1:])]
        return sum(parts) / rho(r)

    r = np.array([1e-3, 0.3, 1.0, 2.9, 20.0])
    r = r[r < edge]
    ref = np.sqrt([sigma2(ri) for ri in r])
    np.testing.assert_allclose(np.asarray(dispersion(r, gamma, 1.0, 1.0, 1.0, r_t)), ref, rtol=1e-9)


@pytest.mark.parametrize("gamma, r_t", [(3.0, 5.0), (0.5, 50.0)])
def test_dispersion_vanishes_at_truncation(gamma, r_t):
    r = np.array([r_t * (1 - 1e-8), r_t, 2 * r_t])
    sigma = np.asarray(dispersion(r, gamma, 1.0, 1.0, 1.0, r_t))
    assert sigma[0] < 1e-3 and sigma[1] == 0.0 and sigma[2] == 0.0
    assert np.all(np.isfinite(compiled(sigma_t, 4)(r_t, gamma, 1.0, r_t)[1]))


# -- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma, r_t", [(3.0, None), (2.2, None), (1.5, 10.0), (4.0, 2.0)])
def test_sampled_radii_follow_the_cdf(gamma, r_t):
    u = uniform_open(jax.random.PRNGKey(7), (10_000,))
    r = sample(u, gamma, 1.5, r_t)
    cdf = lambda x: np.asarray(fraction(x, gamma, 1.5, r_t))
    # The inverse is exact to rounding, so F(r(u)) = u, far below the KS resolution.
    np.testing.assert_allclose(cdf(np.asarray(r)), np.asarray(u), rtol=0, atol=1e-13)
    # KS at n = 10,000 has a 1% critical distance of 0.016: a wrong inverse fails it.
    assert stats.kstest(np.asarray(r), cdf).pvalue > 0.01
    if r_t is not None:
        assert float(jnp.max(r)) <= 1.5 * r_t * (1 + 1e-12)


def test_sampler_resolves_extreme_uniforms():
    u = jnp.array([1e-300, 2.3e-16, 0.5, 1 - 1e-12, 1 - 2.2e-16])
    filler = uniform_open(jax.random.PRNGKey(7), (10_000 - 5,))  # same shape as above: no recompile
    r = np.asarray(sample(jnp.concatenate([u, filler]), 2.5, 1.0, None))[:5]
    assert np.all(np.isfinite(r)) and np.all(np.diff(r) > 0)
    outside = special.betainc(0.25, 1.5, 1 / (1 + r[-2:] ** 2))  # 1 - F with b = 1/4
    np.testing.assert_allclose(outside, 1 - np.asarray(u[-2:]), rtol=1e-8)


# -- gradients against central differences ------------------------------------------------------


@pytest.mark.parametrize("r", [0.05, 0.9, 3.0, 40.0])
def test_mass_fraction_gradients(r):
    assert_gradients(frac_u, (r, 3.0, 1.2))
    assert_gradients(frac_t, (r, 1.5, 1.2, 60.0))


def _sampled_sum(g, a, t):
    u = uniform_open(jax.random.PRNGKey(3), (64,))
    return jnp.sum(jnp.linspace(0.5, 1.5, 64) * eff_sample_radii(u, g, a, t))


def _sampled_log_sum(g, a):
    u = uniform_open(jax.random.PRNGKey(3), (64,))
    return jnp.sum(jnp.linspace(0.5, 1.5, 64) * jnp.log(eff_sample_radii(u, g, a)))


def test_sampled_radii_gradients():
    assert_gradients(_sampled_log_sum, (2.7, 1.3))
    assert_gradients(_sampled_sum, (2.7, 1.3, 8.0))
    assert_gradients(_sampled_sum, (0.7, 1.3, 8.0))


def test_scale_radius_gradients():
    assert_gradients(scale_u, (1.1, 3.5))
    assert_gradients(scale_t, (1.1, 3.5, 6.0))
    assert_gradients(scale_t, (1.0, 1.2, 1.6))


@pytest.mark.parametrize("r", [0.02, 0.8, 4.0])
def test_dispersion_gradients(r):
    assert_gradients(sigma_u, (r, 3.2, 1.1, 2.0))
    assert_gradients(sigma_t, (r, 3.2, 1.1, 5.0))
    assert_gradients(sigma_t, (r, 0.6, 1.1, 30.0))


@pytest.mark.parametrize(
    "f, args",
    [
        (frac_t, (0.0, 3.0, 1.0, 4.0)),
        (frac_t, (4.0, 3.0, 1.0, 4.0)),
        (density_t, (0.0, 0.5, 1.0, 4.0)),
        (sigma_t, (0.0, 3.0, 1.0, 4.0)),
        (sigma_t, (4.0, 0.5, 1.0, 4.0)),
        (frac_u, (0.0, 3.0, 1.0)),
        (sigma_u, (0.0, 3.0, 1.0, 1.0)),
    ],
)
def test_no_nan_at_centre_and_edge(f, args):
    value, grads = compiled(f, len(args))(*args)
    assert np.all(np.isfinite([value, *grads]))


# -- float32 -------------------------------------------------------------------------------


@pytest.mark.parametrize("r_t", [None, 10.0])
def test_float32_no_nan(r_t):
    with jax.enable_x64(False):
        u = uniform_open(jax.random.PRNGKey(0), (2000,), jnp.float32)

        def observable(g, a):
            r = eff_sample_radii(u, g, a, r_t)
            sigma = eff_velocity_dispersion(r, g, a, 1.0, 1.0, r_t)
            a_half = eff_scale_radius(a, jax.lax.stop_gradient(g), r_t)  # r_h = a; values only
            aux = (r, eff_mass_fraction(r, g, a, r_t), eff_mass_fraction(a, g, a_half, r_t))
            return jnp.mean(jnp.log(r)) + jnp.mean(sigma), aux

        run = jax.jit(jax.value_and_grad(observable, argnums=(0, 1), has_aux=True))
        (_, (r, F, half)), grads = run(jnp.float32(2.6), jnp.float32(1.0))  # float32 floor: 2.544
        assert r.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(r)))
        assert float(jnp.max(jnp.abs(F - u))) < 1e-5  # float32 rounding of u near 1
        assert abs(float(half) - 0.5) < 1e-5
        assert all(g.dtype == jnp.float32 and bool(jnp.isfinite(g)) for g in grads)


@pytest.mark.parametrize("b", [-0.9, -0.25, 1e-6, 0.5, 2.0])
def test_core_coefficients_derivative_is_the_running_products(b):
    # The series coefficients A_j = prod_{i<j} (b + 3/2 + i) / (5/2 + i) carry
    # a closed-form derivative; it must equal autodiff of the running product
    # itself (b < 0: gamma in (0, 2), truncated models) to round-off.
    from progenax.profiles.eff import _N_TERMS, _core_coefficients

    def running_product(b):
        j = jnp.arange(_N_TERMS - 1, dtype=b.dtype)
        ratios = (b + 1.5 + j) / (2.5 + j)
        return jnp.cumprod(jnp.concatenate([jnp.ones(1, b.dtype), ratios]))

    b = jnp.float64(b)
    np.testing.assert_array_equal(np.asarray(_core_coefficients(b)), np.asarray(running_product(b)))
    np.testing.assert_allclose(jax.jacfwd(_core_coefficients)(b), jax.jacfwd(running_product)(b), rtol=1e-13)
    np.testing.assert_allclose(jax.jacrev(_core_coefficients)(b), jax.jacfwd(running_product)(b), rtol=1e-13)
