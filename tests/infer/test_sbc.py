"""Simulation-based calibration of the unbinned Plummer and King models (slow: `make validate`).

Talts et al. (2018): draw the parameters from the default priors, simulate a
cluster (`simulate_plummer`, `simulate_king`: velocities that follow the
likelihood's DF model; positions and velocities about the stars' own centre
of mass or the model centre, which the model's frame parameters absorb), run
NUTS, and record the rank of the truth among thinned posterior draws
(`progenax.infer.calibration.simulation_based_calibration`). Exact inference
makes each parameter's ranks uniform.

Plummer: 120 data sets of N = 300 stars; one NUTS chain each of 300 warmup +
396 samples, thinned by 4 to L = 99 draws (the autocorrelation of NUTS on this
near-Gaussian posterior dies within a few draws, so thinning by 4 leaves nearly
independent draws: correlated draws alone would make the histogram non-uniform).
Ranks 0..99 fall in 10 bins of 10 rank values, 12 data sets expected per bin
(Pearson's chi-square wants about 5 or more per bin); each parameter's
chi-square (9 degrees of freedom) must not reject uniformity at p = 0.01 (with
3 parameters, a calibrated model fails by chance about 3 % of the time; the
keys are fixed, so the outcome is reproducible). All data sets run as one
`vmap` of numpyro's functional NUTS kernel, so it compiles once.

King (r_h, alpha, Q, W0; the reparametrized walls of `king_model`): the same
design on `KING_DATASETS` data sets of `KING_STARS` stars, 10 bins of 10 rank
values; with 4 parameters a calibrated model fails by chance about 4 % of the
time at p = 0.01.
"""

import time

import jax
import jax.numpy as jnp
import pytest
from numpyro.distributions import biject_to

from progenax.infer import (
    default_priors,
    king_default_priors,
    king_model,
    plummer_model,
    rank_uniformity_test,
    simulate_king,
    simulate_plummer,
)
from progenax.infer.calibration import simulation_based_calibration
from progenax.infer.initialization import plummer_initial_values
from progenax.units import G_PHYSICAL

NUM_DATASETS = 120
N_STARS = 300
NUM_WARMUP, NUM_SAMPLES, THIN = 300, 396, 4
NUM_DRAWS = NUM_SAMPLES // THIN  # 99 -> ranks 0..99
NUM_BINS = 10
P_THRESHOLD = 0.01
PARAMS = ("r_h", "alpha", "Q")

KING_DATASETS = 120
KING_STARS = 300
KING_PARAMS = ("r_h", "alpha", "Q", "W0")


def _unconstrained_start(data, priors):
    """The model's data-derived start, moved inside the priors' supports, unconstrained."""
    start = dict(plummer_initial_values(data, None, G_PHYSICAL))
    start["alpha"] = jnp.asarray(priors["alpha"].mean)
    lo, hi = priors["Q"].support.lower_bound, priors["Q"].support.upper_bound
    start["Q"] = jnp.clip(start["Q"], lo + 1e-3 * (hi - lo), hi - 1e-3 * (hi - lo))
    start["r_h"] = jnp.clip(start["r_h"], 0.101, 9.9)
    return {k: biject_to(priors[k].support).inv(jnp.asarray(v)) for k, v in start.items()}


def run_sbc(num_datasets=NUM_DATASETS, seed=0):
    """Plummer: ranks of the truth for each parameter, and the number of divergences."""
    priors = default_priors()
    return simulation_based_calibration(
        jax.random.PRNGKey(seed),
        plummer_model,
        lambda key, **truth: simulate_plummer(key, n=N_STARS, **truth),
        priors,
        PARAMS,
        num_datasets=num_datasets,
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        thin=THIN,
        start=lambda data: _unconstrained_start(data, priors),
    )


def run_king_sbc(
    num_datasets=KING_DATASETS, seed=0, n=KING_STARS, num_warmup=NUM_WARMUP, num_samples=NUM_SAMPLES, batch_size=1
):
    """King: ranks of the truth for each of (r_h, alpha, Q, W0), and the number of divergences.

    One chain at a time by default (`batch_size=1`): a `vmap`ped chain waits for
    the longest trajectory of its batch (the whole design: 567 s on 2 CPU cores one
    at a time; all 120 `vmap`ped on an H200 GPU, 77 s for 40 warmup + 40 sampling
    transitions of the 696).
    """
    return simulation_based_calibration(
        jax.random.PRNGKey(seed),
        king_model,
        lambda key, **truth: simulate_king(key, n=n, **truth),
        king_default_priors(),
        KING_PARAMS,
        num_datasets=num_datasets,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thin=THIN,
        batch_size=batch_size,
    )


def _check(name, ranks, divergences, elapsed, num_datasets, n, params):
    lines = [f"{name} SBC: {num_datasets} data sets x N = {n}, {elapsed:.0f} s, {divergences} divergences"]
    pvalues = {}
    for p in params:
        counts, pvalues[p] = rank_uniformity_test(ranks[p], NUM_DRAWS, NUM_BINS)
        lines.append(f"  {p:5s} bins {counts.tolist()}  chi2 p = {pvalues[p]:.3f}")
    print("\n".join(lines))
    for p in params:
        assert pvalues[p] > P_THRESHOLD, "\n".join(lines)


@pytest.mark.slow
def test_simulation_based_calibration():
    start = time.perf_counter()
    ranks, divergences = run_sbc()
    _check("Plummer", ranks, divergences, time.perf_counter() - start, NUM_DATASETS, N_STARS, PARAMS)


@pytest.mark.slow
def test_king_simulation_based_calibration():
    start = time.perf_counter()
    ranks, divergences = run_king_sbc()
    _check("King", ranks, divergences, time.perf_counter() - start, KING_DATASETS, KING_STARS, KING_PARAMS)
