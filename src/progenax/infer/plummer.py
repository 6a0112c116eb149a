r"""numpyro model of a Plummer cluster: priors over (r_h, alpha, Q) and the unbinned likelihood.

For $n$ observed stars with positions $\mathbf x_i$ (pc), velocities
$\mathbf v_i$ (km/s) and masses $m_i$ (Msun), the stars are independent draws
from the model, so
$$\log \mathcal L(r_h, \alpha, Q) = \sum_i \Bigl[\log p(\mathbf x_i \mid a)
 + \log p(\mathbf v_i \mid r_i;\, a, M, Q) + \log \xi(m_i \mid \alpha)\Bigr],
\qquad a = r_h\sqrt{2^{2/3} - 1},$$
with the densities of `progenax.infer.likelihoods` (units pc$^{-3}$,
(km/s)$^{-3}$, Msun$^{-1}$). With projected positions the first two terms are
replaced by the joint $\log p(R_i, \mathbf v_i)$ with the depth integrated out (or
by $\log p(R_i)$ alone without velocities). The total mass $M$ that sets the
potential, $\Phi = -GM/\sqrt{r^2 + a^2}$, is the sum of the observed masses unless
given; $G = 4.300917270\times10^{-3}$ pc Msun$^{-1}$ (km/s)$^2$.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .._types import Array, ArrayLike
from ..models import Plummer
from ..profiles.plummer import plummer_escape_speed_squared, plummer_scale_radius
from ..sampling import safe_norm
from ..units import G_PHYSICAL
from .data import ObservedCluster
from .framework import FRAME_PARAMETERS, check_model_arguments, total_mass_of
from .initialization import INIT_KEY, StartValue, plummer_initial_values
from .likelihoods import (
    kroupa_log_likelihood,
    plummer_position_logpdf,
    plummer_projected_logpdf,
    plummer_projected_velocity_logpdf,
    plummer_velocity_logpdf,
)
from .los import plummer_los_error_logpdf, plummer_los_logpdf, plummer_projected_los_logpdf
from .mock import MockLikelihood, mock_factor
from .priors import shared_priors

PARAMETERS = ("r_h", "alpha", "Q")


def default_priors(projected: bool = False, line_of_sight: bool = False) -> dict[str, dist.Distribution]:
    """The default priors: r_h ~ LogUniform(0.1, 10) pc and the shared ones
    (`progenax.infer.priors.shared_priors`: alpha, Q and the frame)."""
    return {"r_h": dist.LogUniform(0.1, 10.0), **shared_priors(projected, line_of_sight)}


def plummer_log_likelihood(
    data: ObservedCluster,
    r_h: ArrayLike,
    alpha: ArrayLike,
    Q: ArrayLike,
    *,
    total_mass: ArrayLike | None = None,
    G: ArrayLike = G_PHYSICAL,
    centre: ArrayLike | None = None,
    bulk_velocity: ArrayLike | None = None,
) -> Array:
    """The exact unbinned log-likelihood (a scalar) of `data` under a Plummer cluster.

    **Arguments:**

    - `data`: an `ObservedCluster` (3D or projected positions; 3D or
      line-of-sight velocities, the latter optionally with per-star errors;
      velocities and masses optional).
    - `r_h`: 3D half-mass radius (pc); `alpha`: Kroupa high-mass slope; `Q`:
      virial ratio (velocity scale sqrt(2Q) times the equilibrium DF's).
    - `total_mass`: M in Msun for the potential; default the sum of `data.masses`
      (required when velocities are observed without masses).
    - `G`: gravitational constant in pc Msun^-1 (km/s)^2.
    - `centre`: the cluster centre (pc; (3,), or (2,) for projected data),
      subtracted from the positions; default the origin.
    - `bulk_velocity`: the cluster's mean motion (km/s, (3,); a scalar for
      line-of-sight velocities), subtracted from the velocities; default zero.

    **Returns:** sum over stars of the log-densities (module docstring).
    Masses do not enter when `data.masses` is None, nor velocities without
    `data.velocities`; terms that do not depend on (r_h, alpha, Q) are kept, so
    the value is a normalised log-density of the data.
    """
    a = plummer_scale_radius(r_h)
    x = data.positions if centre is None else data.positions - centre
    total = jnp.zeros((), x.dtype)
    if data.velocities is not None:
        M = total_mass_of(data, total_mass)
        v = data.velocities if bulk_velocity is None else data.velocities - bulk_velocity
        if data.line_of_sight:
            total += jnp.sum(_plummer_los_terms(data, x, v, a, M, Q, G))
        elif data.projected:
            total += jnp.sum(plummer_projected_velocity_logpdf(x, v, a, M, Q, G))
        else:
            r = safe_norm(x)  # a star at the centre: a finite gradient in `centre`, as the other branches have
            total += jnp.sum(plummer_position_logpdf(x, a) + plummer_velocity_logpdf(v, r, a, M, Q, G))
    elif data.projected:
        total += jnp.sum(plummer_projected_logpdf(x, a))
    else:
        total += jnp.sum(plummer_position_logpdf(x, a))
    if data.masses is not None:
        total += kroupa_log_likelihood(data.masses, alpha)
    return total


def _plummer_los_terms(data, x, v, a, M, Q, G):
    """Per-star log p(position, v_los) (module `progenax.infer.los`)."""
    if data.projected:
        return plummer_projected_los_logpdf(x, v, a, M, Q, G, data.velocity_errors)
    r2 = jnp.sum(x**2, axis=-1)
    w = jnp.sqrt(2.0 * Q * plummer_escape_speed_squared(r2, M, a, G))
    if data.velocity_errors is None:
        log_v = plummer_los_logpdf(v, w)
    else:
        log_v = plummer_los_error_logpdf(v, data.velocity_errors, w)
    return plummer_position_logpdf(x, a) + log_v


def plummer_model(
    data: ObservedCluster,
    *,
    likelihood: str = "unbinned",
    priors: Mapping[str, dist.Distribution] | None = None,
    fit_frame: bool = True,
    total_mass: ArrayLike | None = None,
    G: float = G_PHYSICAL,
) -> None:
    r"""numpyro model: priors over r_h (pc), alpha and Q, and the unbinned Plummer likelihood.

    Samples sites `"r_h"`, `"alpha"`, `"Q"` from `priors` (defaults in
    `default_priors`; pass a dict to replace any of them) and adds
    `plummer_log_likelihood` as the factor `"log_likelihood"`. Each site carries
    a data-derived starting value: use `init_strategy=progenax.infer.init_to_data()`
    (a random start can fall where a star outruns the model's edge speed). Projected data
    (positions of shape (n, 2)) use the Plummer surface density. Extend it by
    calling it from your own model and adding sites or factors.

    **Arguments:**

    - `data`: an `ObservedCluster` (`progenax.infer.observe(ic)`).
    - `likelihood`: "unbinned" (the exact likelihood), or a `MockLikelihood`
      from `progenax.infer.mock_likelihood(data, "plummer", ...)`: the Gaussian
      synthetic likelihood of summary statistics of the forward-modelled cluster
      (`progenax.infer.mock`; the frame is not fitted then).
    - `priors`: dict of numpyro distributions keyed by "r_h", "alpha", "Q",
      "centre", "bulk_velocity".
    - `fit_frame`: also fit the centre (sites `"centre"`, pc) and, with
      velocities, the mean motion (`"bulk_velocity"`, km/s). Positions about the
      centre of mass of the stars themselves (what `observe` gives for a built
      cluster) are not independent draws about the model centre; translating
      them back is a parameter, and with a flat prior on it the posterior of
      (r_h, alpha, Q) is exact again (translations act on the data as a group).
      False fixes the frame at the origin and at rest.
    - `total_mass`: M (Msun) setting the potential; default the sum of the
      observed masses.
    - `G`: gravitational constant (pc Msun^-1 (km/s)^2).

    ```python
    data = progenax.infer.observe(progenax.plummer_builder(key, n=2000))
    kernel = numpyro.infer.NUTS(progenax.infer.plummer_model, init_strategy=progenax.infer.init_to_data())
    mcmc = numpyro.infer.MCMC(kernel, num_warmup=500, num_samples=500)
    mcmc.run(jax.random.PRNGKey(1), data)
    ```
    """
    merged = check_model_arguments(data, likelihood, priors, Plummer, PARAMETERS + FRAME_PARAMETERS, default_priors)
    if isinstance(likelihood, MockLikelihood):
        params = {
            p: numpyro.sample(p, merged[p], infer={INIT_KEY: StartValue(likelihood.fiducial[p])}) for p in PARAMETERS
        }
        mock_factor(likelihood, params)
        return
    start = plummer_initial_values(data, total_mass, G)

    def site(name):
        return numpyro.sample(name, merged[name], infer={INIT_KEY: StartValue(start[name])} if name in start else {})

    r_h, alpha, Q = (site(name) for name in PARAMETERS)
    centre = site("centre") if fit_frame else None
    bulk = site("bulk_velocity") if fit_frame and data.velocities is not None else None
    log_l = plummer_log_likelihood(data, r_h, alpha, Q, total_mass=total_mass, G=G, centre=centre, bulk_velocity=bulk)
    numpyro.factor("log_likelihood", log_l)
