r"""Any spherical model as a cluster: masses, the model's phase space, modifiers, finish.

The builder every model gets for free (`model_builder`), and that the named
builders of the closed-form models (`plummer_builder`, `eff_builder`,
`king_builder`, `limepy_builder`) compose. Random streams, fixed for every
model so an option never reshuffles the others: `split(key, 5)` gives the masses,
radii, position directions, speeds and velocity directions; segregation uses
`fold_in(key, 7)`, binaries `fold_in(key, 11)` and rotation `fold_in(key, 13)`
(`progenax.structure.rotation`, applied after segregation, before the finish).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from .._fusion import materialize
from .._types import ArrayLike, Key
from ..binaries import BinaryPopulation
from ..imf import PowerLawIMF
from ..models import REGISTRY, AbstractClusterModel
from ..models.osipkov_merritt import OSIPKOV_MERRITT_LIMIT_MESSAGE, osipkov_merritt_limit
from ..state import InitialConditions
from ..structure.rotation import check_rotation_arguments, rotate
from ..structure.segregation import check_segregation_arguments
from ..validation import deferred_checks, errors_as_nan
from ._binaries import check_binaries, draw_companions, drop_absent_companions, velocities_for_systems
from ._common import (
    as_key,
    check_common_arguments,
    finish_cluster,
    imf_params,
    resolve_imf,
    sample_masses,
    segregate,
)
from .sharded import finish_share, map_shares, refuse_unsharded, sharded_cluster


def draw_spherical(key, n, model_cls, values, alpha, imf, total_mass=jnp.sum):
    """n masses from the IMF, the model of their total mass (`total_mass(masses)`:
    a sum over the mesh for one device's share), and n positions and velocities
    about its centre, from the key's first five streams (module docstring)."""
    k_m, k_r, k_rdir, k_v, k_vdir = jax.random.split(key, 5)
    masses = materialize(sample_masses(k_m, n, imf, alpha))
    model = model_cls(**values).with_mass(total_mass(masses))
    positions, velocities = model.sample_phase_space((k_r, k_rdir, k_v, k_vdir), n, model.r_h.dtype)
    return masses, model, positions, velocities


def spherical_params(model, imf, alpha, Q) -> dict:
    """What `InitialConditions.params` records before the modifiers add theirs."""
    params = {**model.record(), **imf_params(imf, alpha)}
    if Q is not None:
        params["Q"] = Q
    return params


@deferred_checks
def build_spherical(
    key,
    n,
    model_cls,
    values,
    alpha,
    Q,
    imf,
    units,
    segregation=None,
    temperature=None,
    binaries=None,
    rotation=None,
    rotation_scale=None,
):
    """Draw n stars (or n systems, with `binaries`) from `model_cls(**values)`
    (see the module docstring), jitted."""
    masses, model, positions, velocities = draw_spherical(key, n, model_cls, values, alpha, imf)
    params = spherical_params(model, imf, alpha, Q)
    # A derived edge (King's r_t) grows with the positions; a parameter (a truncated EFF's r_t) names the model.
    edge = "r_t" if "r_t" in params and "r_t" not in {p.name for p in model_cls.PARAMETERS} else None
    positions, velocities = segregate(
        key, positions, velocities, masses, params, segregation, temperature, keep_virial_ratio=Q is None, edge=edge
    )
    velocities = rotate(key, positions, velocities, params, rotation, rotation_scale)
    companions = draw_companions(key, masses, binaries, resolve_imf(imf, alpha))
    velocities = velocities_for_systems(velocities, masses, companions, Q)
    cluster, _ = finish_cluster(  # no mesh W: the spherical estimate scales Q
        model,
        positions,
        velocities,
        masses,
        params,
        Q,
        units,
        centre_positions=model.CENTRE_POSITIONS,
        companions=companions,
        binaries=binaries,
    )
    return cluster


def build_on_mesh(key, common, model_cls, values, segregation, binaries, rotation, rotation_scale, mesh):
    """`build_model_cluster`'s sharded build (`progenax.builders.sharded`), from its validated arguments."""
    refuse_unsharded(segregation=segregation, binaries=binaries)
    options = (common.alpha, common.Q, common.imf, common.units, rotation, rotation_scale)
    return _build_sharded(key, common.n, model_cls, values, *options, mesh, model_cls.CENTRE_POSITIONS)


@deferred_checks
def _build_sharded(
    key, n, model_cls, values, alpha, Q, imf, units, rotation, rotation_scale, mesh, centre_positions
) -> InitialConditions:
    """n stars of `model_cls(**values)` over `mesh` (`progenax.builders.sharded`), jitted."""

    def draw(share, key, values, alpha, Q, rotation, rotation_scale):
        k = share.key(key)
        total_mass = lambda m: share.total(jnp.sum(m))  # noqa: E731
        masses, model, x, v = draw_spherical(k, share.rows, model_cls, values, alpha, imf, total_mass)
        params = spherical_params(model, imf, alpha, Q)
        v = rotate(k, x, v, params, rotation, rotation_scale)
        x, v, w = finish_share(share, x, v, masses, Q, centre_positions)
        return (x, v, masses), (model, params, w)

    (x, v, masses), (model, params, w) = map_shares(draw, (key, values, alpha, Q, rotation, rotation_scale), n, mesh)
    return sharded_cluster(x, v, masses, model, params, units, w)


def resolve_model(model: str | type[AbstractClusterModel]) -> type[AbstractClusterModel]:
    """A model class from a registered name or the class itself."""
    if isinstance(model, type) and issubclass(model, AbstractClusterModel):
        return model
    if model in REGISTRY:
        return REGISTRY[model]
    raise ValueError(f"model must be one of {sorted(REGISTRY)} or an AbstractClusterModel class, got {model!r}")


def build_model_cluster(
    key,
    model_cls,
    common,
    parameters: dict[str, Any],
    segregation,
    temperature,
    binaries=None,
    rotation=None,
    rotation_scale=0.0,
    mesh=None,
) -> InitialConditions:
    """Validate the model's parameters against its declared supports, then build
    (and drop the absent companions of an eager hard-mode binary build); over
    `mesh`'s devices when one is given (`progenax.builders.sharded`)."""
    values = model_cls.checked(common.checks, **parameters)
    S, T = check_segregation_arguments(common.checks, segregation, temperature)
    k, L0 = check_rotation_arguments(common.checks, rotation, rotation_scale)
    binaries = check_binaries(binaries)
    if mesh is None:
        args = (common.alpha, common.Q, common.imf, common.units, S, T, binaries, k, L0)
        return _checked_build(
            common, model_cls, values, lambda: build_spherical(as_key(key), common.n, model_cls, values, *args)
        )
    with errors_as_nan():  # an error raised by one device's program would stall the others
        return _checked_build(
            common,
            model_cls,
            values,
            lambda: build_on_mesh(as_key(key), common, model_cls, values, S, binaries, k, L0, mesh),
        )


def _checked_build(common, model_cls, values, build) -> InitialConditions:
    """`build()` with the traced checks tied to its output, and the absent
    companions of an eager hard-mode binary build dropped."""
    try:
        out = build()
    except ValueError as error:
        raise _with_anisotropy_limit(error, model_cls, values) from None
    return drop_absent_companions(common.checks.attach(out))


def _with_anisotropy_limit(error: ValueError, model_cls, values) -> ValueError:
    """An eager build refused for an ra below the consistency limit: the message
    gains the limit of these parameters (computed only then, one small compile)."""
    ra = values.get("ra")
    if OSIPKOV_MERRITT_LIMIT_MESSAGE not in str(error) or ra is None or isinstance(ra, jax.core.Tracer):
        return error
    limit = float(jax.jit(osipkov_merritt_limit)(model_cls(**values)))
    return ValueError(f"{error}; here the limit is {limit:.6g} pc, got ra = {float(ra):.6g}")


def model_builder(
    key: Key | int,
    model: str | type[AbstractClusterModel],
    *,
    n: int = 10_000,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike | None = 0.5,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
    binaries: BinaryPopulation | None = None,
    rotation: ArrayLike | None = None,
    rotation_scale: ArrayLike = 0.0,
    mesh: Mesh | None = None,
    **parameters: ArrayLike,
) -> InitialConditions:
    r"""A cluster drawn from any registered spherical model.

    Radii by inverse CDF of the model's $M(<r)$, speeds from its isotropic DF
    (its closed form, or the numerical Eddington inversion of
    `progenax.models.eddington`), isotropic directions; then the builders'
    common finish (centre-of-mass frame, velocities scaled to `Q`).

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed); `model`: a name from
      `progenax.models.REGISTRY` ("plummer", "eff", "limepy", "dehnen", ...)
      or a model class.
    - `n`, `alpha`, `Q`, `imf`, `units`, `segregation`,
      `segregation_temperature`, `binaries`, `rotation`, `rotation_scale`,
      `mesh`: as for `progenax.plummer_builder`.
    - `**parameters`: the model's own (its `PARAMETERS`, e.g. `gamma=1.0,
      r_h=1.0` for "dehnen"); each is checked against its declared support.
      "plummer", "eff" and "dehnen" take `ra` (pc, None: isotropic), the
      Osipkov-Merritt anisotropy radius (`progenax.plummer_builder`); "limepy"
      takes its own `ra` in King radii.

    **Returns:** `InitialConditions` whose `model` is the model drawn from.

    ```python
    ic = progenax.model_builder(jax.random.PRNGKey(0), "dehnen", n=10_000, gamma=1.0, r_h=1.0)
    ```
    """
    model_cls = resolve_model(model)
    r_h = parameters.get("r_h", model_cls.parameter("r_h").default)
    common = check_common_arguments(n, units, imf, r_h, alpha, Q)
    parameters = {**parameters, "r_h": common.r_h}
    return build_model_cluster(
        key,
        model_cls,
        common,
        parameters,
        segregation,
        segregation_temperature,
        binaries,
        rotation,
        rotation_scale,
        mesh,
    )
