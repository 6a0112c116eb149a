r"""Start NUTS from a point the data allow: the Plummer likelihood has hard walls.

A star moving faster than the model's edge speed $w = \sqrt{2Q}\,v_e$ has zero
likelihood, so a random start (numpyro's default `init_to_uniform`) can land where
the log-density is $-\infty$ everywhere around it. Models attach a data-derived
starting value to each site (`infer={"init_value": x}`), and `init_to_data` uses
it, falling back to `init_to_uniform` for sites without one.
"""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
from numpyro.distributions import constraints
from numpyro.infer.initialization import init_to_uniform

from .._types import Array
from ..profiles.plummer import HALF_MASS_FACTOR
from .data import ObservedCluster

INIT_KEY = "init_value"


class StartValue:
    """A site's starting value in its `infer` dict
    (`infer={INIT_KEY: StartValue(x)}`, as `init_to_data` reads it), opaque to
    JAX: numpyro traces keep `infer` as pytree metadata, which JAX compares
    with `==`, and ArviZ's `from_numpyro` traces the model under
    `jax.eval_shape`. A bare array there leaked that trace's tracer into the
    next comparison, so a second fit (or `to_inference_data`) in one process
    raised "arrays cannot be passed as metadata fields". Compared by identity."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def init_to_data(site=None):
    """numpyro init strategy (call it with no site: `init_to_data()`): a site's
    `infer["init_value"]` (a value, or one wrapped in `StartValue`), else
    `init_to_uniform`.

    The value is moved 1e-3 of the width inside an interval support, so a start
    outside the prior's range is never proposed.

    ```python
    NUTS(progenax.infer.plummer_model, init_strategy=progenax.infer.init_to_data())
    ```
    """
    if site is None:
        return partial(init_to_data)
    value = (site.get("infer") or {}).get(INIT_KEY)
    if isinstance(value, StartValue):
        value = value.value
    if site["type"] != "sample" or site["is_observed"] or value is None:
        return init_to_uniform(site)
    support = site["fn"].support
    if isinstance(support, constraints.interval):
        width = support.upper_bound - support.lower_bound
        value = jnp.clip(value, support.lower_bound + 1e-3 * width, support.upper_bound - 1e-3 * width)
    elif isinstance(support, constraints.greater_than):
        value = jnp.maximum(value, support.lower_bound + 1e-6)
    return jnp.broadcast_to(value, site["fn"].shape())


def plummer_initial_values(data: ObservedCluster, total_mass: Array | None, G: float) -> dict[str, Array]:
    r"""Data-derived starting values for r_h (pc), Q, the centre and the bulk velocity.

    centre: the median of each coordinate; bulk velocity: the mean velocity.
    r_h: the median radius about that centre (half of the stars lie inside r_h
    in 3D; in projection the median R is the Plummer radius a = r_h / 1.305).
    Q (line-of-sight velocities: with 3 v_z^2 for v^2, less the squared errors
    in the moment): the moment estimate $\langle v^2 \sqrt{r^2 + a^2}\rangle / (G M)$ (for the
    DF, $\langle v^2 \mid r\rangle = Q\,G M/\sqrt{r^2+a^2}$), raised to 1.1 times
    the smallest Q for which every star is inside the edge,
    $\max_i v_i^2\sqrt{r_i^2+a^2}/(4 G M)$. Projected data use R for r, which
    only raises the bound, so the start stays feasible.
    """
    centre = jnp.median(data.positions, axis=0)
    x = data.positions - centre
    radius = jnp.sqrt(jnp.sum(x**2, axis=-1))
    r_median = jnp.median(radius)
    r_h = r_median * HALF_MASS_FACTOR if data.projected else r_median
    values = {"r_h": r_h, "centre": centre}
    if data.velocities is not None and (total_mass is not None or data.masses is not None):
        M = jnp.sum(data.masses) if total_mass is None else total_mass
        a = r_h / HALF_MASS_FACTOR
        bulk = jnp.mean(data.velocities, axis=0)
        scale = jnp.sqrt(radius**2 + a**2) / (G * M)
        if data.line_of_sight:
            # <v_z^2> = <v^2> / 3; errors add e^2 to it (not to the edge bound).
            e2 = 0.0 if data.velocity_errors is None else data.velocity_errors**2
            moment = jnp.mean(3.0 * jnp.maximum((data.velocities - bulk) ** 2 - e2, 0.0) * scale)
            k = (data.velocities - bulk) ** 2 * scale
        else:
            k = jnp.sum((data.velocities - bulk) ** 2, axis=-1) * scale
            moment = jnp.mean(k)
        values["Q"] = jnp.maximum(moment, 1.1 * jnp.max(k) / 4.0)
        values["bulk_velocity"] = bulk
    return values
