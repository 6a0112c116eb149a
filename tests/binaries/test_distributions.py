"""Period, eccentricity and mass-ratio distributions: formulas, inverse CDFs, truncation, gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.binaries import (
    CircularEccentricity,
    Kroupa95Period,
    LogNormalPeriod,
    PowerLawEccentricity,
    PowerLawMassRatio,
    PowerLawPeriod,
)

stats = pytest.importorskip("scipy.stats")

N = 20_000
# KS p-values are uniform under the null: 1e-3 fails once in a thousand fixed keys
# at any N (the critical distance ~1.95/sqrt(N) scales with the sample).
P_MIN = 1e-3

DISTRIBUTIONS = {
    "kroupa95": Kroupa95Period(),
    "dm91": LogNormalPeriod(),
    "sana12_period": PowerLawPeriod(),
    "thermal": PowerLawEccentricity(1.0),
    "sana12_e": PowerLawEccentricity(-0.45),
    "q_power": PowerLawMassRatio(-0.5, q_min=0.05),
    "q_log_uniform": PowerLawMassRatio(-1.0),
}


def test_kroupa95_density_is_the_papers():
    lp = jnp.linspace(1.0, 8.43, 50)
    x = lp - 1.0
    # Kroupa (1995): eta = 2.5 is the normalisation to 1e-3 over [1, 8.43].
    assert np.allclose(Kroupa95Period().pdf(lp), 2.5 * x / (45 + x**2), rtol=2e-3)


def test_other_densities():
    lp = jnp.linspace(0.2, 5.4, 20)
    norm = (5.5**0.45 - 0.15**0.45) / 0.45
    assert np.allclose(PowerLawPeriod().pdf(lp), lp**-0.55 / norm, rtol=1e-12)
    e = jnp.linspace(0.01, 0.99, 20)
    assert np.allclose(PowerLawEccentricity(1.0).pdf(e), 2 * e, rtol=1e-12)
    assert np.allclose(PowerLawEccentricity(0.0).pdf(e), 1.0, rtol=1e-12)
    lognormal = stats.truncnorm((-np.inf - 4.8) / 2.3, (10 - 4.8) / 2.3, loc=4.8, scale=2.3)
    assert np.allclose(LogNormalPeriod().cdf(lp), lognormal.cdf(np.asarray(lp)), rtol=1e-12)


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_icdf_inverts_cdf_and_samples(name):
    dist = DISTRIBUTIONS[name]
    u = jnp.linspace(0.001, 0.999, 101)
    assert np.allclose(dist.cdf(dist.icdf(u)), u, rtol=0, atol=1e-12)
    x = np.asarray(dist.icdf(jax.random.uniform(jax.random.PRNGKey(1), (N,))))
    p = stats.kstest(x, lambda t: np.asarray(dist.cdf(t))).pvalue
    assert p > P_MIN, p


@pytest.mark.parametrize("name", ["kroupa95", "dm91", "sana12_period", "q_power"])
def test_truncation_keeps_the_shape(name):
    dist = DISTRIBUTIONS[name]
    lo, hi = dist.icdf(0.3), dist.icdf(0.8)
    x = np.asarray(dist.truncated_icdf(jax.random.uniform(jax.random.PRNGKey(2), (N,)), lo, hi))
    assert x.min() >= lo and x.max() <= hi
    f_lo, f_hi = float(dist.cdf(lo)), float(dist.cdf(hi))
    p = stats.kstest(x, lambda t: (np.asarray(dist.cdf(t)) - f_lo) / (f_hi - f_lo)).pvalue
    assert p > P_MIN, p


def test_lognormal_far_tail_keeps_precision():
    # Limits 10 and 20 sigma above the mean: the CDF there is 1 to double precision.
    dist = LogNormalPeriod(lp_max=60.0)
    x = dist.truncated_icdf(jnp.linspace(0.01, 0.99, 5), 4.8 + 23.0, 4.8 + 46.0)
    z = (np.asarray(x) - 4.8) / 2.3
    # Exact quantiles of the tail: z ~ 10 + E / 10 for an exponential E (Mills ratio).
    assert np.all(np.diff(z) > 0) and 10.0 < z[0] < z[-1] < 10.6


def test_eccentricity_cut_and_circular():
    u = jnp.linspace(0.01, 0.99, 7)
    e = PowerLawEccentricity(1.0).truncated_icdf(u, 0.0, 0.5)
    assert np.allclose(e, 0.5 * jnp.sqrt(u))
    assert np.all(CircularEccentricity().truncated_icdf(u, 0.0, 0.9) == 0.0)
    g = jax.grad(lambda h: jnp.sum(PowerLawEccentricity(-0.45).truncated_icdf(u, 0.0, h)))(0.0)
    assert np.isfinite(g)


def _fd_check(make, params, u, lo, hi):
    @jax.jit
    def sample(p):
        return jnp.sum(make(*p).truncated_icdf(u, lo, hi) * jnp.arange(1, u.size + 1))

    grads = jax.jit(jax.grad(sample))(params)
    for k in range(len(params)):
        h = 1e-5 * max(abs(float(params[k])), 1.0)
        up = tuple(p + h if j == k else p for j, p in enumerate(params))
        dn = tuple(p - h if j == k else p for j, p in enumerate(params))
        fd = (sample(up) - sample(dn)) / (2 * h)
        assert np.isclose(grads[k], fd, rtol=1e-6, atol=1e-7), (make, k, grads[k], fd)


@pytest.mark.parametrize(
    "make, params, lo, hi",
    [
        (Kroupa95Period, (1.0, 8.43, 45.0), 2.0, 7.0),
        (LogNormalPeriod, (4.8, 2.3, -10.0, 10.0), 0.5, 9.0),
        (PowerLawPeriod, (-0.55, 0.15, 5.5), 0.3, 5.0),
        (PowerLawMassRatio, (-0.4, 0.1, 1.0), 0.2, 0.9),
        (PowerLawMassRatio, (-1.0, 0.1, 1.0), 0.0, np.inf),  # the whole support
        (PowerLawEccentricity, (1.0, 1.0), 0.0, 0.8),
    ],
)
def test_parameter_gradients_match_central_differences(make, params, lo, hi):
    u = jax.random.uniform(jax.random.PRNGKey(4), (16,), minval=0.02, maxval=0.98)
    _fd_check(make, tuple(jnp.asarray(p) for p in params), u, lo, hi)
