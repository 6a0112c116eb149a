"""The fractal builder: a box fractal (`progenax.structure.fractal`) on a Plummer profile.

Random streams: `split(key, 3)` gives the masses, the fractal and segregation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from .._compile import mesh_core_compiles_fast
from .._types import ArrayLike, Key
from ..binaries import BinaryPopulation
from ..diagnostics.energy import scale_to_virial_ratio
from ..diagnostics.radii import half_mass_radius
from ..diagnostics.ring import ring_weighted_quantiles
from ..imf import PowerLawIMF
from ..models import RecordedModel
from ..sampling import safe_norm
from ..state import InitialConditions
from ..structure.fractal import D_MAX, D_MIN, box_fractal, box_fractal_share, remap_to_plummer, remap_to_plummer_share
from ..structure.segregation import apply_segregation, check_segregation_arguments
from ..units import G_PHYSICAL
from ..validation import check_scalar, deferred_checks, errors_as_nan, without_checks
from ._binaries import check_binaries, draw_companions, drop_absent_companions
from ._common import (
    as_key,
    centre_of_mass_frame,
    check_common_arguments,
    finish_cluster,
    imf_params,
    recorded,
    resolve_imf,
    sample_masses,
)
from .sharded import finish_share, map_shares, refuse_unsharded, sharded_cluster

PROFILES = ("plummer", "box")
"""`fractal_builder(profile=...)`: remapped onto a Plummer sphere, or the pure box fractal."""


RANKING_Q = 0.5
"""Virial ratio of the velocities whose energies rank the orbits for segregation."""


def _segregate(key, positions, velocities, masses, S, temperature):
    """Mass segregation S of the remapped fractal, and none at all where S is 0.

    The orbits are ranked by energies with velocities scaled to `RANKING_Q`
    (virial equilibrium, as the model builders rank their equilibrium DF
    velocities) and equal masses, whatever Q the cluster gets: the ranking,
    hence the permutation, does not depend on Q. A traced S of exactly 0
    returns the unsegregated stars (as a concrete 0 does): at S = 0 the keys
    are random, but the orbits they pick still follow the energy order, which
    moves with alpha and Q and would make both jump (issue 22).
    """
    dtype = positions.dtype
    mean = jnp.full_like(masses, jnp.mean(masses))
    origin = jnp.zeros(3, dtype)
    v = velocities - jnp.mean(velocities, axis=0)
    v = scale_to_virial_ratio(positions, v, mean, RANKING_Q, G=G_PHYSICAL, method="spherical", centre=origin)

    def segregated(operands):
        x, v = operands
        return apply_segregation(key, x, v, masses, S, temperature=temperature, G=G_PHYSICAL)

    return jax.lax.cond(S > 0, segregated, lambda operands: operands, (positions, v))


@deferred_checks(fast_compile=mesh_core_compiles_fast)
def _fractal(key, n, D, r_h, alpha, Q, imf, units, segregation, temperature, binaries=None, profile="plummer"):
    k_m, k_f, k_s = jax.random.split(key, 3)
    dtype = r_h.dtype
    masses = sample_masses(k_m, n, imf, alpha)
    raw_pos, raw_vel = without_checks(box_fractal)(k_f, n, D, dtype=dtype)  # D checked by the builder
    if profile == "box":  # the fractal's own radii, scaled to r_h about the centre of mass
        positions = raw_pos * (r_h / half_mass_radius(raw_pos, masses))
    else:
        positions = remap_to_plummer(raw_pos, masses, r_h)
    params = {"D": D, "r_h": r_h, "Q": Q, **imf_params(imf, alpha)}
    if segregation is not None:
        positions, raw_vel = _segregate(k_s, positions, raw_vel, masses, segregation, temperature)
        params["segregation"] = segregation
    model = RecordedModel("fractal", dict(params), jnp.sum(masses))
    companions = draw_companions(key, masses, binaries, resolve_imf(imf, alpha))
    return finish_cluster(
        model,
        positions,
        raw_vel,
        masses,
        params,
        Q,
        units,
        large_n_energy="mesh",
        companions=companions,
        binaries=binaries,
    )


@deferred_checks(fast_compile=mesh_core_compiles_fast)
def _fractal_sharded(key, n, D, r_h, alpha, Q, imf, units, profile, mesh):
    """`_fractal` with each device of `mesh` building n / D of the stars
    (`progenax.builders.sharded`): the tree from the builder's fractal key
    on every device (`structure.fractal.box_fractal_share`), masses from the
    device's own key, the radial remap and W over the devices."""

    def draw(share, key, D, r_h, alpha, Q):
        k_f = jax.random.split(key, 3)[1]  # the one tree's key, as on one device
        k_m = jax.random.split(share.key(key), 3)[0]
        dtype = r_h.dtype
        masses = sample_masses(k_m, share.rows, imf, alpha)
        raw_pos, raw_vel = box_fractal_share(k_f, n, D, share.axis_name, share.n_devices, dtype=dtype)
        if profile == "box":
            radii = safe_norm(centre_of_mass_frame(raw_pos, masses, share.total))
            half = ring_weighted_quantiles(radii, masses, jnp.full(1, 0.5, dtype), share.axis_name, share.n_devices)
            positions = raw_pos * (r_h / half[0])
        else:
            positions = remap_to_plummer_share(raw_pos, masses, r_h, share.axis_name, share.n_devices)
        x, v, w = finish_share(share, positions, raw_vel, masses, Q, centre_positions=True, energy="mesh")
        params = {"D": D, "r_h": r_h, "Q": Q, **imf_params(imf, alpha)}
        return (x, v, masses), (params, w)

    (x, v, masses), (params, w) = map_shares(draw, (key, D, r_h, alpha, Q), n, mesh)
    model = RecordedModel("fractal", dict(params), jnp.sum(masses))
    return sharded_cluster(x, v, masses, model, params, units, w)


