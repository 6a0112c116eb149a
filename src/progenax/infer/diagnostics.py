"""Convergence diagnostics for MCMC draws of shape (chains, draws)."""

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
