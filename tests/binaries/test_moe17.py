"""Moe & Di Stefano (2017): multiplicity, periods, twins and eccentricities per primary-mass bin."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.binaries import BinaryPopulation, binding_energy, main_sequence_radius, sample_binaries
from progenax.binaries.moe17 import (
    LP_MAX,
    LP_MIN,
    Moe17,
    companion_frequency_density,
    eccentricity_cdf,
    mass_ratio_cdf,
    mass_ratio_parameters,
    max_eccentricity,
)
from progenax.binaries.orbits import DAY_MYR, orbital_period
from progenax.binaries.stellar import RSUN_PC
from progenax.units import physical_units

stats = pytest.importorskip("scipy.stats")

G = 4.300917270e-3
DAY = DAY_MYR / physical_units().time_myr
# MD17's primary-mass bins (solar-type, A/late-B, mid-B, early-B, O) and, from
# its Table 13, the companion frequency f_mult (q > 0.1, log P < 8) with its
# error and the multiplicity fraction (primaries with at least one companion).
BINS = (1.0, 3.5, 7.0, 12.5, 28.0)
F_MULT = ((0.50, 0.04), (0.84, 0.11), (1.3, 0.2), (1.6, 0.2), (2.1, 0.3))
F_MULTIPLE = (0.40, 0.59, 0.76, 0.84, 0.94)
N = 20_000  # systems per bin
# KS p-values are uniform under the null: 1e-3 fails once in a thousand fixed keys
# at any N (the critical distance ~1.95/sqrt(N) scales with the sample).
P_MIN = 1e-3
MODEL = Moe17()
SIGMA, MEAN_MASS, M_MIN = 2.0, 0.5, 0.08


def _contact(m1, m2):
    return 2.0 * (main_sequence_radius(m1) + main_sequence_radius(m2)) * RSUN_PC


def _draw(params, m1, hard_soft_cap=False):
    """A smooth observable of a sample (for gradients) and, as aux, the sample with its PITs.

    params = (fraction scale, mass scale). The probability integral transforms
    are each draw's own CDF (cut like the sampler cuts it): uniform on [0, 1]
    when the sampler draws from the tabulated and analytic laws.
    """
    population = BinaryPopulation.moe17(params[0], fraction_width=0.05, hard_soft_cap=hard_soft_cap)
    extra = dict(sigma=SIGMA, mean_mass=MEAN_MASS, m_min=M_MIN) if hard_soft_cap else {}
    b = sample_binaries(jax.random.PRNGKey(17), m1 * params[1], population, **extra)
    m1, m2, lp, e = b.primary_masses, b.secondary_masses, b.log_period, b.elements.e
    q = m2 / m1
    value = jnp.sum(b.weights * (lp + q + e))
    # The period is cut below the contact period of an equal-mass pair.
    lp_lo = jnp.log10(orbital_period(_contact(m1, m1), 2 * m1, G) / DAY)
    model = population.period  # built under the caller's precision
    c_lo = model.log_period_cdf(lp_lo, m1)
    e_max = max_eccentricity(lp)
    e_hi = jnp.minimum(jnp.clip(1 - _contact(m1, m2) / b.elements.a, 0, 1), e_max)
    c_hi = eccentricity_cdf(e_hi, m1, lp)
    pits = {
        "lp": (model.log_period_cdf(lp, m1) - c_lo) / (1.0 - c_lo),
        "q": mass_ratio_cdf(q, m1, lp),
        "e": eccentricity_cdf(e, m1, lp) / jnp.where(c_hi > 0, c_hi, 1.0),
        "e_ok": (c_hi > 0) & (e_max > 0),  # circular orbits (P <= 2 d) have no law to test
        "lp_lo": lp_lo,
        "e_max": e_max,
    }
    return value, (b, pits)


# One compile gives the sample, its PITs, its gradient and the finite differences.
_value_and_grad = jax.jit(jax.value_and_grad(_draw, has_aux=True), static_argnums=2)
PARAMS = jnp.array([1.0, 1.0])
MASSES = jnp.repeat(jnp.asarray(BINS), N)


@pytest.fixture(scope="module")
def drawn():
    (_, (b, pits)), grad = _value_and_grad(PARAMS, MASSES)
    return b, {k: np.asarray(v) for k, v in pits.items()}, grad


def _bin(x, k):
    return np.asarray(x)[k * N : (k + 1) * N]


def test_companion_frequency_is_the_papers():
    f_mult = np.asarray(MODEL.companion_frequency(jnp.asarray(BINS)))
    for (value, error), got in zip(F_MULT, f_mult):
        assert abs(got - value) <= error, (got, value)
    # The table (linear in log M1 and log P) against a dense integral of the fit.
    lp = np.linspace(LP_MIN, LP_MAX, 4001)
    density = np.asarray(jax.jit(companion_frequency_density)(jnp.asarray(BINS)[:, None], lp[None, :]))
    assert np.allclose(f_mult, np.trapezoid(density, lp), rtol=2e-3)
    # MD17: solar-type companions peak near log P ~ 5 (the fit's node at 5.5),
    # early-type ones at intermediate periods log P ~ 3.5.
    peaks = lp[np.argmax(density, axis=1)]
    assert 4.5 <= peaks[0] <= 5.51 and np.all((peaks[2:] >= 3.0) & (peaks[2:] <= 4.0)), peaks
    # Close companions (log P < 3.5) grow steeply with mass.
    close = np.asarray(MODEL.companion_frequency(jnp.asarray(BINS), LP_MIN, 3.5))
    assert np.all(np.diff(close) > 0) and close[-1] > 5 * close[0]


def test_binary_fraction_per_bin(drawn):
    b, _, _ = drawn
    members = np.asarray(b.members)
    expected = np.asarray(MODEL.binary_fraction(jnp.asarray(BINS)))
    for k, (f_model, f_paper) in enumerate(zip(expected, F_MULTIPLE)):
        got = _bin(members, k).mean()
        # Binomial: within 4 standard deviations sqrt(f(1 - f)/N) of the model.
        assert abs(got - f_model) < 4 * np.sqrt(f_model * (1 - f_model) / N), (k, got, f_model)
        # Against the paper: the inner-binary probability of MD17's code is an
        # approximation; it is within 0.06 of Table 13 in every bin (0.05 at 7 Msun).
        assert abs(got - f_paper) < 0.06, (k, got, f_paper)


def test_period_distribution_per_bin(drawn):
    b, pits, _ = drawn
    lp = np.asarray(b.log_period)
    assert lp.min() >= LP_MIN and lp.max() <= LP_MAX and np.all(lp >= pits["lp_lo"] - 1e-12)
    for k in range(len(BINS)):
        p = stats.kstest(_bin(pits["lp"], k), "uniform").pvalue
        assert p > P_MIN, (BINS[k], p)
    # Solar-type inner binaries: mean log P from the table, to 4 standard errors.
    grid = jnp.linspace(LP_MIN, LP_MAX, 4001)
    mean = LP_MAX - np.trapezoid(np.asarray(MODEL.log_period_cdf(grid, 1.0)), np.asarray(grid))
    solar = _bin(lp, 0)
    assert abs(solar.mean() - mean) < 4 * solar.std() / np.sqrt(N)
    assert 4.3 < mean < 4.8  # MD17's solar-type inner binaries (DM91's log-normal mean: 4.8)


def test_mass_ratios_and_twin_excess(drawn):
    b, pits, _ = drawn
    for k in range(len(BINS)):
        assert stats.kstest(_bin(pits["q"], k), "uniform").pvalue > P_MIN, BINS[k]
    # Short-period solar-type pairs (log P < 1): F_twin = 0.30 (MD17 Eq. 6) and
    # gamma_large = -0.5, so a fraction p = F + (1 - F) p_pl of the q > 0.3
    # companions lies above 0.95, with p_pl the power law's own share.
    qs = _bin(b.secondary_masses / b.primary_masses, 0)
    short = _bin(b.log_period, 0) < 1.0
    gamma_large = float(mass_ratio_parameters(1.0, 0.5)[1])
    p_pl = (1 - 0.95 ** (1 + gamma_large)) / (1 - 0.3 ** (1 + gamma_large))
    large = qs[short & (qs > 0.3)]
    frac = np.mean(large > 0.95)
    twin = (frac - p_pl) / (1 - p_pl)
    # Binomial standard error of frac, propagated; 4 of them.
    assert abs(twin - 0.30) < 4 * np.sqrt(frac * (1 - frac) / large.size) / (1 - p_pl), (twin, large.size)
    # The excess is a step at q = 0.95: the last 0.05 in q holds several times the one below.
    assert np.sum(large > 0.95) > 3 * np.sum((large > 0.90) & (large <= 0.95))
    print(f"solar-type, log P < 1: F_twin measured {twin:.3f} (MD17: 0.30), n = {large.size}")


def test_eccentricities_below_e_max(drawn):
    b, pits, _ = drawn
    e, lp, e_max = np.asarray(b.elements.e), np.asarray(b.log_period), pits["e_max"]
    assert np.all(e <= e_max * (1 + 1e-12)) and np.all(e[10.0**lp <= 2.0] == 0.0)
    contact = _contact(np.asarray(b.primary_masses), np.asarray(b.secondary_masses))
    assert np.all(np.asarray(b.elements.a) * (1 - e) >= contact * (1 - 1e-12))
    for k in range(len(BINS)):
        assert stats.kstest(_bin(pits["e"], k)[_bin(pits["e_ok"], k)], "uniform").pvalue > P_MIN, BINS[k]


def test_gradients_match_central_differences():
    # d/d(fraction) through the soft weights, d/d(mass scale) through the table,
    # the q and e laws and the contact limits. The bins' masses 3.5 and 7 are
    # anchors of MD17's interpolations in log M1 (kinks: one-sided slopes), so
    # the masses are scaled off them; the same compiled function serves.
    params = PARAMS.at[1].set(1.0137)
    _, grad = _value_and_grad(params, MASSES)
    h = 1e-6

    def value(k, step):
        return _value_and_grad(params.at[k].add(step), MASSES)[0][0]

    # The fraction scale is at its upper end (1): a second-order one-sided difference.
    fd = [
        (3 * value(0, 0.0) - 4 * value(0, -h) + value(0, -2 * h)) / (2 * h),
        (value(1, h) - value(1, -h)) / (2 * h),
    ]
    for k in range(2):
        assert np.isclose(grad[k], fd[k], rtol=1e-5, atol=1e-7), (k, grad[k], fd[k])


def test_api_and_errors():
    assert BinaryPopulation.moe17(0.5).is_joint and BinaryPopulation(period="moe17", eccentricity="moe17").is_joint
    assert not BinaryPopulation().is_joint
    with pytest.raises(ValueError, match="eccentricity"):
        BinaryPopulation(period="moe17", eccentricity="thermal")
    with pytest.raises(ValueError, match="pairing"):
        BinaryPopulation(period="moe17", pairing="random")
    with pytest.raises(ValueError, match="mean_mass"):
        sample_binaries(jax.random.PRNGKey(0), jnp.ones(4), BinaryPopulation.moe17(hard_soft_cap=True), sigma=2.0)


def test_float32_and_hard_soft_cap():
    with jax.enable_x64(False):
        m1 = jnp.geomspace(0.1, 60.0, 512, dtype=jnp.float32)
        params = jnp.array([0.7, 1.0], jnp.float32)
        (_, (b, _)), g = jax.jit(jax.value_and_grad(_draw, has_aux=True), static_argnums=2)(params, m1, True)
        for leaf in jax.tree_util.tree_leaves(b):
            if jnp.issubdtype(leaf.dtype, jnp.floating):
                assert leaf.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(leaf)))
        assert g.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(g)))
        # With the cap every pair is hard: the period below the equal-mass boundary,
        # q above the ratio at which that period is hard (float32 rounding: 1e-5).
        eb = np.asarray(binding_energy(b.elements.a, b.primary_masses, b.secondary_masses, G))
        assert np.all(eb >= MEAN_MASS * SIGMA**2 * (1 - 1e-5))
        assert np.all(np.asarray(b.secondary_masses) >= M_MIN * (1 - 1e-5))
        assert np.all(np.asarray(b.elements.e) <= np.asarray(max_eccentricity(b.log_period)) * (1 + 1e-5))
