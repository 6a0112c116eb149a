r"""Builders for lowered-isothermal clusters: King (1966) and the LIMEPY family.

A single-mass cluster is the `progenax.models.LoweredIsothermal` model drawn by
the spherical builder (`progenax.builders.spherical`): radii invert the solved
$M(r)$, so no star lies beyond $r_t$; speeds come from the model's own DF at
each star's potential, so every star is bound and the cluster is in virial
equilibrium without rescaling; the length unit $L = r_h/\hat r_h$ and the
velocity scale $s$ put it in physical units (see the model's docstring, and it
for the anisotropic `ra` models).

A **multi-mass** cluster (`mass_bins=K`) solves the self-consistent multi-mass
model (`solve_multimass_king_profile`) and draws each star from its bin's
component. Positions stay about the model centre (the origin), so the bound
$|x| \le r_t$ holds exactly. Everything is differentiable in `W0`, `g`, `ra`,
`r_h`, `alpha` and `Q` (reverse mode through the profile solve and the
implicit root finders).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._fusion import materialize
from .._types import ArrayLike, Key
from ..binaries import BinaryPopulation
from ..imf import PowerLawIMF
from ..kinematics.king_df import sample_speed_fraction, speed_table, static_or_array
from ..models import King, LoweredIsothermal, RecordedModel
from ..profiles.king import king_velocity_scale_squared, multimass_sample_radii, solve_multimass_king_profile
from ..sampling import isotropic_directions, uniform_open
from ..state import InitialConditions
from ..structure.rotation import check_rotation_arguments, rotate
from ..structure.segregation import check_segregation_arguments
from ..units import G_PHYSICAL
from ..validation import check_scalar, deferred_checks
from ._binaries import check_binaries, draw_companions, drop_absent_companions, velocities_for_systems
from ._common import as_key, check_common_arguments, finish_cluster, imf_params, resolve_imf
from .spherical import build_model_cluster


@deferred_checks
def _lowered_isothermal_multimass(
    key,
    n,
    W0,
    g,
    delta,
    r_h,
    alpha,
    Q,
    imf,
    units,
    model,
    mass_bins,
    profile_points=1024,
    speed_table_size=128,
    binaries=None,
    rotation=None,
    rotation_scale=None,
):
    k_m, k_r, k_rdir, k_v, k_vdir = jax.random.split(key, 5)
    dtype = r_h.dtype
    W0, g, delta = W0.astype(dtype), static_or_array(g, dtype), delta.astype(dtype)
    dist = resolve_imf(imf, alpha)
    # The same draws as `sample_masses` (PowerLawIMF.sample = icdf(uniform)); the
    # bin of a star is fixed by its uniform variate (equal expected numbers per
    # bin), so bin membership never changes with alpha and stays differentiable.
    # (a power law draws its uniforms in its slopes' dtype; any other IMF in r_h's)
    u_m = jax.random.uniform(k_m, (n,), getattr(dist, "slopes", r_h).dtype)
    masses = materialize(dist.icdf(u_m).astype(dtype))
    component = jnp.clip(jnp.floor(u_m * mass_bins), 0, mass_bins - 1).astype(jnp.int32)
    M_j = jax.ops.segment_sum(masses, component, mass_bins)
    N_j = jax.ops.segment_sum(jnp.ones_like(masses), component, mass_bins)
    # An empty bin (only possible for n ~ mass_bins) gets its IMF mid-quantile mass and no stars.
    m_mid = dist.icdf((jnp.arange(mass_bins, dtype=dtype) + 0.5) / mass_bins).astype(dtype)
    m_j = jnp.where(N_j > 0, M_j / jnp.maximum(N_j, 1.0), m_mid)
    profile = solve_multimass_king_profile(W0, m_j, M_j, g, delta, num_points=profile_points)
    r_model, W = multimass_sample_radii(profile, component, uniform_open(k_r, (n,), dtype))
    b = profile.b_j
    tables = jax.vmap(lambda w0: speed_table(w0, g, num_W=speed_table_size, num_q=speed_table_size))(b * W0)
    q = sample_speed_fraction(tables, b[component] * W, uniform_open(k_v, (n,), dtype), component=component)
    length = r_h / profile.r_h
    s = jnp.sqrt(king_velocity_scale_squared(G_PHYSICAL, jnp.sum(masses), length, profile.total_mass))
    pos = W > 0  # v = q sqrt(2 b_j W) s_j and s_j = s / sqrt(b_j): v_esc is common
    v_escape = jnp.where(pos, jnp.sqrt(2.0 * jnp.where(pos, W, 1.0)), 0.0)
    radii = materialize(r_model * length)
    speeds = materialize(q * v_escape * s)
    positions = radii[:, None] * isotropic_directions(k_rdir, n, dtype)
    velocities = speeds[:, None] * isotropic_directions(k_vdir, n, dtype)
    params = {
        "W0": W0,
        "r_h": r_h,
        "r_t": profile.r_t * length,
        "delta": delta,
        "component_masses": m_j,
        "component_r_h": profile.r_h_j * length,
        **imf_params(imf, alpha),
    }
    if "g" in {p.name for p in model.PARAMETERS}:  # King records no g
        params["g"] = g
    if Q is not None:
        params["Q"] = Q
    velocities = rotate(key, positions, velocities, params, rotation, rotation_scale)
    described = RecordedModel(model.NAME, dict(params), jnp.sum(masses))
    companions = draw_companions(key, masses, binaries, dist)
    velocities = velocities_for_systems(velocities, masses, companions, Q)
    cluster, _ = finish_cluster(  # no mesh W: the spherical estimate scales Q
        described,
        positions,
        velocities,
        masses,
        params,
        Q,
        units,
        centre_positions=False,
        companions=companions,
        binaries=binaries,
    )
    return cluster


def _build(
    key,
    n,
    W0,
    g,
    r_h,
    alpha,
    Q,
    imf,
    units,
    model,
    mass_bins,
    delta,
    segregation,
    temperature,
    ra=None,
    profile_points=1024,
    speed_table_size=128,
    binaries=None,
    rotation=None,
    rotation_scale=0.0,
    mesh=None,
):
    c = check_common_arguments(n, units, imf, r_h, alpha, Q)
    binaries = check_binaries(binaries)
    if mass_bins is None:
        grids = dict(r_h=c.r_h, profile_points=profile_points, speed_table_size=speed_table_size)
        declared = {p.name for p in model.PARAMETERS}
        shape = {k: v for k, v in dict(W0=W0, g=g, ra=ra).items() if k in declared}
        parameters = {**shape, **grids}
        return build_model_cluster(
            key, model, c, parameters, segregation, temperature, binaries, rotation, rotation_scale, mesh
        )
    if mesh is not None:
        raise ValueError("the multi-mass King/LIMEPY model (mass_bins) is not built sharded: build without mesh")
    S, _ = check_segregation_arguments(c.checks, segregation, temperature)
    if S is not None:
        raise ValueError(
            "segregation and mass_bins both segregate the cluster: use mass_bins for the "
            "self-consistent multi-mass model or segregation for the single-mass one, not both"
        )
    if ra is not None:
        raise NotImplementedError(
            "anisotropic (ra) multi-mass models are not implemented: use ra=None with mass_bins, "
            "or mass_bins=None with ra"
        )
    values = LoweredIsothermal.checked(
        c.checks, W0=W0, g=g, r_h=c.r_h, profile_points=profile_points, speed_table_size=speed_table_size
    )
    if isinstance(mass_bins, bool) or not isinstance(mass_bins, (int, np.integer)) or not 1 <= mass_bins <= 64:
        raise ValueError(f"mass_bins must be None or an int in [1, 64] (static), got {mass_bins!r}")
    if c.imf == "equal":
        raise ValueError("mass_bins needs an IMF with a spread of masses, not imf='equal'")
    check_scalar("delta", delta)
    delta = c.checks.range("delta", delta, lower=0.0, upper=2.0, lower_inclusive=True, upper_inclusive=True)
    k, L0 = check_rotation_arguments(c.checks, rotation, rotation_scale)
    out = _lowered_isothermal_multimass(
        as_key(key),
        c.n,
        values["W0"],
        model.held_g(values["g"], c.r_h.dtype),  # King's static 1: closed-form P(a, x)
        delta,
        c.r_h,
        c.alpha,
        c.Q,
        c.imf,
        c.units,
        model,
        int(mass_bins),
        values["profile_points"],
        values["speed_table_size"],
        binaries,
        k,
        L0,
    )
    return drop_absent_companions(c.checks.attach(out))


def king_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    W0: ArrayLike = 6.0,
    r_h: ArrayLike = 1.0,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike | None = None,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    mass_bins: int | None = None,
    delta: ArrayLike = 0.5,
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
    profile_points: int = 1024,
    speed_table_size: int = 128,
    binaries: BinaryPopulation | None = None,
    rotation: ArrayLike | None = None,
    rotation_scale: ArrayLike = 0.0,
    mesh: Mesh | None = None,
) -> InitialConditions:
    r"""A King (1966) cluster sampled from its distribution function.

    The isotropic DF $f \propto e^{\varepsilon} - 1$ ($\varepsilon$ the binding
    energy below the tidal boundary in units of $s^2$), with central potential
    $W_0$; see the module docstring for how stars are drawn.

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed); `n`: number of stars (static).
    - `W0`: dimensionless central potential, $10^{-3} \le W_0 \le 20$
      (concentration $c = \log_{10}(r_t/r_0)$ = 0.67, 1.26, 2.12 at 3, 6, 9).
    - `r_h`: 3D half-mass radius in pc (> 0).
    - `alpha`, `imf`, `units`: as for `plummer_builder`.
    - `Q`: None (default) keeps the equilibrium velocities of the DF
      ($T/|W| = 1/2$ up to sampling noise); a number rescales them to that
      virial ratio.
    - `mass_bins`: None (single-mass model: every star follows the same DF), or
      K (static, 1-64): a **multi-mass, mass-segregated** model. The sampled IMF
      is split into K bins of equal expected numbers (by the quantile of each
      star's mass); bin j has mean mass $m_j$ and total mass $M_j$, and velocity
      scale $s_j \propto (m_j/\bar m)^{-\delta}$; the model is solved
      self-consistently (`solve_multimass_king_profile`) and each star is drawn
      from its bin's component. `params` then also hold `component_masses` and
      `component_r_h` (pc).
    - `delta`: mass-dependence of the velocity scales, in [0, 2] (0.5 default);
      only used with `mass_bins`. The heaviest bin (the IMF's massive tail)
      dominates the centre, so the light bins reach far out in King radii of
      the total central density: a Kroupa IMF at W0 = 6, delta = 0.5, n = 1e5
      has r_t ~ 5e5 r_0 in 8 bins and ~ 5e6 r_0 in 10 (6 of 6 keys). The solver
      grid ends at 1e10 r_0 (`profiles.king.MULTIMASS_R_MAX`); a model beyond it
      (many bins with a large delta, e.g. 10 bins at delta = 2 or 64 at 0.5)
      raises naming W0, delta and mass_bins.
    - `segregation`, `segregation_temperature`: primordial mass segregation of
      the single-mass model, as for `plummer_builder` (not with `mass_bins`,
      which segregates self-consistently).
    - `profile_points` (static int >= 64, default 1024): nodes of the profile
      solve (`solve_king_profile`'s `num_points`); `speed_table_size` (static
      int >= 8, default 128): rows and columns of the speed table
      (`speed_table`'s `num_W` and `num_q`). They trade accuracy for cost, which
      matters when the builder sits inside a likelihood: at a fixed key
      (n = 1,000, float64, W0 = 3, 6, 9) 256 / 64 moves every star's radius by
      at most 3.2e-4 and its speed by 7.4e-4 (relative) from 1024 / 128, and
      cuts a reverse-mode gradient of the mock likelihood (1,000 model stars)
      from 67 ms to 16 ms on one core; 256 / 32: the same star-by-star
      differences, 13 ms; 128 / 32: 1.7e-3 and 7.3e-3, 10 ms.
    - `binaries`: as for `plummer_builder` (`n` then counts systems; with
      `mass_bins` the systems' primaries fill the mass bins).
    - `rotation`, `rotation_scale`: rotation in equilibrium, as for
      `plummer_builder` (with `mass_bins` too).
    - `mesh`: build sharded over a device mesh, as for `plummer_builder` (not
      with `mass_bins`).

    **Returns:** `InitialConditions` whose `model` is a `progenax.models.King`
    (a `RecordedModel` named "king" with `mass_bins`), and params W0, r_h, r_t
    (tidal radius in pc) and the IMF's; differentiable in W0, r_h, alpha and Q.

    ```python
    ic = progenax.king_builder(jax.random.PRNGKey(0), n=10_000, W0=6.0, r_h=1.0)
    ```
    """
    return _build(
        key,
        n,
        W0,
        1.0,
        r_h,
        alpha,
        Q,
        imf,
        units,
        King,
        mass_bins,
        delta,
        segregation,
        segregation_temperature,
        profile_points=profile_points,
        speed_table_size=speed_table_size,
        binaries=binaries,
        rotation=rotation,
        rotation_scale=rotation_scale,
        mesh=mesh,
    )


def limepy_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    W0: ArrayLike = 6.0,
    g: ArrayLike = 1.0,
    ra: ArrayLike | None = None,
    r_h: ArrayLike = 1.0,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike | None = None,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    mass_bins: int | None = None,
    delta: ArrayLike = 0.5,
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
    profile_points: int = 1024,
    speed_table_size: int = 128,
    binaries: BinaryPopulation | None = None,
    rotation: ArrayLike | None = None,
    rotation_scale: ArrayLike = 0.0,
    mesh: Mesh | None = None,
) -> InitialConditions:
    r"""A lowered-isothermal (LIMEPY, Gieles & Zocchi 2015) cluster.

    The isotropic DF $f \propto E_\gamma(g, \varepsilon) = e^\varepsilon
    P(g, \varepsilon)$: $g = 0$ Woolley, $g = 1$ King, $g = 2$ Wilson, any real
    $0 \le g < 3.5$ (larger $g$: more extended, softer truncation).

    **Arguments:**

    - `W0`: central potential, $10^{-3} \le W_0 \le 20$; with large `g` the tidal
      radius grows fast and the solver grid (r_max = 1e5 King radii) limits W0
      (e.g. g = 3 allows W0 up to about 3.5): beyond it the call raises.
    - `g`: truncation index in [0, 3.5).
    - `ra`: None (isotropic) or the anisotropy radius $r_a > 0$ in King radii
      $r_0$ (the model's own unit; $r_a$ in pc is `ra * r_h / r_h_model`):
      the Michie-type DF $f \propto e^{-J^2/(2 r_a^2 s^2)} E_\gamma(g, \varepsilon)$,
      isotropic in the centre, radially anisotropic beyond $\sim r_a$
      ($\beta(r)$ in `solve_king_profile(W0, g, ra).beta`). Small `ra` makes the
      model much more extended (W0 = 6, g = 1 needs ra > 2.791 for r_t < 1e5 r_0,
      the end of the solver grid: r_t = 9.7e4 r_0 there, 185 r_0 at ra = 3).
      Not available with `mass_bins` (raises `NotImplementedError`).
    - the rest (`mass_bins`, `delta`, `profile_points`, `speed_table_size`,
      `rotation`, `rotation_scale` included) as for `king_builder`.

    **Returns:** `InitialConditions` whose `model` is a
    `progenax.models.LoweredIsothermal`, named "limepy" (params also hold `ra`
    when given); differentiable in W0, g, ra, r_h, alpha and Q.
    """
    return _build(
        key,
        n,
        W0,
        g,
        r_h,
        alpha,
        Q,
        imf,
        units,
        LoweredIsothermal,
        mass_bins,
        delta,
        segregation,
        segregation_temperature,
        ra,
        profile_points=profile_points,
        speed_table_size=speed_table_size,
        binaries=binaries,
        rotation=rotation,
        rotation_scale=rotation_scale,
        mesh=mesh,
    )
