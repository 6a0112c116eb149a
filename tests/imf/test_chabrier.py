"""The Chabrier (2003) log-normal IMF: normalisation, inverse CDF, gradients, checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from progenax.imf import ChabrierIMF, chabrier

PARAMETERS = ("m_c", "sigma", "alpha", "m_min", "m_max")
VALUES = dict(m_c=0.079, sigma=0.69, alpha=2.3, m_min=0.08, m_max=100.0)


def test_fraction_below_one_msun_matches_chabriers_table():
    # Chabrier (2003, Table 1), in his own form: dN/dlog10 m = 0.158 exp(-(log m -
    # log 0.079)^2 / (2 0.69^2)) below 1 Msun and 4.43e-2 m^-1.3 above. His tail
    # constant is the continuity value rounded to three digits (0.2% off), so the
    # fractions agree to about that: 1% is the tolerance.
    def low(y):
        return 0.158 * np.exp(-((y - np.log10(0.079)) ** 2) / (2 * 0.69**2))

    def high(y):
        return 4.43e-2 * 10 ** (-1.3 * y)

    n_low = integrate.quad(low, np.log10(0.08), 0.0)[0]
    n_high = integrate.quad(high, 0.0, 2.0)[0]
    np.testing.assert_allclose(float(chabrier().cdf(1.0)), n_low / (n_low + n_high), rtol=1e-2)


def test_pdf_is_normalised_continuous_and_gives_the_mean_mass():
    imf = chabrier()
    m = np.geomspace(0.08, 100.0, 400_001)
    pdf = np.asarray(imf.pdf(m))
    # Trapezoid on 4e5 log-spaced nodes: relative error ~ (ln(1250)/4e5)^2 ~ 1e-10.
    np.testing.assert_allclose(np.trapezoid(pdf, m), 1.0, rtol=1e-8)
    np.testing.assert_allclose(np.trapezoid(m * pdf, m), float(imf.mean_mass()), rtol=1e-8)
    below, above = imf.pdf(1.0 - 1e-12), imf.pdf(1.0 + 1e-12)
    np.testing.assert_allclose(below, above, rtol=1e-9)
    assert float(imf.pdf(0.05)) == 0.0 and float(imf.pdf(200.0)) == 0.0


def test_icdf_inverts_cdf_in_both_parts():
    imf = chabrier(system=True)
    u = jnp.linspace(1e-6, 1 - 1e-6, 1001)
    m = imf.icdf(u)
    np.testing.assert_allclose(imf.cdf(m), u, atol=1e-12)
    assert float(m.min()) >= 0.08 and float(m.max()) <= 100.0
    assert bool(jnp.all(jnp.diff(m) > 0))


def test_sample_mean_at_two_hundred_thousand():
    imf = chabrier()
    masses = imf.sample(jax.random.PRNGKey(0), (200_000,))
    m = np.asarray(masses)
    # Standard error of the mean: std / sqrt(n); 5 of them.
    tolerance = 5 * m.std() / np.sqrt(m.size)
    assert abs(m.mean() - float(imf.mean_mass())) < tolerance


def _observable(params):
    imf = ChabrierIMF(**params)
    u = jnp.array([0.1, 0.5, 0.95, 0.999])  # both parts of the IMF
    return imf.mean_mass() + jnp.sum(jnp.log(imf.icdf(u)))


def test_gradients_match_central_differences():
    # One compile of the observable and one of its gradient serve every parameter.
    f, grad = jax.jit(_observable), jax.jit(jax.grad(_observable))
    x0 = {k: jnp.float64(v) for k, v in VALUES.items()}
    g = grad(x0)
    for name in PARAMETERS:
        h = 1e-6 * max(abs(VALUES[name]), 1.0)
        fd = (f({**x0, name: x0[name] + h}) - f({**x0, name: x0[name] - h})) / (2 * h)
        np.testing.assert_allclose(g[name], fd, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(sigma=0.0), "sigma must be > 0.0"),
        (dict(m_c=-1.0), "m_c must be > 0.0"),
        (dict(alpha=np.inf), "alpha must be"),
        (dict(m_min=2.0), "m_min < m_break < m_max"),
        (dict(m_max=0.5), "m_min < m_break < m_max"),
    ],
)
def test_bad_parameters_are_refused_eagerly_and_under_jit(kwargs, words):
    with pytest.raises(ValueError, match=words):
        ChabrierIMF(**kwargs)
    [(name, value)] = kwargs.items()
    jitted = jax.jit(lambda x: ChabrierIMF(**{name: x}).mean_mass())
    with pytest.raises(Exception, match=words):
        jax.block_until_ready(jitted(value))


def test_float32():
    with jax.enable_x64(False):
        draw = jax.jit(lambda key: ChabrierIMF(jnp.float32(0.079), jnp.float32(0.69)).sample(key, (10_000,)))
        m = draw(jax.random.PRNGKey(1))
        assert m.dtype == jnp.float32
        assert bool(jnp.all(jnp.isfinite(m))) and float(m.min()) >= 0.08 * (1 - 1e-6)
        assert float(m.max()) <= 100.0 * (1 + 1e-6)


def test_a_builder_draws_chabrier_masses_and_records_them():
    from progenax import plummer_builder

    imf = chabrier()
    ic = plummer_builder(jax.random.PRNGKey(0), n=200, imf=imf)
    m = np.asarray(ic.state.masses)
    assert m.min() >= 0.08 and m.max() <= 100.0
    # The masses stream is the first of split(key, 5) (builders/spherical.py); jit vs eager rounding.
    expected = imf.sample(jax.random.split(jax.random.PRNGKey(0), 5)[0], (200,))
    np.testing.assert_allclose(m, np.asarray(expected), rtol=1e-12)
    assert float(ic.params["imf_m_c"]) == 0.079 and "alpha" not in ic.params


def test_builders_take_chabrier_by_name_with_their_alpha():
    # imf="chabrier" is ChabrierIMF(alpha=alpha), as "kroupa" is kroupa(alpha):
    # the command line's --imf chabrier had no Python spelling (the builders
    # raised ValueError); the same masses and velocities bit for bit.
    from progenax import plummer_builder

    by_name = plummer_builder(jax.random.PRNGKey(0), n=200, imf="chabrier", alpha=2.7)
    by_object = plummer_builder(jax.random.PRNGKey(0), n=200, imf=chabrier(alpha=2.7))
    for name in ("masses", "velocities"):
        np.testing.assert_array_equal(getattr(by_name.state, name), getattr(by_object.state, name))
    assert float(by_name.params["imf_alpha"]) == 2.7