def fractal_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    D: ArrayLike = 1.6,
    r_h: ArrayLike = 1.0,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike = 0.5,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
    binaries: BinaryPopulation | None = None,
    profile: str = "plummer",
    mesh: Mesh | None = None,
) -> InitialConditions:
    r"""A fractal cluster: GW04 box fractal remapped radially onto a Plummer sphere.

    Positions: `box_fractal` (fractal dimension `D`), with each radius replaced by
    that of a Plummer sphere of 3D half-mass radius `r_h` at the same enclosed
    mass (angles and radial order kept; see the module docstring). Velocities:
    inherited from the fractal's parents plus a random component, then (after
    optional mass segregation) moved to the centre-of-mass frame and scaled so
    that $T/|W| = Q$; W is the exact pairwise sum up to 20,000 stars and the
    substructure-aware nested-mesh P3M estimate above
    (`progenax.diagnostics.potential_energy(method="mesh")`, measured within
    0.1% of the exact W for D = 1.6, see `progenax.diagnostics.mesh`).

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed); `n`: number of stars (static).
    - `D`: fractal dimension in [1.6, 3] (1.6 very clumpy, 3 no substructure);
      partially differentiable (zero pathwise gradient, see module docstring).
    - `r_h`: 3D half-mass radius in pc (> 0) of the cluster returned, about its
      centre of mass, at every `segregation`.
    - `alpha`, `imf`, `units`: as for `progenax.plummer_builder`.
    - `Q`: virial ratio T/|W| (>= 0, 0 a cold start; not None: the fractal's
      velocities have no scale of their own).
    - `segregation`: mass segregation S in [0, 1)
      (`progenax.structure.segregation.apply_segregation`); 0 (concrete or
      traced) leaves the cluster unsegregated. The energies that rank the
      orbits use velocities scaled to `RANKING_Q` = 0.5 (not Q, so the ranking
      does not move with Q) with equal masses and the spherical W estimate
      (ranking only).
      `segregation_temperature`: width of the relaxed ranking, in (0, 8].
    - `binaries`: as for `progenax.plummer_builder` (`n` then counts systems).
    - `profile` (static): "plummer" (default, the radial remap above) or "box":
      the pure box fractal (McLuster's `-P -1`), its radii only scaled so that
      the 3D half-mass radius about the centre of mass is `r_h` (a uniform
      sphere for D = 3).
    - `mesh`: None (one device) or a one-axis `jax.sharding.Mesh`
      (`progenax.sharding.particle_mesh()`): one tree grown over its D
      devices, each building and returning n / D of the stars, no device
      holding the whole set (`progenax.structure.fractal.box_fractal_share`,
      `progenax.builders.sharded`); W by the nested mesh over the devices at
      every n; not with `segregation` or `binaries`; n a multiple of D.

    **Returns:** `InitialConditions` whose `model` is a `RecordedModel` named "fractal"; differentiable in
    r_h, alpha and Q (continuous in them: the remap's order and the
    segregation ranking depend on neither); partially in S (relaxed ranking,
    `progenax.structure.segregation`; with S > 0, alpha moves the remapped
    radii and so the energy ranking, which can jump) and in D (zero pathwise gradient).

    ```python
    ic = fractal_builder(jax.random.PRNGKey(0), n=10_000, D=1.6, r_h=1.0)
    ```
    """
    if Q is None:
        raise ValueError("Q must be a number >= 0 for fractal_builder (not None)")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    c = check_common_arguments(n, units, imf, r_h, alpha, Q)
    check_scalar("D", D)
    D = c.checks.range("D", D, lower=D_MIN, upper=D_MAX, lower_inclusive=True, upper_inclusive=True)
    S, T = check_segregation_arguments(c.checks, segregation, segregation_temperature)
    if mesh is not None:
        refuse_unsharded(segregation=S, binaries=binaries)
        with errors_as_nan():  # an error raised by one device's program would stall the others
            return c.checks.attach(
                _fractal_sharded(as_key(key), c.n, D, c.r_h, c.alpha, c.Q, c.imf, c.units, profile, mesh)
            )
    out = _fractal(as_key(key), c.n, D, c.r_h, c.alpha, c.Q, c.imf, c.units, S, T, check_binaries(binaries), profile)
    ic, w = c.checks.attach(out)
    return recorded(drop_absent_companions(ic), w)
