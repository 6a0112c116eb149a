"""Convergence diagnostics for MCMC draws of shape (chains, draws), and recovery of known parameters."""

from __future__ import annotations

import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
from scipy import stats


def bulk_ess(draws) -> float:
    """Bulk effective sample size (Vehtari et al. 2021) of (chains, draws) samples.

    The draws of all chains are replaced by the normal scores of their pooled
    ranks, then numpyro's split-chain ESS is computed on them.
    """
    x = np.asarray(draws, dtype=float)
    ranks = stats.rankdata(x, method="average").reshape(x.shape)
    z = stats.norm.ppf((ranks - 0.375) / (x.size + 0.25))
    return float(effective_sample_size(z))


def split_r_hat(draws) -> float:
    """numpyro's split Gelman-Rubin r-hat of (chains, draws) samples."""
    return float(split_gelman_rubin(np.asarray(draws, dtype=float)))


def recovery_table(mcmc, truth: dict[str, float]) -> dict[str, dict[str, float]]:
    """How well a finished numpyro `MCMC` run recovers known parameters.

    **Arguments:** `mcmc`: a run (`mcmc.run` done, with
    `extra_fields=("diverging",)` for the divergence count); `truth`: the true
    value of each parameter to report.

    **Returns:** for each parameter in `truth`, a dict with its `truth`,
    posterior `median` and standard deviation `sd`, `z` = (median - truth) / sd,
    `bulk_ess` (needs >= 8 draws in all) and `r_hat` (split r-hat, needs >= 4
    draws per chain; NaN otherwise); and under the key `"divergences"` the
    count of divergent transitions (NaN when they were not recorded).
    """
    grouped = mcmc.get_samples(group_by_chain=True)
    rows: dict[str, dict[str, float]] = {}
    for name, value in truth.items():
        draws = np.asarray(grouped[name], dtype=float)
        median, sd = float(np.median(draws)), float(np.std(draws))
        rows[name] = {
            "truth": float(value),
            "median": median,
            "sd": sd,
            "z": (median - value) / sd,
            "bulk_ess": bulk_ess(draws) if draws.size >= 8 else float("nan"),
            "r_hat": split_r_hat(draws) if draws.shape[1] >= 4 else float("nan"),
        }
    diverging = mcmc.get_extra_fields().get("diverging")
    rows["divergences"] = float("nan") if diverging is None else float(np.sum(diverging))
    return rows


def print_recovery(mcmc, truth: dict[str, float], wall: float) -> dict[str, dict[str, float]]:
    """Print `recovery_table` as a table, the divergences and the slowest parameter's ESS per second.

    `wall` is the run's wall time in seconds. Returns the table.
    """
    table = recovery_table(mcmc, truth)
    print(
        f"{'param':6s} {'truth':>6s} {'median':>8s} {'sd':>8s} {'(med-truth)/sd':>15s} {'bulk ESS':>9s} {'r-hat':>6s}"
    )
    for name in truth:
        row = table[name]
        print(
            f"{name:6s} {row['truth']:6.2f} {row['median']:8.4f} {row['sd']:8.4f} {row['z']:15.2f} "
            f"{row['bulk_ess']:9.0f} {row['r_hat']:6.3f}"
        )
    total = np.asarray(mcmc.get_samples()[next(iter(truth))]).shape[0]
    print(f"divergences: {table['divergences']:.0f} of {total} ({100.0 * table['divergences'] / total:.2f} %)")
    print(f"wall time (compile + warmup + sampling): {wall:.1f} s")
    print(f"min bulk ESS / s: {min(table[name]['bulk_ess'] for name in truth) / wall:.2f}")
    return table
