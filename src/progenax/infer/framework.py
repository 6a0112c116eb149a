r"""The shared framework of the numpyro models in `progenax.infer`: argument checks,
the sites sampled above a support wall, and the total mass of the data.

One file per model (`plummer.py`, `king.py`) builds on it; the mock likelihood
(`mock.py`) and this module read the shared priors of `priors.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from .._types import Array, ArrayLike
from ..models import AbstractClusterModel
from .data import ObservedCluster, _concrete
from .initialization import INIT_KEY, StartValue
from .mock import MockLikelihood
from .priors import check_prior_supports, prior_range

LIKELIHOODS = ("unbinned",)
FRAME_PARAMETERS = ("centre", "bulk_velocity")
KROUPA_RANGE = (0.08, 100.0)


def total_mass_of(data: ObservedCluster, total_mass: ArrayLike | None) -> Array:
    if total_mass is not None:
        return jnp.asarray(total_mass)
    if data.masses is None:
        raise ValueError("total_mass is required when velocities are observed without masses")
    return jnp.sum(data.masses)


def check_model_arguments(
    data,
    likelihood,
    priors: Mapping | None,
    model: type[AbstractClusterModel],
    names: tuple[str, ...],
    defaults: Callable,
) -> dict[str, dist.Distribution]:
    """Eager checks of the model's static arguments and data; returns the merged priors.

    `defaults(projected, line_of_sight)` gives the model's default priors; every
    prior's support must lie inside the support `model` (or the builders, for
    alpha and Q) declares for its parameter (`check_prior_supports`).
    """
    if isinstance(likelihood, str) and likelihood == "mock":
        raise ValueError(
            "likelihood='mock' needs its covariance computed before sampling: pass "
            "likelihood=progenax.infer.mock_likelihood(data, model, ...) instead of the string"
        )
    if not isinstance(likelihood, MockLikelihood) and likelihood not in LIKELIHOODS:
        raise ValueError(
            f"likelihood must be one of {LIKELIHOODS} or a MockLikelihood (progenax.infer.mock_likelihood), "
            f"got {likelihood!r}"
        )
    if isinstance(likelihood, MockLikelihood) and likelihood.model is not model:
        # Before any site: the mock's fiducial values name only its own model's parameters.
        raise ValueError(f"this MockLikelihood was built for model {likelihood.model.NAME!r}, not {model.NAME!r}")
    if not isinstance(data, ObservedCluster):
        raise ValueError(f"data must be an ObservedCluster (see progenax.infer.observe), got {type(data).__name__}")
    merged = defaults(data.projected, data.line_of_sight)
    for name, prior in dict(priors or {}).items():
        if name not in names:
            raise ValueError(f"priors may only name {tuple(names)}, got {name!r}")
        if not isinstance(prior, dist.Distribution):
            raise ValueError(f"priors[{name!r}] must be a numpyro Distribution, got {prior!r}")
        merged[name] = prior
    check_prior_supports(merged, model)
    if _concrete(data.masses):
        m = np.asarray(data.masses)
        lo, hi = KROUPA_RANGE
        if (m < lo).any() or (m > hi).any():
            raise ValueError(
                f"masses must lie in the Kroupa IMF range [{lo}, {hi}] Msun, got min {m.min():.4g}, max {m.max():.4g}"
            )
    return merged


def support_bounds(name: str, prior: dist.Distribution) -> tuple[float, float]:
    """(lower, upper) of a scalar prior's support, for the wall reparametrization."""
    span = prior_range(prior)
    if span is not None:
        return span
    raise ValueError(
        f"priors[{name!r}] must have an interval, lower-bounded or real support for reparametrize=True, "
        f"got {prior.support}; pass reparametrize=False"
    )


def site_above_wall(name: str, prior: dist.Distribution, wall: Array, start: Array) -> Array:
    r"""Sample `name` (prior `prior`) on (max(wall, lower), upper) through an unconstrained site.

    The site `name + "_unconstrained"` (u, flat on the real line) maps to
    $\theta = \ell + (h - \ell)\,\sigma(u)$ (finite upper bound $h$) or
    $\theta = \ell + e^u$, with $\ell = \max(\text{wall}, \text{prior's lower bound})$; the
    factor `name + "_prior"` adds $\log p(\theta) + \log|d\theta/du|$, so the density
    of $\theta$ is the prior's, restricted to $\theta > $ wall, where the likelihood is
    zero anyway. The wall may depend on earlier sites: the map is triangular, and
    its Jacobian determinant is the product of these diagonal terms. $\theta$ is
    recorded as the deterministic site `name`.
    """
    lo, hi = support_bounds(name, prior)
    lower = wall if lo == -np.inf else jnp.maximum(wall, lo)
    if np.isfinite(hi):
        ok = lower < hi  # False only where the data rule out the whole prior range
        width = jnp.where(ok, hi - lower, 1.0)
        fraction = jnp.clip((start - lower) / width, 1e-6, 1.0 - 1e-6)
        u = numpyro.sample(
            f"{name}_unconstrained",
            dist.ImproperUniform(constraints.real, (), ()),
            infer={INIT_KEY: StartValue(jnp.log(fraction) - jnp.log1p(-fraction))},
        )
        value = lower + width * jax.nn.sigmoid(u)
        log_jacobian = jnp.log(width) + jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u)
    else:
        ok = jnp.isfinite(lower)
        gap = start - lower
        u = numpyro.sample(
            f"{name}_unconstrained",
            dist.ImproperUniform(constraints.real, (), ()),
            infer={INIT_KEY: StartValue(jnp.log(jnp.where(gap > 0, gap, 1e-3)))},
        )
        value = lower + jnp.exp(u)
        log_jacobian = u
    # A fixed point inside the support where the data rule out the prior range
    # (not `start`, which would keep the start's profile solves in the graph).
    if np.isfinite(lo) and np.isfinite(hi):
        inner = 0.5 * (lo + hi)
    else:
        inner = lo + 1.0 if np.isfinite(lo) else (hi - 1.0 if np.isfinite(hi) else 0.0)
    safe = jnp.where(ok, value, inner)
    value = numpyro.deterministic(name, safe)
    numpyro.factor(f"{name}_prior", jnp.where(ok, prior.log_prob(safe) + log_jacobian, -jnp.inf))
    return value
