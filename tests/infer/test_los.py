"""Line-of-sight velocity densities: normalisation, the error convolution and the depth integral.

Normalisations use composite Gauss-Legendre quadrature (200 panels of 16 nodes,
one vectorised call): on these integrands, smooth or vanishing at the ends as a
power >= 2, it is accurate to well below 1e-9. References for the error
convolution and the depth integral are adaptive quadrature (scipy) of
independent numpy formulas to ~1e-10; the fixed rules of
`progenax.infer.los` are held to 1e-6 relative (the module docstring's promise).
"""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from progenax.infer.los import (
    king_los_logpdf,
    plummer_los_error_logpdf,
    plummer_los_logpdf,
    plummer_projected_los_logpdf,
)
from progenax.units import G_PHYSICAL

A, M, Q = 0.77, 1150.0, 0.37
QUAD = dict(epsabs=0.0, epsrel=1e-11, limit=400)


def _quad(f, lo, hi, panels=200, order=16):
    nodes, weights = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(lo, hi, panels + 1)
    half = 0.5 * np.diff(edges)[:, None]
    x = (edges[:-1, None] + half * (1.0 + nodes)).ravel()
    return float(np.sum(np.asarray(f(x)).reshape(panels, order) * weights * half))


def _plummer_los(v, w):
    """Independent numpy form: 256 / (63 pi w) (1 - v^2/w^2)^(9/2) inside the edge."""
    return 256.0 / (63.0 * np.pi * w) * np.clip(1.0 - (v / w) ** 2, 0.0, None) ** 4.5


def test_plummer_los_density_is_normalised_and_zero_beyond_the_edge():
    w = 2.3
    assert abs(_quad(lambda v: np.exp(np.asarray(plummer_los_logpdf(v, w))), -w, w) - 1.0) < 1e-9
    assert np.isneginf(float(plummer_los_logpdf(1.001 * w, w)))


def test_plummer_los_is_the_marginal_of_the_3d_density():
    """p(v_z) = integral of the 3D density C w^-3 (1 - v^2/w^2)^(7/2) over the sky-plane components."""
    w, vz = 2.3, 0.9
    C = 128.0 / (7.0 * np.pi**2)
    f = lambda vp: 2 * np.pi * vp * C / w**3 * np.clip(1 - (vz**2 + vp**2) / w**2, 0.0, None) ** 3.5
    ref = _quad(f, 0, np.sqrt(w**2 - vz**2))
    assert abs(np.exp(float(plummer_los_logpdf(vz, w))) / ref - 1.0) < 1e-9


@pytest.mark.parametrize("W", [0.3, 9.0])
def test_king_los_density_is_normalised(W):
    s = 1.7
    edge = np.sqrt(2 * W) * s
    assert abs(_quad(lambda v: np.exp(np.asarray(king_los_logpdf(v, W, s))), -edge, edge) - 1.0) < 1e-9


def _convolved(v_obs, error, w):
    f = lambda v: _plummer_los(v, w) * np.exp(-0.5 * ((v_obs - v) / error) ** 2) / (np.sqrt(2 * np.pi) * error)
    return integrate.quad(f, -w, w, points=[v_obs] if abs(v_obs) < w else None, **QUAD)[0]


@pytest.mark.parametrize("error, v_obs", [(0.05, 1.8), (0.05, 2.6), (0.5, 0.0), (5.0, 2.6), (25.0, 0.0)])
def test_error_convolution_matches_adaptive_quadrature(error, v_obs):
    w = 2.5  # errors from 0.02 w to 10 w
    got = np.exp(float(plummer_los_error_logpdf(v_obs, error, w)))
    ref = _convolved(v_obs, error, w)
    assert abs(got / ref - 1.0) < 1e-6, (got, ref)


@pytest.mark.parametrize("R, error", [(0.1, None), (1.5, None), (1.5, 0.3), (0.1, 3.0)])
def test_projected_los_density_matches_depth_integral(R, error):
    """p(R, v) = integral over depth z of p(x) p(v | r), by adaptive quadrature."""
    vz = 0.7

    def integrand(z):
        r = np.hypot(R, z)
        w = np.sqrt(4 * Q * G_PHYSICAL * M / np.sqrt(r**2 + A**2))
        p_x = 3 / (4 * np.pi * A**3) * (1 + r**2 / A**2) ** -2.5
        return p_x * (_plummer_los(vz, w) if error is None else _convolved(vz, error, w))

    ref = 2 * integrate.quad(integrand, 0, np.inf, epsabs=0.0, epsrel=1e-10, limit=400)[0]
    err = None if error is None else jnp.array([error])
    got = np.exp(
        float(plummer_projected_los_logpdf(np.array([[R, 0.0]]), jnp.array([vz]), A, M, Q, G_PHYSICAL, err)[0])
    )
    assert abs(got / ref - 1.0) < 1e-6, (got, ref)
