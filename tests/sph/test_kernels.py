"""SPH kernels: normalisation, derivatives and safety at r = 0 and the support edge."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.sph import KERNELS, kernel_gradient, kernel_value
from progenax.sph.kernels import get_kernel

NAMES = sorted(KERNELS)


def _radial_integral(name, dim, h=0.7, n=200_001):
    # ∫ W d^d x = ∫_0^2h W(r) S_d r^(d-1) dr with S_d = 2, 2π, 4π; Simpson's
    # rule on 2e5 intervals is exact to ~1e-12 for these piecewise polynomials.
    r = np.linspace(0.0, 2.0 * h, n)
    w = np.asarray(kernel_value(jnp.asarray(r), h, dim=dim, kernel=name))
    shell = {1: 2.0, 2: 2.0 * math.pi * r, 3: 4.0 * math.pi * r**2}[dim]
    f = w * shell
    dr = r[1] - r[0]
    return dr / 3.0 * (f[0] + f[-1] + 4.0 * f[1:-1:2].sum() + 2.0 * f[2:-1:2].sum())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_kernel_is_normalised(name, dim):
    assert _radial_integral(name, dim) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_gradient_factor_and_h_derivative_match_autodiff(name, dim):
    kern = get_kernel(name)
    h = 0.9
    for r in [0.05, 0.4, 0.899, 0.9, 1.3, 1.79]:
        dw_dr = jax.grad(lambda r: kern.value(r, h, dim))(r)
        assert float(kern.gradient_factor(r, h, dim)) * r == pytest.approx(float(dw_dr), rel=1e-12, abs=1e-14)
        dw_dh = jax.grad(lambda h: kern.value(r, h, dim))(h)
        assert float(kern.h_derivative(r, h, dim)) == pytest.approx(float(dw_dh), rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("name", NAMES)
def test_flat_at_zero_and_vanishing_at_support_edge(name):
    kern = get_kernel(name)
    h = 1.3
    for dim in (1, 2, 3):
        # Finite, zero slope at r = 0 (both in r and through the separation vector).
        assert float(jax.grad(lambda r: kern.value(r, h, dim))(0.0)) == 0.0
        assert np.all(np.asarray(kernel_gradient(jnp.zeros(dim), h, kernel=name)) == 0.0)
        assert np.isfinite(float(kern.gradient_factor(0.0, h, dim)))
        # Value and slope go to zero continuously at r = 2h.
        edge = 2.0 * h
        assert float(kern.value(edge, h, dim)) == 0.0
        assert abs(float(kern.value(edge * (1 - 1e-6), h, dim))) < 1e-12
        assert float(jax.grad(lambda r: kern.value(r, h, dim))(edge)) == 0.0
        assert float(kern.value(edge * 1.5, h, dim)) == 0.0


def test_kernel_gradient_is_gradient_of_value():
    dx = jnp.array([0.3, -0.2, 0.5])
    for name in NAMES:
        auto = jax.grad(lambda d: kernel_value(jnp.linalg.norm(d), 0.6, dim=3, kernel=name))(dx)
        np.testing.assert_allclose(kernel_gradient(dx, 0.6, kernel=name), auto, rtol=1e-12)


def test_bad_kernel_and_dimension():
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernel_value(0.1, 1.0, dim=3, kernel="gaussian")
    with pytest.raises(ValueError, match="dim must be 1, 2 or 3"):
        kernel_value(0.1, 1.0, dim=4)
