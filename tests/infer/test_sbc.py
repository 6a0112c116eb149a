"""Simulation-based calibration of the unbinned Plummer model (slow: `make validate`).

Talts et al. (2018): draw (r_h, alpha, Q) from the default priors, simulate a
cluster with `plummer_builder` (through `simulate_plummer`, whose velocities follow
the likelihood's DF model; positions and velocities about the stars' own centre
of mass, which the model's frame parameters absorb), run NUTS, and record the
rank of the truth among thinned posterior draws. Exact inference makes each
parameter's ranks uniform.

Design: 120 data sets of N = 300 stars; one NUTS chain each of 300 warmup +
396 samples, thinned by 4 to L = 99 draws (the autocorrelation of NUTS on this
near-Gaussian posterior dies within a few draws, so thinning by 4 leaves nearly
independent draws: correlated draws alone would make the histogram non-uniform).
Ranks 0..99 fall in 10 bins of 10 rank values, 12 data sets expected per bin
(Pearson's chi-square wants about 5 or more per bin); each parameter's
chi-square (9 degrees of freedom) must not reject uniformity at p = 0.01 (with
3 parameters, a calibrated model fails by chance about 3 % of the time; the
keys are fixed, so the outcome is reproducible). All data sets run as one
`vmap` of numpyro's functional NUTS kernel, so it compiles once.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.distributions import biject_to
from numpyro.infer.hmc import hmc
from numpyro.infer.util import initialize_model

from progenax.infer import (
    default_priors,
    init_to_data,
    plummer_model,
    rank_statistic,
    rank_uniformity_test,
    simulate_plummer,
)
from progenax.infer.initialization import plummer_initial_values
from progenax.units import G_PHYSICAL

NUM_DATASETS = 120
N_STARS = 300
NUM_WARMUP, NUM_SAMPLES, THIN = 300, 396, 4
NUM_DRAWS = NUM_SAMPLES // THIN  # 99 -> ranks 0..99
NUM_BINS = 10
P_THRESHOLD = 0.01
PARAMS = ("r_h", "alpha", "Q")


def _unconstrained_start(data, priors):
    """The model's data-derived start, moved inside the priors' supports, unconstrained."""
    start = {k: np.asarray(v) for k, v in plummer_initial_values(data, None, G_PHYSICAL).items()}
    start["alpha"] = np.asarray(float(priors["alpha"].mean))
    lo, hi = priors["Q"].support.lower_bound, priors["Q"].support.upper_bound
    start["Q"] = np.clip(start["Q"], lo + 1e-3 * (hi - lo), hi - 1e-3 * (hi - lo))
    start["r_h"] = np.clip(start["r_h"], 0.101, 9.9)
    return {k: biject_to(priors[k].support).inv(jnp.asarray(v)) for k, v in start.items()}


def run_sbc(num_datasets=NUM_DATASETS, seed=0):
    """Ranks of the truth for each parameter, and the number of divergences."""
    priors = default_priors()
    key = jax.random.PRNGKey(seed)
    truths, datasets, starts = [], [], []
    for _ in range(num_datasets):
        key, k_prior, k_data = jax.random.split(key, 3)
        truth = {p: float(priors[p].sample(k)) for p, k in zip(PARAMS, jax.random.split(k_prior, 3))}
        data = simulate_plummer(k_data, n=N_STARS, **truth)
        truths.append(truth)
        datasets.append(data)
        starts.append(_unconstrained_start(data, priors))
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *datasets)
    z0 = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *starts)

    _, potential_fn_gen, postprocess_fn, _ = initialize_model(
        key, plummer_model, model_args=(datasets[0],), dynamic_args=True, init_strategy=init_to_data()
    )
    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn_gen, algo="NUTS")

    def one_chain(rng_key, data, z):
        state = init_kernel(z, NUM_WARMUP, model_args=(data,), rng_key=rng_key)

        def step(state, _):
            state = sample_kernel(state, model_args=(data,))
            return state, (state.z, state.diverging)

        _, (zs, diverging) = jax.lax.scan(step, state, None, length=NUM_WARMUP + NUM_SAMPLES)
        zs = jax.tree_util.tree_map(lambda x: x[NUM_WARMUP::THIN], zs)
        draws = jax.vmap(postprocess_fn(data))(zs)
        return {p: draws[p] for p in PARAMS}, jnp.sum(diverging[NUM_WARMUP:])

    keys = jax.random.split(key, num_datasets)
    draws, divergences = jax.jit(jax.vmap(one_chain))(keys, batch, z0)
    ranks = {p: np.array([rank_statistic(draws[p][i], t[p]) for i, t in enumerate(truths)]) for p in PARAMS}
    return ranks, int(np.sum(divergences))


@pytest.mark.slow
def test_simulation_based_calibration():
    start = time.perf_counter()
    ranks, divergences = run_sbc()
    elapsed = time.perf_counter() - start
    lines = [f"SBC: {NUM_DATASETS} data sets x N = {N_STARS}, {elapsed:.0f} s, {divergences} divergences"]
    pvalues = {}
    for p in PARAMS:
        counts, pvalues[p] = rank_uniformity_test(ranks[p], NUM_DRAWS, NUM_BINS)
        lines.append(f"  {p:5s} bins {counts.tolist()}  chi2 p = {pvalues[p]:.3f}")
    print("\n".join(lines))
    for p in PARAMS:
        assert pvalues[p] > P_THRESHOLD, "\n".join(lines)
