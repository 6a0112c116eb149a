"""The default priors of the parameters every numpyro model in `progenax.infer` shares."""

from __future__ import annotations

import numpyro.distributions as dist


def shared_priors(projected: bool = False, line_of_sight: bool = False) -> dict[str, dist.Distribution]:
    """The default priors of the parameters every model has.

    alpha ~ Uniform(1.6, 3.5), Q ~ Uniform(0.2, 1); the frame: each coordinate of
    `centre` ~ Normal(0, 10 pc) (2 coordinates for projected data) and of
    `bulk_velocity` ~ Normal(0, 10 km/s) (a scalar for line-of-sight
    velocities), broad next to their posterior widths (about a / sqrt(n) and
    sigma / sqrt(n)).
    """
    bulk = dist.Normal(0.0, 10.0)
    return {
        "alpha": dist.Uniform(1.6, 3.5),
        "Q": dist.Uniform(0.2, 1.0),
        "centre": dist.Normal(0.0, 10.0).expand([2 if projected else 3]).to_event(1),
        "bulk_velocity": bulk if line_of_sight else bulk.expand([3]).to_event(1),
    }
