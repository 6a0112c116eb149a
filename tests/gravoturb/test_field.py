"""The log-density and velocity fields: PDF against the model, spectra, normalisation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.gravoturb import (
    PiecewiseLogDensityPDF,
    compressive_fraction,
    gaussian_random_field,
    lognormal_variance_fit,
    spectral_slope,
    tail_slope_fit,
    turbulent_field,
    velocity_field,
    volume_mean_density,
)
from progenax.gravoturb.field import check_grid, mid_rank_uniforms, wavevectors

_build = eqx.filter_jit(turbulent_field)
SOUND_SPEED = 0.2


def build(grid, mach, alpha, b=0.4, seed=0, velocity_beta=4.0):
    f = dict(mach=mach, pdf_slope=alpha, b=b, beta=11.0 / 3.0, velocity_beta=velocity_beta)
    f.update(r_cloud=1.0, sound_speed=SOUND_SPEED)
    f = {k: jnp.asarray(v, jnp.float64) for k, v in f.items()}
    return _build(jax.random.PRNGKey(seed), grid=grid, geometry="box", **f)


@pytest.mark.parametrize("grid", [4, 7, 12, 48, 8.0, True, "16"])
def test_grid_must_be_a_power_of_two_of_at_least_8(grid):
    with pytest.raises(ValueError, match="grid"):
        check_grid(grid)


def test_mid_rank_uniforms_are_exact_and_keep_the_order():
    z = jax.jit(gaussian_random_field, static_argnums=1)(jax.random.PRNGKey(3), 8, 3.0)
    u, uc = jax.jit(mid_rank_uniforms)(z)
    n = z.size
    np.testing.assert_array_equal(np.sort(np.asarray(u).ravel()), (np.arange(n) + 0.5) / n)
    np.testing.assert_array_equal(np.asarray(u + uc), np.ones(z.shape))
    assert np.all(np.argsort(np.asarray(u).ravel()) == np.argsort(np.asarray(z).ravel()))


def _check_pdf(field, pdf, *, variance_tolerance):
    s = np.asarray(field.log_density).ravel()
    n = s.size
    s_t = float(pdf.s_t)
    # Rank copula: the sorted cell values are the model's mid-rank quantiles, so the
    # empirical CDF equals the model CDF at every cell up to rounding (no sampling noise).
    np.testing.assert_allclose(np.asarray(pdf.cdf(np.sort(s))), (np.arange(n) + 0.5) / n, rtol=0, atol=1e-10)
    # Spatial structure kept: s is a monotone function of the Gaussian field.
    # Lognormal part: exact quantiles, so the fit's error is the binning bias
    # (~ bin width^2 / 12 over sigma^2, < 0.5%) and the +-1 rounding of counts >= 100.
    var = lognormal_variance_fit(s, s_t)
    assert var == pytest.approx(float(pdf.variance), rel=variance_tolerance)
    # Tail: the MLE over the n_t exact tail quantiles is a midpoint rule of
    # int -ln(x) dx, whose error is < 0.51 / n_t (end cell + convexity), plus at most
    # one cell straddling s_t: |alpha_hat - alpha| < 2 alpha / n_t.
    alpha_hat, n_t = tail_slope_fit(s, s_t)
    assert abs(alpha_hat - float(pdf.alpha)) < 2.0 * float(pdf.alpha) / n_t
    # Mean density: the grid is a midpoint rule of int e^{s(u)} du = 1, which misses part
    # of the top cell's mass (integrable singularity (1-u)^(-1/alpha)) and no more
    # than that mass in all: 0 <= 1 - <e^s> <= mass of the top 1/N of the volume.
    top_cell_mass = float(pdf.mass_above(pdf.quantile(1.0 - 1.0 / n, 1.0 / n)))
    deficit = 1.0 - volume_mean_density(s)
    assert -1e-12 <= deficit <= top_cell_mass
    return var, alpha_hat, deficit


@pytest.mark.parametrize("mach, alpha", [(2.0, 1.5), (5.0, 2.5), (10.0, 1.5)])
def test_log_density_pdf_matches_model_64(mach, alpha):
    field, pdf = build(64, mach, alpha)
    _check_pdf(field, pdf, variance_tolerance=0.03)


def _check_velocity(field, mach, b, beta):
    v = np.asarray(field.velocity)
    rms_mach = np.sqrt(np.mean(np.sum(v**2, axis=-1))) / SOUND_SPEED
    # The grid is divided by its own rms: exact up to rounding.
    assert rms_mach == pytest.approx(mach, rel=1e-12)
    # Shell k holds ~ 12 pi k^2 real modes (3 components), each |v_k|^2 exponential, so
    # the shell mean scatters by 1 / sqrt(12 pi k^2) (8% at k = 2); the least-squares
    # slope over shells 2..g/4 has a standard error < 0.05, and averaging k^-beta
    # over integer-width shells biases log P by < beta (beta + 1) / (24 k^2) (0.2 at
    # k = 2, falling as k^-2; slope bias < 0.1). 0.2 covers both.
    assert spectral_slope(v) == pytest.approx(-beta, abs=0.2)
    # Compressive share of the power, measured by projecting each mode on k-hat.
    modes = np.fft.rfftn(v, axes=(0, 1, 2))
    kx, ky, kz = (np.asarray(k) for k in wavevectors(v.shape[0], jnp.float64))
    k = np.sqrt(kx**2 + ky**2 + kz**2)
    k = np.where(k > 0, k, 1.0)
    along = (kx * modes[..., 0] + ky * modes[..., 1] + kz * modes[..., 2]) / k
    weight = np.full(k.shape, 2.0)
    weight[..., 0] = weight[..., -1] = 1.0
    chi = np.sum(weight * np.abs(along) ** 2) / np.sum(weight[..., None] * np.abs(modes) ** 2)
    assert chi == pytest.approx(float(compressive_fraction(b)), abs=1e-10)


@pytest.mark.parametrize("b", [0.2, 0.4, 1.0])
def test_velocity_field_rms_spectrum_and_mix_64(b):
    field, _ = build(64, 5.0, 2.0, b=b)
    _check_velocity(field, 5.0, b, 4.0)


def test_velocity_spectrum_follows_requested_slope():
    field, _ = build(64, 2.0, 2.0, velocity_beta=3.0)
    _check_velocity(field, 2.0, 0.4, 3.0)


def test_gaussian_field_spectrum():
    z = jax.jit(gaussian_random_field, static_argnums=1)(jax.random.PRNGKey(1), 64, 11.0 / 3.0)
    # Same shell statistics as the velocity check (one component: scatter sqrt(3) larger).
    assert spectral_slope(z) == pytest.approx(-11.0 / 3.0, abs=0.2)


# -- acceptance on 128^3 (make validate) ------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mach", [2.0, 5.0, 10.0])
@pytest.mark.parametrize("alpha", [1.5, 2.5])
def test_acceptance_pdf_128(mach, alpha):
    field, pdf = build(128, mach, alpha)
    var, alpha_hat, deficit = _check_pdf(field, pdf, variance_tolerance=0.03)
    # The tolerances, on top of the model-derived ones above.
    assert abs(alpha_hat - alpha) < 0.1
    assert abs(deficit) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("mach", [2.0, 5.0, 10.0])
def test_acceptance_velocity_128(mach):
    field, _ = build(128, mach, 2.0)
    _check_velocity(field, mach, 0.4, 4.0)


def test_pieces_validate_their_input():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="grid"):
        gaussian_random_field(key, 24, 3.0)
    with pytest.raises(ValueError, match="mach"):
        velocity_field(key, 8, 0.0, 0.2, 0.4)
    with pytest.raises(ValueError, match="b must"):
        velocity_field(key, 8, 2.0, 0.2, 1.5)
    with pytest.raises(ValueError, match="pdf_slope"):
        turbulent_field(key, grid=8, pdf_slope=1.0)
    with pytest.raises(ValueError, match="alpha"):
        PiecewiseLogDensityPDF.from_turbulence(5.0, 0.9, 0.4)
    with pytest.raises(ValueError, match="shape"):
        spectral_slope(np.zeros((8, 8, 4)))
