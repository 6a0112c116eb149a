r"""Simulation-based calibration (Talts et al. 2018): ranks and their uniformity test.

If parameters $\theta$ are drawn from the prior, data from the model given
$\theta$, and $L$ independent posterior draws $\theta^{(l)}$ are made from the data,
then the rank $\sum_l [\theta^{(l)} < \theta]$ is uniform on $\{0, \dots, L\}$ when
the inference is exact. Ranks are binned into `num_bins` equal groups of rank
values and tested with Pearson's chi-square. `simulation_based_calibration`
runs the whole loop for any of the numpyro models here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.hmc import hmc
from numpyro.infer.util import initialize_model
from scipy import stats

from ..validation import check_static_int
from .initialization import init_to_data


def rank_statistic(draws, truth) -> int:
    """Number of posterior draws (1D) below the true value: an integer in [0, len(draws)]."""
    return int(np.sum(np.asarray(draws) < np.asarray(truth)))


def rank_uniformity_test(ranks, num_draws: int, num_bins: int) -> tuple[np.ndarray, float]:
    """Chi-square test that `ranks` (each in [0, num_draws]) are uniform.

    `num_draws + 1` must be divisible by `num_bins` so every bin holds the same
    number of rank values. Returns the bin counts and the p-value (num_bins - 1
    degrees of freedom).
    """
    ranks = np.asarray(ranks)
    if (num_draws + 1) % num_bins:
        raise ValueError(f"num_draws + 1 = {num_draws + 1} must be divisible by num_bins = {num_bins}")
    if ranks.min() < 0 or ranks.max() > num_draws:
        raise ValueError(f"ranks must lie in [0, {num_draws}]")
    counts = np.bincount(ranks // ((num_draws + 1) // num_bins), minlength=num_bins)
    return counts, float(stats.chisquare(counts).pvalue)


def _stack(trees):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *trees)


def traced_start(model, data, **model_kwargs) -> dict:
    """The unconstrained start of `model` on `data` by `init_to_data` (vmap- and jit-safe).

    The model runs once under `substitute`, each latent site takes its
    `init_to_data` value, and `biject_to(support).inv` maps it to the
    unconstrained space NUTS works in.
    """
    substituted = handlers.substitute(handlers.seed(model, 0), substitute_fn=init_to_data())
    trace = handlers.trace(substituted).get_trace(data, **model_kwargs)
    return {
        name: biject_to(site["fn"].support).inv(site["value"])
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"]
    }


def simulation_based_calibration(
    key,
    model,
    simulate,
    priors: dict,
    params: tuple[str, ...],
    *,
    num_datasets: int,
    num_warmup: int,
    num_samples: int,
    thin: int,
    start=None,
    model_kwargs: dict | None = None,
    batch_size: int | None = None,
) -> tuple[dict[str, np.ndarray], int]:
    r"""SBC ranks of `params` for a numpyro `model` (Talts et al. 2018), one program for all chains.

    For each of `num_datasets` data sets: $\theta \sim$ `priors` (one draw per
    name in `params`), `data = simulate(key, **theta)`, one NUTS chain from
    `start(data)` (default `traced_start`: the model's `init_to_data`) of
    `num_warmup` + `num_samples` steps, thinned by `thin`, and the rank of
    $\theta$ among the $L$ = `num_samples // thin` draws. All chains run in one
    program over numpyro's functional NUTS kernel (`dynamic_args`), so the model
    compiles once: `jax.lax.map` over the data sets, `batch_size` chains at a time
    as one `vmap` (default `None`: all of them). A `vmap`ped chain waits at every
    transition for the longest trajectory in its batch; `batch_size=1` runs each
    at its own pace. For the King model's SBC (120 data sets, chains whose trees
    range from 15 to 1,023 leapfrog steps) one at a time on 2 CPU cores ran the
    whole design (696 transitions a chain) in 567 s, 0.8 s a transition; all 120
    `vmap`ped on an H200 GPU took 77 s for 40 warmup + 40 sampling transitions,
    1.0 s a transition (the full design was not run there).

    **Returns:** `(ranks, divergences)`: per parameter an (num_datasets,)
    integer array in [0, L] (test it with `rank_uniformity_test`), and the
    number of divergent transitions after warmup.
    """
    model_kwargs = model_kwargs or {}
    start = start or (lambda data: traced_start(model, data, **model_kwargs))
    truths, datasets = [], []
    for _ in range(num_datasets):
        key, k_prior, k_data = jax.random.split(key, 3)
        truth = {p: float(priors[p].sample(k)) for p, k in zip(params, jax.random.split(k_prior, len(params)))}
        truths.append(truth)
        datasets.append(simulate(k_data, **truth))
    batch = _stack(datasets)
    z0 = jax.jit(jax.vmap(start))(batch)
    _, potential_fn_gen, postprocess_fn, _ = initialize_model(
        key,
        model,
        model_args=(datasets[0],),
        model_kwargs=model_kwargs,
        dynamic_args=True,
        init_strategy=init_to_data(),
    )
    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn_gen, algo="NUTS")

    def one_chain(rng_key, data, z):
        state = init_kernel(z, num_warmup, model_args=(data,), model_kwargs=model_kwargs, rng_key=rng_key)

        def step(state, _):
            state = sample_kernel(state, model_args=(data,), model_kwargs=model_kwargs)
            return state, (state.z, state.diverging)

        _, (zs, diverging) = jax.lax.scan(step, state, None, length=num_warmup + num_samples)
        zs = jax.tree_util.tree_map(lambda x: x[num_warmup::thin], zs)
        draws = jax.vmap(postprocess_fn(data, **model_kwargs))(zs)
        return {p: draws[p] for p in params}, jnp.sum(diverging[num_warmup:])

    keys = jax.random.split(key, num_datasets)
    batch_size = num_datasets if batch_size is None else check_static_int("batch_size", batch_size, 1)
    chains = jax.jit(lambda *args: jax.lax.map(lambda a: one_chain(*a), args, batch_size=batch_size))
    draws, divergences = chains(keys, batch, z0)
    ranks = {p: np.array([rank_statistic(draws[p][i], t[p]) for i, t in enumerate(truths)]) for p in params}
    return ranks, int(np.sum(divergences))
