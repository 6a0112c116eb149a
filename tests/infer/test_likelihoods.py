"""The per-star densities of the unbinned Plummer likelihood: normalisation and exactness.

Integrals use composite Gauss-Legendre quadrature (200 panels of 16 nodes,
evaluated in one vectorised call); on these integrands, smooth or with an end
point vanishing as a power >= 3.5, it is accurate to well below 1e-10, so
normalisations are held to 1e-8.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from progenax.infer.likelihoods import (
    depth_integral,
    kroupa_log_likelihood,
    kroupa_logpdf,
    plummer_position_logpdf,
    plummer_projected_logpdf,
    plummer_projected_velocity_logpdf,
    plummer_velocity_logpdf,
)
from progenax.units import G_PHYSICAL

A, M, Q = 0.77, 1150.0, 0.37
TOL = 1e-8


def _radial(r, ndim):
    """Points (k, ndim) at distances r (k,) along the first axis."""
    r = np.atleast_1d(np.asarray(r, dtype=float))
    x = np.zeros((r.size, ndim))
    x[:, 0] = r
    return x


def _quad(f, lo, hi, panels=200, order=16):
    """Composite Gauss-Legendre integral of a vectorised f over [lo, hi]."""
    nodes, weights = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(lo, hi, panels + 1)
    half = 0.5 * np.diff(edges)[:, None]
    x = (edges[:-1, None] + half * (1.0 + nodes)).ravel()
    return float(np.sum(np.asarray(f(x)).reshape(panels, order) * weights * half))


def _quad_to_infinity(f, scale):
    """Integral of f over [0, inf) with x = scale tan(t)."""
    return _quad(lambda t: f(scale * np.tan(t)) * scale / np.cos(t) ** 2, 0.0, 0.5 * np.pi)


def test_position_density_is_normalised():
    f = lambda r: 4 * np.pi * r**2 * np.exp(np.asarray(plummer_position_logpdf(_radial(r, 3), A)))
    assert abs(_quad_to_infinity(f, A) - 1.0) < TOL


def test_projected_density_is_normalised():
    f = lambda R: 2 * np.pi * R * np.exp(np.asarray(plummer_projected_logpdf(_radial(R, 2), A)))
    assert abs(_quad_to_infinity(f, A) - 1.0) < TOL


@pytest.mark.parametrize("r", [0.0, 0.3, 2.5])
def test_velocity_density_is_normalised(r):
    w = np.sqrt(2 * Q * 2 * G_PHYSICAL * M / np.sqrt(r**2 + A**2))
    f = lambda v: (
        4
        * np.pi
        * v**2
        * np.exp(np.asarray(plummer_velocity_logpdf(_radial(v, 3), jnp.full(v.shape, r), A, M, Q, G_PHYSICAL)))
    )
    assert abs(_quad(f, 0.0, w) - 1.0) < TOL
    # Beyond the edge speed the density is exactly zero (log -inf), never NaN.
    outside = plummer_velocity_logpdf(_radial(1.01 * w, 3), np.array([r]), A, M, Q, G_PHYSICAL)
    assert np.isneginf(outside[0])


@pytest.mark.parametrize("u", [0.0, 0.2, 0.7, 0.97])
def test_depth_integral_matches_quadrature(u):
    ref, _ = integrate.quad(
        lambda t: 2 * (np.cos(t) - u) ** 3.5 / np.cos(t) ** 2, 0, np.arccos(u), epsabs=1e-15, epsrel=1e-13, limit=200
    )
    # 32 Gauss-Legendre nodes on the smoothed integrand: the docstring promises 1e-12.
    assert abs(float(depth_integral(u)) - ref) < 1e-12 * max(ref, 1e-3)


@pytest.mark.parametrize("R", [0.0, 0.5, 3.0])
def test_projected_velocity_density_integrates_to_surface_density(R):
    """Integrating p(R, v) over all velocities gives the surface density p(R)."""
    w0 = np.sqrt(4 * Q * G_PHYSICAL * M / np.sqrt(R**2 + A**2))
    pos = _radial(R, 2)
    f = lambda v: (
        4
        * np.pi
        * v**2
        * np.exp(np.asarray(plummer_projected_velocity_logpdf(pos, _radial(v, 3), A, M, Q, G_PHYSICAL)))
    )
    total = _quad(f, 0.0, w0)
    expected = np.exp(float(plummer_projected_logpdf(pos, A)[0]))
    assert abs(total / expected - 1.0) < 1e-7


def test_kroupa_density_is_normalised_and_sufficient_statistics_agree():
    alpha = 2.7
    pdf = lambda m: np.exp(np.asarray(kroupa_logpdf(m, alpha)))
    # Panels in log m on each side of the 0.5 Msun break (smooth power laws there).
    in_log = lambda lo, hi: _quad(lambda t: pdf(np.exp(t)) * np.exp(t), np.log(lo), np.log(hi))
    total = in_log(0.08, 0.5) + in_log(0.5, 100.0)
    assert abs(total - 1.0) < TOL
    masses = np.geomspace(0.08, 100.0, 57)
    assert abs(float(kroupa_log_likelihood(masses, alpha)) - float(np.sum(kroupa_logpdf(masses, alpha)))) < 1e-9
