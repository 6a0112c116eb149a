"""The default priors of the parameters every numpyro model in `progenax.infer` shares,
and the check that a prior stays inside its parameter's declared support."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ..models import BUILDER_PARAMETERS, AbstractClusterModel


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


def prior_range(prior: dist.Distribution) -> tuple[float, float] | None:
    """(lower, upper) of a scalar prior's support; None for a support that is not
    an interval of the real line (a discrete one, say)."""
    support = prior.support
    if isinstance(support, constraints.interval):
        return float(support.lower_bound), float(support.upper_bound)
    if isinstance(support, constraints.greater_than):
        return float(support.lower_bound), np.inf
    if isinstance(support, constraints.less_than):
        return -np.inf, float(support.upper_bound)
    if support is constraints.real:
        return -np.inf, np.inf
    return None


def check_prior_supports(priors: Mapping[str, dist.Distribution], model: type[AbstractClusterModel]) -> None:
    """Refuse a prior that puts mass where its parameter is not allowed.

    The allowed ranges are the declarations (`model.PARAMETERS` and
    `progenax.models.BUILDER_PARAMETERS`): a prior Uniform(0, 25) on the King
    model's W0 (declared [0.001, 20]) or Normal(1, 1) on r_h (declared > 0) is a
    `ValueError` before any sampling, not NaN log-densities during it. The end
    points themselves are not compared for openness (a continuous prior gives
    them no mass); priors whose support is not an interval are left to the
    model's own checks.
    """
    declared = {p.name: p.support for p in (*model.PARAMETERS, *BUILDER_PARAMETERS)}
    for name, prior in priors.items():
        support, span = declared.get(name), prior_range(prior)
        if support is None or span is None:
            continue
        lower = -np.inf if support.lower is None else support.lower
        upper = np.inf if support.upper is None else support.upper
        if span[0] < lower or span[1] > upper:
            raise ValueError(
                f"priors[{name!r}] has support [{span[0]:g}, {span[1]:g}], outside the {model.NAME} model's "
                f"{name} support {support.describe()}: use a prior inside it (e.g. Uniform or TruncatedNormal)"
            )
