"""Marks et al. (2012) environment-dependent high-mass IMF slope."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.builders import plummer_builder
from progenax.imf.environment import marks_alpha3, marks_imf, marks_x


def central_difference(f, x, rel=1e-6):
    # Float64, relative step 1e-6: error ~1e-10 relative, inside the 1e-5 bound.
    h = rel * max(abs(x), 1.0)
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize("feh,rho", [(0.0, 1e5), (-1.0, 3e5), (0.5, 1e7), (-2.0, 1e2)])
def test_gradients_match_finite_differences(feh, rho):
    g_feh, g_rho = jax.grad(marks_alpha3, argnums=(0, 1))(feh, rho)
    fd_feh = central_difference(lambda z: marks_alpha3(z, rho), feh)
    fd_rho = central_difference(lambda r: marks_alpha3(feh, r), rho)
    np.testing.assert_allclose(g_feh, fd_feh, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(g_rho, fd_rho, rtol=1e-5, atol=1e-16)


def test_gradient_is_useful_above_threshold():
    # x = 0 at [Fe/H] = 0, rho = 1e6: d alpha3 / d log10 rho = -0.41 * 0.99.
    g = jax.grad(lambda lr: marks_alpha3(0.0, 10.0**lr))(6.0)
    np.testing.assert_allclose(g, -0.41 * 0.99, rtol=1e-6)


def test_hard_mode_is_exact():
    for feh, rho in [(0.0, 1e2), (1.0, 1e4), (-1.0, 1e3)]:
        x = float(marks_x(feh, rho))
        assert x < -0.87
        assert float(marks_alpha3(feh, rho, mode="hard")) == 2.3
    for feh, rho in [(0.0, 1e6), (-2.0, 1e8), (0.3, 1e5 * 2)]:
        x = -0.14 * feh + 0.99 * np.log10(rho / 1e6)
        assert x >= -0.87
        assert float(marks_alpha3(feh, rho, mode="hard")) == pytest.approx(-0.41 * x + 1.94, rel=0, abs=4e-16)


def test_sigmoid_approaches_hard_away_from_threshold():
    # 0.5 in x from the threshold is 10 widths: sigmoid tail e^-10 times the
    # branch gap (< 1), far below 1e-4.
    for feh, rho in [(0.0, 1e4), (0.0, 1e7)]:
        soft = float(marks_alpha3(feh, rho))
        hard = float(marks_alpha3(feh, rho, mode="hard"))
        assert abs(soft - hard) < 1e-4


def test_imf_in_a_builder_carries_the_gradient():
    def mean_mass(log_rho):
        imf = marks_imf(0.0, 10.0**log_rho)
        return jnp.mean(plummer_builder(jax.random.PRNGKey(0), n=200, imf=imf).state.masses)

    g = jax.grad(mean_mass)(6.5)
    fd = central_difference(mean_mass, 6.5)
    np.testing.assert_allclose(g, fd, rtol=1e-5)
    assert float(g) > 0  # denser clouds: flatter (top-heavy) IMF, heavier stars


def test_bad_inputs():
    with pytest.raises(ValueError, match="rho_cl must be > 0"):
        marks_alpha3(0.0, 0.0)
    with pytest.raises(ValueError, match="width must be > 0"):
        marks_alpha3(0.0, 1e6, width=0.0)
    with pytest.raises(ValueError, match="mode"):
        marks_alpha3(0.0, 1e6, mode="step")


def test_float32():
    with jax.enable_x64(False):
        a = marks_alpha3(jnp.float32(0.0), jnp.float32(1e6))
        g = jax.grad(marks_alpha3, argnums=1)(jnp.float32(0.0), jnp.float32(1e6))
        assert a.dtype == jnp.float32 and np.isfinite(float(g))
