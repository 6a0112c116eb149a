"""numpyro posteriors as ArviZ `InferenceData`: netCDF files, summaries, pair plots.

```python
mcmc.run(key, data)
idata = progenax.infer.to_inference_data(mcmc)
progenax.infer.posterior_summary(idata, ["r_h", "alpha", "Q"])   # mean, sd, HDI, ESS, r-hat
progenax.infer.write_posterior(idata, "posterior.nc")          # netCDF (atomic)
progenax.infer.pair_plot(idata, ["r_h", "alpha", "Q"], "corner.png", truth={"r_h": 1.0})
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

with warnings.catch_warnings():
    # ArviZ 0.2x announces its 1.0 refactor at import; the API used here is stable.
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

from ..io._paths import atomic_write

__all__ = ["pair_plot", "posterior_summary", "to_inference_data", "write_posterior"]


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
        reference_values_kwargs={"color": "C3", "marker": "x"},
    )
    figure = axes.ravel()[0].get_figure()
    if title:
        figure.suptitle(title)
    path = Path(path)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path
