r"""The `mock` likelihood: a Gaussian synthetic likelihood of forward-modelled summaries.

Given parameters $\theta$ (alpha, Q and the model's own: r_h, and W0 for King)
the cluster is built with the builder itself (`progenax.model_builder` for any
registered model, `Q=None`, velocities times $\sqrt{2Q}$ as in
`simulate_model`; a model that declares grid sizes, King and LIMEPY, runs on a
256-node profile grid and a 64 x 64 speed table, `FORWARD_GRIDS`: a gradient 4x
cheaper than with the builder's defaults, summaries within 0.003 sd of theirs)
from one fixed key
(**common random numbers**: the same uniforms every call, so the model's
summaries are a smooth, deterministic function of $\theta$) with `n_model`
stars, whose velocities are rescaled by $\sqrt{M_{\rm data}/M_{\rm model}}$ so that
the potential is that of the observed cluster's mass. Summary statistics
$t$ are computed alike from the model and from the data:

1. **SPH density at the observed stars.** `n_probes` observed stars, evenly
   spaced in radius order, are split into `num_density_bins` radial groups.
   The model's density at each probe is the SPH density
   (`progenax.sph.density`, cubic kernel, smoothing length $h$) of its first
   `n_sph` particles, each of weight $1/n_{\rm sph}$, evaluated at the probe
   (the probes enter the SPH sum as particles of zero mass); the data's is the
   leave-one-out SPH density of all observed stars (weights $1/(n - 1)$, own
   kernel term removed), an unbiased estimate of the same smoothed density.
   Summary: the log of each group's mean density.
2. **Projected velocity dispersion** in `num_velocity_bins` bins of projected
   radius $R$ (edges at quantiles of the data's $R$): the mean square
   line-of-sight velocity (with 3D velocities, the mean over the three
   components, an estimate of the same one-dimensional dispersion), as its log.
   For the data, velocities are taken about their mean; with measurement errors
   the model's dispersion gets the data's mean squared error added.
3. **Mass function**: the fraction of stars in mass bins with edges
   0.5, 1, 2, 5 Msun (and above 5; the fraction below 0.5 is implied).

Bins of model stars are soft (logistic edges of width `width` in $\ln R$ and
$\ln m$), so the summaries have gradients in $\theta$ (design rule 2); the same
soft bins are applied to the data, so they introduce no bias. The default width,
0.2, is wide enough that a single model star crossing a bin edge does not put a
bump into the likelihood (`DEFAULT_WIDTH`). Gradients flow
from the summaries through the SPH density and the builder (reverse mode:
SPH's hand-written VJP, the builder's samplers, King's profile solve).

**Likelihood.** $\log\mathcal L(\theta) = -\tfrac12 (t_{\rm obs} - t(\theta))^\top
\Sigma^{-1} (t_{\rm obs} - t(\theta))$, with $\Sigma$ fixed before sampling from
`num_covariance` simulations at a **fiducial point** $\theta_0$: for each key, a
mock data set of the observed size and kind and a model built from another key,
whose summary difference $t_{\rm data} - t_{\rm model}$ carries both the data's
noise and the common-random-number noise of the model. The precision is
debiased by the Hartlap factor $(K - p - 2)/(K - 1)$ ($K$ simulations, $p$
summaries). $\theta_0$ defaults to data-derived estimates (median radius, the
velocity moment estimate of Q, the IMF slope that maximises the mass
likelihood, and for King the grid start of `king_initial_values`); it is also
where NUTS starts.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpyro

from .._types import Array
from ..builders import model_builder
from ..builders.spherical import resolve_model
from ..models import AbstractClusterModel
from ..sph import density as sph_density
from ..sph.kernels import get_kernel
from ..units import G_PHYSICAL
from ..validation import check_static_int
from .data import ObservedCluster
from .initialization import plummer_initial_values
from .likelihoods import kroupa_log_likelihood
from .priors import check_prior_supports, shared_priors
from .simulate import simulate_model

MASS_EDGES = (0.5, 1.0, 2.0, 5.0)
_BIG = 1e3  # outer soft-bin edges in log units: effectively infinite
# Grids of a forward model that declares them (King and LIMEPY's
# profile_points, speed_table_size).
# Measured (taskset -c 1, float64, N = 2,000 King data, n_model = 1,000, at the
# truth and two points ~1.5-2 units away in every parameter; soft-bin width
# 0.05, the default then): a gradient of the
# log-likelihood costs 16 ms instead of 67 ms at the default 1024 / 128, and the
# summaries move by at most 2.8e-3 of their sd (log L by 0.017, its gradient by
# 4e-4 relative). 256 / 32 (13 ms) already moves them by 0.05 sd.
FORWARD_GRIDS = {"profile_points": 256, "speed_table_size": 64}
# Soft-bin edge width in ln R and ln m. With common random numbers each model
# star moves smoothly with theta, and crosses a bin edge over a change of ~width
# in ln r_h; at width 0.05 those crossings put bumps of a few tenths into log L.
# Measured on the Plummer example's data (N = 2,000, key 2) along r_h in
# [0.85, 1.25] at alpha = 2.28, Q = 0.56: 2 local maxima at width 0.05 (0.95 and
# 1.15, a dip of 0.1 between them, and split r-hat 1.014 for r_h in the example
# run), 1 at width 0.2, with the posterior sds unchanged to within 8 %.
DEFAULT_WIDTH = 0.2

INITIAL_VALUES: dict[type, Callable] = {}
"""Model class -> `f(data, total_mass, G)` giving data-based starting values of
its parameters (registered by the model's inference module, e.g. `infer.king`);
a model without one starts from the Plummer-based r_h and Q and its declared
defaults."""
FIDUCIAL_INSET = {"alpha": 0.05, "Q": 0.01}
"""How far inside its prior's support the fiducial alpha is searched and Q
clipped (with the default priors U(1.6, 3.5) and U(0.2, 1): [1.65, 3.45] and
[0.21, 0.99])."""


def _fiducial_bounds(priors: dict, name: str) -> tuple[float, float]:
    support = priors[name].support
    inset = FIDUCIAL_INSET[name]
    return float(support.lower_bound) + inset, float(support.upper_bound) - inset


class MockLikelihood(eqx.Module):
    """Everything the mock likelihood fixes before sampling (see the module docstring)."""

    model: type[AbstractClusterModel] = eqx.field(static=True)
    n_model: int = eqx.field(static=True)
    n_sph: int = eqx.field(static=True)
    num_density_bins: int = eqx.field(static=True)
    projected: bool = eqx.field(static=True)
    line_of_sight: bool = eqx.field(static=True)
    has_velocities: bool = eqx.field(static=True)
    has_masses: bool = eqx.field(static=True)
    h: float = eqx.field(static=True)
    """SPH smoothing length (pc), a Python float: `progenax.sph.density` checks
    h > 0 with `bool()`, which fails on a constant closed over inside jit."""
    key: Array
    probes: Array
    probe_group: Array
    log_R_edges: Array
    log_m_edges: Array
    width: Array
    error_variance: Array
    total_mass: Array
    observed: Array
    precision_cholesky: Array
    fiducial: dict


# -- summaries ----------------------------------------------------------------
def _soft_bins(y: Array, edges: Array, width: Array) -> Array:
    """(n, B) soft membership of y in the B bins between consecutive edges."""
    s = jax.nn.sigmoid((y[:, None] - edges[None, :]) / width)
    return s[:, :-1] - s[:, 1:]


def _safe_log_norm(x: Array) -> Array:
    r2 = jnp.sum(x**2, axis=-1)
    pos = r2 > 0
    return jnp.where(pos, 0.5 * jnp.log(jnp.where(pos, r2, 1.0)), -_BIG)


def _summaries(spec: MockLikelihood, x, v, m, rho_probes, probe_group, error_variance) -> Array:
    """The summary vector (module docstring).

    The log of each density group's mean gets a floor of 1 % of one model
    particle's central kernel value, W(0, h) / (100 n_sph), on both sides (data
    and model), so a group that no model particle reaches (a far-off proposal)
    gives a finite summary and gradient.
    """
    parts = []
    floor = get_kernel("cubic").value(jnp.zeros((), x.dtype), spec.h, x.shape[1]) / (100.0 * spec.n_sph)
    counts = jax.ops.segment_sum(jnp.ones_like(rho_probes), probe_group, spec.num_density_bins)
    means = jax.ops.segment_sum(rho_probes, probe_group, spec.num_density_bins) / counts
    parts.append(jnp.log(means + floor))
    if spec.has_velocities:
        w = _soft_bins(_safe_log_norm(x[:, :2]), spec.log_R_edges, spec.width)
        v2 = v**2 if spec.line_of_sight else jnp.mean(v**2, axis=-1)
        s2 = jnp.sum(w * v2[:, None], axis=0) / jnp.maximum(jnp.sum(w, axis=0), 1e-12)
        parts.append(jnp.log(s2 + error_variance + 1e-12))
    if spec.has_masses:
        parts.append(jnp.mean(_soft_bins(jnp.log(m), spec.log_m_edges, spec.width), axis=0))
    return jnp.concatenate(parts)


def _forward(spec: MockLikelihood, key, theta: dict) -> tuple[Array, Array, Array]:
    """Model stars (x, v, m) in pc, km/s, Msun from the builder at `key` (3D)."""
    declared = {p.name for p in spec.model.PARAMETERS}
    parameters = {k: v for k, v in theta.items() if k in declared}
    grids = {k: v for k, v in FORWARD_GRIDS.items() if k in declared}
    ic = model_builder(key, spec.model, n=spec.n_model, alpha=theta["alpha"], Q=None, **parameters, **grids)
    s = ic.state
    scale = jnp.sqrt(2.0 * theta["Q"] * spec.total_mass / jnp.sum(s.masses))
    return s.positions, s.velocities * scale, s.masses


def _observe_like(spec: MockLikelihood, x, v):
    x = x[:, :2] if spec.projected else x
    v = v[:, 2] if spec.line_of_sight else v
    return x, v


def model_summaries(spec: MockLikelihood, theta: dict, key=None, probes=None, probe_group=None) -> Array:
    """t(theta): the summaries of the cluster built at `theta` from `spec.key` (or `key`).

    Differentiable in `theta` (reverse mode) through the builder and the SPH density.
    """
    key = spec.key if key is None else key
    probes = spec.probes if probes is None else probes
    probe_group = spec.probe_group if probe_group is None else probe_group
    x, v, m = _forward(spec, key, theta)
    x, v = _observe_like(spec, x, v)
    x_sph = x[: spec.n_sph]
    n_probes = probes.shape[0]
    weights = jnp.concatenate([jnp.full((spec.n_sph,), 1.0 / spec.n_sph, x.dtype), jnp.zeros((n_probes,), x.dtype)])
    rho = sph_density(jnp.concatenate([x_sph, probes.astype(x.dtype)]), weights, spec.h)[spec.n_sph :]
    return _summaries(spec, x, v, m, rho, probe_group, spec.error_variance)


def _probe_selection(x: Array, n_probes: int, num_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of n_probes stars evenly spaced in radius order, and their radial group."""
    radius = np.linalg.norm(np.asarray(x), axis=-1)
    order = np.argsort(radius, kind="stable")
    picks = order[np.linspace(0, radius.size - 1, n_probes).round().astype(int)]
    group = np.minimum(np.arange(n_probes) * num_bins // n_probes, num_bins - 1)
    return picks, group


def data_summaries(spec: MockLikelihood, data: ObservedCluster, n_probes: int) -> tuple[Array, Array, Array]:
    """(t_data, probes, probe_group) of an observed cluster (concrete data)."""
    x = jnp.asarray(data.positions)
    n = x.shape[0]
    picks, group = _probe_selection(x, n_probes, spec.num_density_bins)
    rho_all = sph_density(x, 1.0 / (n - 1), spec.h)
    self_term = get_kernel("cubic").value(jnp.zeros(()), spec.h, x.shape[1]) / (n - 1)
    rho = rho_all[picks] - self_term
    v = None if data.velocities is None else data.velocities - jnp.mean(data.velocities, axis=0)
    t = _summaries(spec, x, v, data.masses, rho, jnp.asarray(group), 0.0)
    return t, x[picks], jnp.asarray(group)


# -- construction -------------------------------------------------------------
def _fiducial(data: ObservedCluster, model: type[AbstractClusterModel], total_mass, priors) -> dict[str, float]:
    """Starting point of the covariance simulations: alpha from the masses, r_h and
    Q from the data (`INITIAL_VALUES` of the model where registered), the other
    parameters at their declared defaults; alpha and Q inside their priors' supports."""
    lo, hi = _fiducial_bounds(priors, "alpha")
    alphas = np.linspace(lo, hi, 37)
    if data.masses is not None:
        log_l = [float(kroupa_log_likelihood(data.masses, a)) for a in alphas]
        alpha = float(alphas[int(np.argmax(log_l))])
    else:
        alpha = 2.3
    start = plummer_initial_values(data, total_mass, G_PHYSICAL)
    fid = {p.name: float(p.default) for p in model.PARAMETERS if not p.static and p.default is not None}
    fid.update(r_h=float(start["r_h"]), alpha=alpha, Q=float(start.get("Q", 0.5)))
    if model in INITIAL_VALUES and not data.projected:
        start = INITIAL_VALUES[model](data, total_mass, G_PHYSICAL)
        fitted = {p.name for p in model.PARAMETERS} | {"Q"}  # not the frame (centre, bulk velocity)
        fid.update({k: float(v) for k, v in start.items() if k in fitted})
    fid["Q"] = float(np.clip(fid["Q"], *_fiducial_bounds(priors, "Q")))
    return fid


def mock_likelihood(
    data: ObservedCluster,
    model: str | type[AbstractClusterModel] = "plummer",
    *,
    key,
    n_model: int = 1000,
    n_sph: int = 500,
    n_probes: int = 256,
    num_density_bins: int = 4,
    num_velocity_bins: int = 4,
    h_factor: float = 0.25,
    width: float = DEFAULT_WIDTH,
    num_covariance: int = 100,
    fiducial: dict | None = None,
    total_mass: float | None = None,
    priors: dict | None = None,
) -> MockLikelihood:
    """Set up the mock likelihood of `data` under any registered `model`.

    **Arguments:**

    - `data`: a concrete `ObservedCluster` (3D or projected positions; 3D or
      line-of-sight velocities, optional; masses optional).
    - `model`: a model name from `progenax.models.REGISTRY` ("plummer", "king",
      "dehnen", ...) or a model class; its declared parameters are fitted
      besides alpha and Q.
    - `key` (required): the common-random-numbers key (int or `jax.random`
      key) of the forward model; the covariance simulations use keys folded
      from it.
    - `n_model`: stars in the forward model (static); `n_sph`: how many of them
      enter the SPH density (<= n_model); `n_probes`: observed stars where it is
      evaluated (<= n); `num_density_bins`, `num_velocity_bins`: radial groups.
    - `h_factor`: SPH smoothing length as a fraction of the data's median radius.
    - `width`: soft-bin edge width in ln R and ln m.
    - `num_covariance`: simulations at the fiducial point for the covariance.
    - `fiducial`: dict overriding the data-derived fiducial parameters.
    - `total_mass`: cluster mass (Msun) for the potential; default the sum of the
      observed masses (required without masses).
    - `priors`: the priors of alpha and Q the sampler will use (numpyro
      distributions with interval supports; default `shared_priors`): the
      fiducial point is kept inside their supports.

    **Returns:** a `MockLikelihood`, to pass as `likelihood=` to `plummer_model` /
    `king_model`.
    """
    model = resolve_model(model)
    if not isinstance(data, ObservedCluster):
        raise ValueError(f"data must be an ObservedCluster, got {type(data).__name__}")
    for name, value, lo in [
        ("n_model", n_model, 16),
        ("n_sph", n_sph, 16),
        ("n_probes", n_probes, 4),
        ("num_density_bins", num_density_bins, 1),
        ("num_velocity_bins", num_velocity_bins, 1),
        ("num_covariance", num_covariance, 8),
    ]:
        check_static_int(name, value, lo)
    if n_sph > n_model:
        raise ValueError(f"n_sph must be <= n_model = {n_model}, got {n_sph}")
    if n_probes > data.n or num_density_bins > n_probes:
        raise ValueError(
            f"need num_density_bins <= n_probes <= n (the data's {data.n} stars), got {num_density_bins}, {n_probes}"
        )
    if data.masses is None and total_mass is None:
        raise ValueError("total_mass is required when masses are not observed")
    if not (h_factor > 0 and width > 0):
        raise ValueError(f"h_factor and width must be > 0, got {h_factor}, {width}")
    key = jax.random.PRNGKey(key) if isinstance(key, int) else key
    dtype = data.positions.dtype
    M = jnp.sum(data.masses) if total_mass is None else jnp.asarray(total_mass, dtype)
    radius = np.linalg.norm(np.asarray(data.positions), axis=-1)
    R = np.linalg.norm(np.asarray(data.positions)[:, :2], axis=-1)
    q = np.quantile(np.log(R[R > 0]), np.linspace(0, 1, num_velocity_bins + 1)[1:-1])
    errors = data.velocity_errors
    spec = MockLikelihood(
        model=model,
        n_model=int(n_model),
        n_sph=int(n_sph),
        num_density_bins=int(num_density_bins),
        projected=data.projected,
        line_of_sight=data.line_of_sight,
        has_velocities=data.velocities is not None,
        has_masses=data.masses is not None,
        key=key,
        probes=jnp.zeros((n_probes, data.positions.shape[1]), dtype),
        probe_group=jnp.zeros((n_probes,), jnp.int32),
        h=float(h_factor * np.median(radius)),
        log_R_edges=jnp.asarray(np.concatenate([[-_BIG], q, [_BIG]]), dtype),
        log_m_edges=jnp.asarray(np.concatenate([np.log(MASS_EDGES), [_BIG]]), dtype),
        width=jnp.asarray(width, dtype),
        error_variance=jnp.asarray(0.0 if errors is None else float(np.mean(np.asarray(errors) ** 2)), dtype),
        total_mass=M,
        observed=jnp.zeros(0, dtype),
        precision_cholesky=jnp.zeros((0, 0), dtype),
        fiducial={},
    )
    t_obs, probes, group = data_summaries(spec, data, n_probes)
    merged_priors = {**shared_priors(data.projected, data.line_of_sight), **dict(priors or {})}
    check_prior_supports(merged_priors, model)
    fid = _fiducial(data, model, None if total_mass is None else M, merged_priors)
    fid.update(fiducial or {})
    fid = {k: jnp.asarray(v, dtype) for k, v in fid.items()}
    spec = eqx.tree_at(lambda s: (s.probes, s.probe_group, s.observed, s.fiducial), spec, (probes, group, t_obs, fid))
    cov = _covariance(spec, data, fid, num_covariance, n_probes)
    p = t_obs.shape[0]
    hartlap = (num_covariance - p - 2) / (num_covariance - 1)
    if hartlap <= 0:
        raise ValueError(f"num_covariance = {num_covariance} is too small for {p} summaries (need > {p + 2})")
    chol_prec = jnp.linalg.cholesky(jnp.linalg.inv(cov) * hartlap)
    return eqx.tree_at(lambda s: s.precision_cholesky, spec, chol_prec)


def _covariance(spec, data, fid, num, n_probes) -> Array:
    """Covariance of t_data - t_model over `num` simulations at the fiducial point."""
    declared = {p.name for p in spec.model.PARAMETERS}
    parameters = {k: v for k, v in fid.items() if k in declared}
    err = None if data.velocity_errors is None else float(np.sqrt(spec.error_variance))
    model_t = jax.jit(lambda k, probes, group: model_summaries(spec, fid, k, probes, group))
    diffs = []
    for j in range(num):
        k_data, k_model = jax.random.split(jax.random.fold_in(spec.key, 1000 + j))
        mock = simulate_model(
            k_data,
            spec.model,
            n=data.n,
            alpha=fid["alpha"],
            Q=fid["Q"],
            **parameters,
            projected=data.projected,
            velocities="los" if data.line_of_sight else data.velocities is not None,
            velocity_error=err,
        )
        if data.masses is None:
            mock = ObservedCluster(mock.positions, mock.velocities, None, mock.velocity_errors)
        t_data, probes, group = data_summaries(spec, mock, n_probes)
        diffs.append(np.asarray(t_data - model_t(k_model, probes, group)))
    return jnp.asarray(np.cov(np.stack(diffs), rowvar=False))


def mock_log_likelihood(spec: MockLikelihood, theta: dict) -> Array:
    """The Gaussian synthetic log-likelihood at parameters `theta` (dict of scalars).

    A non-finite parameter (a NUTS trajectory gone astray) gives -inf, with the
    builder run at the fiducial point instead so its range checks never fire.
    """
    ok = jnp.all(jnp.stack([jnp.isfinite(theta[k]) for k in spec.fiducial]))
    safe = {k: jnp.where(ok, theta[k], spec.fiducial[k]) for k in spec.fiducial}
    r = (spec.observed - model_summaries(spec, safe)) @ spec.precision_cholesky
    return jnp.where(ok, -0.5 * jnp.sum(r**2), -jnp.inf)


def mock_factor(spec: MockLikelihood, theta: dict) -> None:
    """Add the mock log-likelihood as the numpyro factor "log_likelihood" (`check_model_arguments`
    has checked that `spec` was built for the calling model)."""
    numpyro.factor("log_likelihood", mock_log_likelihood(spec, theta))
