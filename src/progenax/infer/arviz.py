"""numpyro posteriors as ArviZ `InferenceData`: netCDF files, summaries, pair plots.

```python
mcmc.run(key, data)
idata = progenax.infer.to_inference_data(mcmc)
progenax.infer.posterior_summary(idata, ["r_h", "alpha", "Q"])   # mean, sd, HDI, ESS, r-hat
progenax.infer.write_posterior(idata, "posterior.nc")          # netCDF (atomic)
progenax.infer.pair_plot(idata, ["r_h", "alpha", "Q"], "corner.png", truth={"r_h": 1.0})
progenax.infer.sbc_rank_plot(ranks, num_draws, "sbc.png")      # simulation-based calibration
```

The summary's `r_hat` is ArviZ's rank-normalised split r-hat and `ess_bulk`
its bulk effective sample size (Vehtari et al. 2021), the figures
`progenax.infer.split_r_hat` and `bulk_ess` also compute.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

with warnings.catch_warnings():
    # ArviZ 0.2x announces its 1.0 refactor at import; the API used here is stable.
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

from ..io._paths import atomic_write
from ..plotting import save_png

__all__ = ["pair_plot", "posterior_summary", "sbc_rank_plot", "to_inference_data", "write_posterior"]


def to_inference_data(mcmc) -> az.InferenceData:
    """The posterior (and sample stats: divergences, step sizes) of a run
    `numpyro.infer.MCMC` as ArviZ `InferenceData` (`az.from_numpyro`)."""
    return az.from_numpyro(mcmc)


def posterior_summary(idata: az.InferenceData, var_names: Sequence[str] | None = None):
    """ArviZ's summary table (a pandas DataFrame): mean, sd, 94% HDI, MCSE,
    `ess_bulk`, `ess_tail` and `r_hat` for each named site."""
    return az.summary(idata, var_names=None if var_names is None else list(var_names))


def write_posterior(idata: az.InferenceData, path: str | os.PathLike) -> Path:
    """Write `idata` as netCDF (read back with `az.from_netcdf`), atomically:
    a failed write leaves the old file."""
    path = Path(path)
    with atomic_write(path) as (temp,):
        idata.to_netcdf(str(temp))
    return path


def pair_plot(
    idata: az.InferenceData,
    var_names: Sequence[str],
    path: str | os.PathLike,
    *,
    truth: Mapping[str, float] | None = None,
    title: str | None = None,
) -> Path:
    """Corner plot of the posterior (`az.plot_pair`, with marginals), the true
    values marked when given, saved as a PNG at `path`."""
    # matplotlib loads only to draw (start-up time), with the Agg backend chosen
    # before pyplot is imported.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = az.plot_pair(
        idata,
        var_names=list(var_names),
        kind="kde" if idata.posterior.sizes.get("draw", 0) >= 50 else "scatter",
        marginals=True,
        reference_values=None if truth is None else {k: float(v) for k, v in truth.items() if k in var_names},
        reference_values_kwargs={"color": "C3", "markeredgecolor": "C3", "marker": "x", "markersize": 12, "mew": 2.5},
    )
    figure = axes.ravel()[0].get_figure()
    if title:
        figure.suptitle(title)
    path = save_png(figure, path, bbox_inches="tight")
    plt.close(figure)
    return path


def sbc_rank_plot(
    ranks: Mapping[str, Sequence[int]], num_draws: int, path: str | os.PathLike, *, title: str | None = None
) -> Path:
    r"""Simulation-based calibration figure: per parameter, the ECDF of the
    fractional ranks minus the uniform CDF, with ArviZ's simultaneous 99 % band
    (`az.plot_ecdf(difference=True, confidence_bands=True)`, Säilynoja et al. 2022).

    `ranks`: per parameter, the rank of the truth among `num_draws` posterior
    draws, one per data set (`simulation_based_calibration`'s first output).
    A calibrated posterior stays inside the band everywhere; a curve above it
    near the middle means too wide a posterior, an S shape a biased one.
    """
    # Imported here for start-up time, as in `pair_plot` (scipy is not loaded by `import progenax`).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import stats

    names = list(ranks)
    figure, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 2.8), sharey=True, squeeze=False)
    uniform = stats.uniform(0.0, 1.0).cdf
    for ax, name in zip(axes[0], names):
        # A rank r in 0..L is the cell [r, r + 1) of L + 1 equal cells of (0, 1).
        fractional = (np.asarray(ranks[name], dtype=float) + 0.5) / (num_draws + 1)
        az.plot_ecdf(
            fractional,
            eval_points=np.linspace(0.0, 1.0, 101),
            cdf=uniform,
            difference=True,
            confidence_bands=True,
            ci_prob=0.99,
            ax=ax,
        )
        ax.set_title(name)
        ax.set_xlabel("fractional rank")
    axes[0, 0].set_ylabel("ECDF - uniform")
    if title:
        figure.suptitle(title)
        figure.tight_layout()  # keeps the suptitle above the panels' titles
    path = save_png(figure, path, bbox_inches="tight")
    plt.close(figure)
    return path
