r"""Target densities of a relaxation: a cluster's model, a uniform box, or
the cluster's own smoothed radial profile; and the tracer masses the SPH
density of a star cluster is measured with.

Each target is a `jax.tree_util.Partial` of a module-level function, with
the numbers it needs as pytree leaves, so relaxations of targets of one kind
and size share one compiled step loop.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..models import density_at, prepared_density
from ..sampling import safe_norm
from .projections import centre_of_mass, profile_knots


def model_density(ic) -> Callable[[Array], Array]:
    r"""The mass density $\rho(x)$ of the model `ic` was built from (`ic.model`),
    about the origin, in the units of `ic` (mass / length^3), for the model's
    own total mass (`ic.model.total_mass`, in Msun: what the stars were drawn
    from). A tidally truncated cluster's weighted stars then meet the full
    model's density inside the truncation radius; scaled to the weighted mass
    instead (65% of it for a Plummer sphere cut at 1.5 r_h), its target was
    too low everywhere and its half-mass radius drifted.

    Returned as a `jax.tree_util.Partial` of a module-level function with the
    model as its pytree argument, so relaxations of models of one kind and
    size share one compiled step loop.

    **Raises** `ValueError` (`progenax.models.NoAnalyticFormError`) for a model
    without an analytic density (fractal, multi-mass): pass `target=` instead.
    """
    if ic.units.name != "physical":
        raise ValueError("model_density needs an InitialConditions in physical units (ic.to_physical())")
    # raises now (NoAnalyticFormError) for a model without a density
    model, _ = prepared_density(ic.model, ic.model.total_mass, jnp.zeros((), ic.state.positions.dtype))
    return jax.tree_util.Partial(density_at, model)


def profile_density(ic, shells: int | None = None) -> Callable[[Array], Array]:
    r"""The cluster's own spherically averaged density, smoothed: the target
    for a cluster read from a file without a model (Gadget, NBODY6), in the
    units of `ic` (mass / length^3), about its centre of mass.

    The stars, with their tracer masses (`tracer_masses`: the density
    relaxation matches is a number density times the mean mass), are cut into
    `shells` shells of equal mass at their Lagrangian radii $r_k$; each
    shell's mean density $\rho_k = (M/K) / \tfrac{4\pi}{3}(r_{k+1}^3 - r_k^3)$
    sits at its volume-median radius, and $\log\rho$ is interpolated linearly
    in $\log r$ between them: flat inside the first, and beyond the last
    falling as the last pair of shells does, $r^{-s}$ with $s \ge 3$ (a finite
    mass). The outermost shell (out to the farthest star) is left out.
    Default `shells`: $\sqrt{N}/3$, between 4 and 40, so a shell holds at
    least ~30 stars and its density is uncertain by $1/\sqrt{N/K}$ (2% at
    N = 100,000, 9% at 2,000): the target keeps the cluster's own radial
    profile, not its Poisson noise at scales below a shell.
    """
    x = ic.state.positions
    n = x.shape[0]
    if shells is None:
        shells = int(np.clip(round(np.sqrt(n) / 3), 4, 40))
    if not isinstance(shells, int) or not 3 <= shells <= n // 8:
        raise ValueError(f"shells must be an int in [3, N / 8] (N = {n}), got {shells!r}")
    w = tracer_masses(ic)  # a number density: the SPH density relax matches uses these masses
    centre = centre_of_mass(x, ic.state.masses * ic.weights)
    edges = jnp.concatenate([jnp.zeros(1, x.dtype), profile_knots(x, w, shells, centre)])
    volumes = (4.0 * np.pi / 3.0) * (edges[1:] ** 3 - edges[:-1] ** 3)
    rho = (jnp.sum(w) / shells) / volumes
    mid = (0.5 * (edges[1:] ** 3 + edges[:-1] ** 3)) ** (1.0 / 3.0)
    log_r, log_rho = jnp.log(mid), jnp.log(rho)
    tail = jnp.minimum((log_rho[-1] - log_rho[-2]) / (log_r[-1] - log_r[-2]), -3.0)
    return jax.tree_util.Partial(_profile_density, centre, log_r, log_rho, tail)


def _profile_density(centre, log_r, log_rho, tail, x):
    r = safe_norm(x - centre)
    log_x = jnp.log(jnp.where(r > 0, r, jnp.exp(log_r[0])))
    inside = jnp.interp(log_x, log_r, log_rho)
    beyond = log_rho[-1] + tail * (log_x - log_r[-1])
    return jnp.exp(jnp.where(log_x > log_r[-1], beyond, inside))


def _uniform_density(value, x):
    return jnp.full(x.shape[:1], value, x.dtype)


def _resolve_target(target, ic, box, dtype) -> tuple[Callable[[Array], Array], bool]:
    """(callable target, is_uniform)."""
    if target is None:
        if ic is None:
            raise ValueError(
                "target=None uses the profile the cluster was built from: pass an InitialConditions, "
                "or give target (a constant density or a callable rho(x))"
            )
        return model_density(ic), False
    if callable(target):
        return target, False
    value = jnp.asarray(target, dtype)
    if value.ndim != 0:
        raise ValueError(f"target must be None, a scalar density or a callable rho(x), got shape {value.shape}")
    if box is None:
        raise ValueError("a constant target describes a uniform periodic box: give box=")
    return jax.tree_util.Partial(_uniform_density, value), True


def _check_target_values(rho_t: Array) -> Array:
    bad = ~jnp.isfinite(rho_t) | (rho_t <= 0)
    message = "the target density must be finite and positive at every particle"
    if isinstance(bad, jax.core.Tracer):
        return eqx.error_if(rho_t, jnp.any(bad), message)
    if bool(jnp.any(bad)):
        count = int(jnp.sum(bad))
        raise ValueError(f"{message}: {count} of {bad.size} particles sit where it is negative, zero or NaN")
    return rho_t


def tracer_masses(ic) -> Array:
    """The masses the SPH density of a star cluster is measured with: every
    star weighs the mean (weighted) stellar mass.

    Stars sample the model's density with a number density proportional to its
    mass density (unsegregated clusters), so equal tracer masses make the SPH
    density an estimate of the model density. With the stars' own masses (a
    Kroupa IMF spans 0.08 to 100 Msun) a low-mass star next to a massive one
    would see a density spike of its neighbour's mass: at N = 10,000 the rms
    deviation of a fresh Plummer sample was 149% that way, and relaxation
    would clear voids around the massive stars. The stars keep their masses.

    With binaries (`ic.pairs`) the tracers are the systems: a pair is one
    system on its primary's row (as in `InitialConditions.systems`), and its
    secondary's row weighs 0.
    """
    w = ic.weights if ic.pairs is None else ic.weights.at[ic.pairs[:, 1]].set(0.0)
    return w * jnp.sum(ic.state.masses * ic.weights) / jnp.sum(w)
