"""Fit a model to a star catalogue with NUTS: what `progenax fit` runs.

```python
ic = progenax.io.read("stars.csv", format="csv")
idata = progenax.infer.fit_catalogue(ic, "plummer", num_warmup=500, num_samples=500)
progenax.infer.posterior_summary(idata)
```

The catalogue's stars (weight >= 1/2, in pc, km/s, Msun: `observe`) are
fitted with the unbinned likelihood of `plummer_model` (r_h, alpha, Q) or
`king_model` (r_h, alpha, Q, W0), both with their default priors and the frame
(centre, bulk velocity) fitted too; NUTS starts from the data-driven
initial values (`init_to_data`) and shows a progress bar.
"""

from __future__ import annotations

import functools

import jax
from numpyro.infer import MCMC, NUTS

from .arviz import to_inference_data
from .data import observe
from .initialization import init_to_data
from .king import king_model
from .plummer import plummer_model

FIT_MODELS = {"plummer": plummer_model, "king": king_model}
"""The models `fit_catalogue` (and `progenax fit --model`) can fit."""

FIT_PARAMETERS = {"plummer": ("r_h", "alpha", "Q"), "king": ("r_h", "alpha", "Q", "W0")}
"""The physical parameters of each model (the sites a summary shows)."""


def fit_catalogue(
    ic,
    model: str,
    *,
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 2,
    seed: int = 0,
    progress: bool = True,
):
    """NUTS posterior of `model` ("plummer" or "king") for the stars of `ic`
    (an `InitialConditions`, e.g. read from a file), as ArviZ `InferenceData`
    (with the divergences in `sample_stats`).

    Chains run vectorized on one device. Raises `ValueError` for an unknown
    model or a count below 1.
    """
    if model not in FIT_MODELS:
        raise ValueError(f"model must be one of {tuple(FIT_MODELS)}, got {model!r}")
    for name, value in (("num_warmup", num_warmup), ("num_samples", num_samples), ("num_chains", num_chains)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    data = observe(ic)
    kernel = NUTS(functools.partial(FIT_MODELS[model], likelihood="unbinned"), init_strategy=init_to_data())
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=progress,
    )
    mcmc.run(jax.random.PRNGKey(seed), data, extra_fields=("diverging",))
    return to_inference_data(mcmc)
