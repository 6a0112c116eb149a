"""The Burkhart (2018) / Burkhart & Mocz (2019) piecewise log-density PDF."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.gravoturb.pdf import PiecewiseLogDensityPDF, log_density_variance

CASES = [(2.0, 1.5), (5.0, 2.5), (10.0, 1.1)]


def _pdf(mach, alpha, b=0.4):
    return PiecewiseLogDensityPDF.from_turbulence(mach, alpha, b)


def _quadrature(p, f):
    """Trapezoid integral of f(s) p(s) on a fine grid reaching far into both tails."""
    s = np.linspace(-60.0, 600.0, 330_001)
    y = np.asarray(f(s) * p.pdf(s))
    return float(np.sum(0.5 * (y[1:] + y[:-1])) * (s[1] - s[0]))


@pytest.mark.parametrize("mach, alpha", CASES)
def test_normalised_and_unit_mean_density(mach, alpha):
    p = _pdf(mach, alpha)
    # Step h = 2e-3 in s: the trapezoid error (h^2/12) max|f''| and the kink at s_t
    # (h^2 alpha^2 p_t) stay below 1e-6.
    assert _quadrature(p, lambda s: 1.0) == pytest.approx(1.0, abs=1e-6)
    assert _quadrature(p, np.exp) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("mach, alpha", CASES)
def test_continuous_in_value_and_slope_at_transition(mach, alpha):
    p = _pdf(mach, alpha)
    s_t = float(p.s_t)
    eps = 1e-7
    below, above = float(p.log_pdf(s_t - eps)), float(p.log_pdf(s_t + eps))
    assert below == pytest.approx(above, abs=1e-5)
    slope_below = float(jax.grad(p.log_pdf)(s_t - 1e-3))
    slope_above = float(jax.grad(p.log_pdf)(s_t + 1e-3))
    # Lognormal slope at s_t - h is -alpha + h / sigma^2.
    assert slope_above == pytest.approx(-alpha, rel=1e-12)
    assert slope_below == pytest.approx(-alpha + 1e-3 / float(p.variance), rel=1e-9)


@pytest.mark.parametrize("mach, alpha", CASES)
def test_transition_and_mean_shift(mach, alpha):
    p = _pdf(mach, alpha)
    var = float(log_density_variance(mach, 0.4))
    assert float(p.variance) == pytest.approx(np.log1p(0.16 * mach**2), rel=1e-14)
    shift = float(p.s0) + 0.5 * var
    assert shift < 0.0  # the tail's extra mass lowers the lognormal's mean
    assert float(p.s_t) == pytest.approx((alpha - 0.5) * var + shift, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("mach, alpha", CASES)
def test_quantile_inverts_cdf(mach, alpha):
    p = _pdf(mach, alpha)
    u = jnp.concatenate([jnp.linspace(1e-9, 1 - 1e-9, 1001), jnp.asarray([float(p.transition_mass)])])
    np.testing.assert_allclose(np.asarray(p.cdf(p.quantile(u))), np.asarray(u), rtol=1e-9, atol=1e-13)
    # 1 - u passed exactly keeps the far tail: u = 1 - 1e-20 is not representable.
    # In the tail the survival 1 - F(s) is p(s) / alpha.
    s_far = float(p.quantile(1.0, 1e-20))
    assert s_far > float(p.s_t)
    assert float(p.pdf(s_far)) / alpha == pytest.approx(1e-20, rel=1e-9)


@pytest.mark.parametrize("mach, alpha", CASES)
def test_mass_above_matches_quadrature(mach, alpha):
    p = _pdf(mach, alpha)
    s_cut = float(p.s_t) + 1.0
    expected = _quadrature(p, lambda s: np.exp(s) * (s >= s_cut))
    # The step in the integrand costs at most half a trapezoid cell, h/2 * e^s p(s) ~ 1e-3 alpha of the mass.
    assert float(p.mass_above(s_cut)) == pytest.approx(expected, rel=3e-3)


def test_quantile_gradients_are_finite_on_both_branches():
    u = jnp.asarray([1e-6, 0.3, 0.9, 0.999999])

    def total(mach, alpha, b):
        return jnp.sum(_pdf(mach, alpha, b).quantile(u))

    grads = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(5.0, 2.0, 0.4)
    assert all(np.isfinite(float(g)) for g in grads)


def test_float32_pdf_has_no_nan():
    with jax.enable_x64(False):
        u = jnp.linspace(1e-6, 1 - 1e-6, 101, dtype=jnp.float32)

        def total(mach):
            return jnp.sum(PiecewiseLogDensityPDF.from_turbulence(mach, 1.5, 0.4).quantile(u))

        s = jax.jit(lambda m: PiecewiseLogDensityPDF.from_turbulence(m, 1.5, 0.4).quantile(u))(jnp.float32(5.0))
        assert s.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(s)))
        assert bool(jnp.isfinite(jax.jit(jax.grad(total))(jnp.float32(5.0))))
