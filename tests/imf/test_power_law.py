import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.imf import PowerLawIMF, kroupa, salpeter


def test_kroupa_mean_mass():
    np.testing.assert_allclose(kroupa().mean_mass(), 0.5739, atol=5e-5)


def test_kroupa_sample_mean_at_one_million():
    masses = kroupa().sample(jax.random.PRNGKey(0), (1_000_000,))
    # Standard error of the mean is std/sqrt(n) ~ 1.2 / 1000 ~ 0.2%: 1% is ~5 sigma.
    assert abs(float(masses.mean()) / 0.5739 - 1.0) < 0.01
    assert float(masses.min()) >= 0.08 and float(masses.max()) <= 100.0


@pytest.mark.parametrize("which", [0, 1])
def test_mean_mass_gradient_in_each_slope(which):
    def mean(slope):
        slopes = jnp.array([1.3, 2.3]).at[which].set(slope)
        return PowerLawIMF([0.08, 0.5, 100.0], slopes).mean_mass()

    s0 = [1.3, 2.3][which]
    h = 1e-6
    fd = (mean(s0 + h) - mean(s0 - h)) / (2 * h)
    np.testing.assert_allclose(jax.grad(mean)(s0), fd, rtol=1e-6)


def test_gradient_in_break_mass():
    mean = lambda b: PowerLawIMF(jnp.array([0.08, b, 100.0]), [1.3, 2.3]).mean_mass()
    h = 1e-6
    np.testing.assert_allclose(jax.grad(mean)(0.5), (mean(0.5 + h) - mean(0.5 - h)) / (2 * h), rtol=1e-6)


@pytest.mark.parametrize("slope", [1.0, 2.0])
def test_special_slopes_are_continuous_and_differentiable(slope):
    # Slope 1 is the log-uniform number integral, slope 2 the mass integral.
    imf = lambda a: PowerLawIMF([0.1, 10.0], [a])
    at = imf(slope)
    near = imf(slope + 1e-7)
    np.testing.assert_allclose(at.mean_mass(), near.mean_mass(), rtol=1e-6)
    u = jnp.linspace(0.01, 0.99, 7)
    np.testing.assert_allclose(at.icdf(u), near.icdf(u), rtol=1e-6)
    g = jax.grad(lambda a: jnp.sum(imf(a).icdf(u)) + imf(a).mean_mass())(slope)
    h = 1e-5
    fd = (
        jnp.sum(imf(slope + h).icdf(u))
        + imf(slope + h).mean_mass()
        - jnp.sum(imf(slope - h).icdf(u))
        - imf(slope - h).mean_mass()
    ) / (2 * h)
    assert np.isfinite(g)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_pdf_cdf_icdf_consistent():
    imf = kroupa()
    m = np.geomspace(0.08, 100.0, 200_001)
    pdf = np.asarray(imf.pdf(m))
    integral = np.sum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(m))
    np.testing.assert_allclose(integral, 1.0, rtol=1e-6)
    u = jnp.linspace(0.0, 1.0, 101)
    np.testing.assert_allclose(imf.cdf(imf.icdf(u)), u, atol=1e-13)
    np.testing.assert_allclose(imf.cdf(jnp.array([0.01, 0.08, 100.0, 200.0])), [0, 0, 1, 1], atol=1e-15)
    # Continuity of the pdf at the break.
    np.testing.assert_allclose(imf.pdf(0.5 - 1e-12), imf.pdf(0.5 + 1e-12), rtol=1e-9)


def test_salpeter_matches_closed_form():
    imf = salpeter()
    a, lo, hi = 2.35, 0.1, 100.0
    expected = (1 - a) / (2 - a) * (hi ** (2 - a) - lo ** (2 - a)) / (hi ** (1 - a) - lo ** (1 - a))
    np.testing.assert_allclose(imf.mean_mass(), expected, rtol=1e-12)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="breaks"):
        PowerLawIMF([0.1, 1.0], [1.3, 2.3])


def test_float32_sampling():
    with jax.enable_x64(False):
        m = kroupa().sample(jax.random.PRNGKey(0), (10_000,))
        assert m.dtype == jnp.float32
        assert bool(jnp.all(jnp.isfinite(m)))
        assert abs(float(m.mean()) / 0.5739 - 1) < 0.05
        g = jax.grad(lambda a: kroupa(a).sample(jax.random.PRNGKey(0), (100,)).sum())(jnp.float32(2.3))
        assert jnp.isfinite(g)


def _single_slope_mean(a, lo, hi):
    return (1 - a) / (2 - a) * (hi ** (2 - a) - lo ** (2 - a)) / (hi ** (1 - a) - lo ** (1 - a))


@pytest.mark.parametrize(
    ("m_min", "m_max", "slope"),
    [(1.0, 100.0, 2.3), (0.6, 10.0, 2.3), (0.08, 0.3, 1.3)],
    ids=["above-break", "above-break-narrow", "below-break"],
)
def test_kroupa_ends_on_one_side_of_the_break_give_that_slope_alone(m_min, m_max, slope):
    """The break is clamped into [m_min, m_max]: kroupa(m_min=1) was a two-segment
    law on (1, 0.5, 100) with a negative CDF and masses from 1.82 Msun, mean 5.5."""
    imf = kroupa(m_min=m_min, m_max=m_max)
    np.testing.assert_allclose(imf.mean_mass(), _single_slope_mean(slope, m_min, m_max), rtol=1e-12)
    m = np.linspace(m_min, m_max, 7)
    expected = (m ** (1 - slope) - m_min ** (1 - slope)) / (m_max ** (1 - slope) - m_min ** (1 - slope))
    np.testing.assert_allclose(imf.cdf(m), expected, rtol=1e-12, atol=1e-15)
    u = jnp.linspace(0.01, 0.99, 5)
    np.testing.assert_allclose(imf.cdf(imf.icdf(u)), u, rtol=1e-12)


def test_unordered_masses_raise():
    with pytest.raises(ValueError, match="m_min < m_max"):
        kroupa(m_min=5.0, m_max=1.0)
    with pytest.raises(ValueError, match="m_min < m_max"):
        PowerLawIMF([0.1, 1.0, 0.5], [1.3, 2.3])
    with pytest.raises(ValueError, match="m_min < m_max"):
        salpeter(m_min=0.0)


def test_non_finite_masses_and_slopes_raise():
    # A NaN slope gave an all-NaN cluster and `--m-max inf` a raw IndexError
    # from the command line's summary; any finite slope stays an IMF.
    with pytest.raises(ValueError, match="masses must be finite"):
        kroupa(m_max=np.inf)
    with pytest.raises(ValueError, match="slopes must be finite"):
        PowerLawIMF([0.08, 0.5, 100.0], [1.3, np.nan])
    with pytest.raises(ValueError, match="slopes must be finite"):
        salpeter(np.inf)
    assert np.all(np.isfinite(kroupa(0.0).sample(jax.random.PRNGKey(0), (4,))))  # flat above the break: an IMF
