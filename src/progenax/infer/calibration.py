r"""Simulation-based calibration (Talts et al. 2018): ranks and their uniformity test.

If parameters $\theta$ are drawn from the prior, data from the model given
$\theta$, and $L$ independent posterior draws $\theta^{(l)}$ are made from the data,
then the rank $\sum_l [\theta^{(l)} < \theta]$ is uniform on $\{0, \dots, L\}$ when
the inference is exact. Ranks are binned into `num_bins` equal groups of rank
values and tested with Pearson's chi-square.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


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
