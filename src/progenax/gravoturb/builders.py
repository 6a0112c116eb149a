r"""Gravoturbulent builders: SPH gas of a turbulent cloud, and stars where it is dense.

*Experimental.* Both builders draw the same field from the same key (the
log-density from `fold_in(key, 0)`, the velocities from `fold_in(key, 1)`), so
`star_builder(key, ...)` places its stars in the dense gas of
`cloud_builder(key, ...)` when the shared arguments agree.

**The field** (`progenax.gravoturb.field`, `.pdf`, `.velocity`): a periodic cube
of side $L = 2 r_\text{cloud}$ and `grid`$^3$ cells, centred on the origin. The
log-density $s = \ln(\rho/\rho_0)$ is a Gaussian random field ($P(k) \propto
k^{-\beta}$) rank-mapped onto the lognormal + power-law PDF of Burkhart (2018)
and Burkhart & Mocz (2019) with $\sigma_s^2 = \ln(1 + b^2\mathcal M^2)$ and tail
slope $\alpha_s$ (`pdf_slope`); $\rho_0$ is the volume-weighted mean density
($\langle e^s\rangle = 1$, which needs $\alpha_s > 1$). The velocity field is Gaussian with
$P(k) \propto k^{-\beta_v}$, a solenoidal/compressive mix set by $b$, and grid
rms $\mathcal M c_s$. With `geometry="sphere"` the cloud is the ball of radius
$r_\text{cloud}$ (cells whose centre lies inside it); with "box" the whole cube.

**Differentiability.** The cell values $s_c$ and the velocity grid are smooth
in $\mathcal M$, $\alpha_s$, $b$ (and $\kappa$ for the stars' weights); so are
grid observables (`dense_gas_fraction`). Particle positions come from
`progenax.gravoturb.placement`, the Knothe-Rosenblatt map of a $C^2$
(smoothstep) interpolation of the cell weights between cell centres: smooth
in the weights wherever the density is positive, so any smooth all-particle
observable (such as $\sum m|x|^2$) is too. $\beta$ enters only through the ranks of the
Gaussian field: zero gradient.

**Keywords.** As in every other builder, `alpha` is the IMF's high-mass slope
and `n` the particle count; the PDF's tail slope is `pdf_slope`. The 0.1.0
names (`alpha` for the PDF slope and `imf_alpha` in `star_builder`, `n_gas`
in `cloud_builder`) work for one release with a `FutureWarning`.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from .._compile import mesh_compiles_fast, mesh_core_compiles_fast
from .._deprecation import renamed_keyword
from .._types import ArrayLike, Key
from ..binaries import BinaryPopulation
from ..builders._binaries import check_binaries, draw_companions, drop_absent_companions
from ..builders._common import as_key, check_imf, finish_cluster, recorded, resolve_imf, sample_masses
from ..builders.sharded import finish_share, map_shares, refuse_unsharded, sharded_cluster
from ..imf import PowerLawIMF
from ..models import RecordedModel
from ..state import InitialConditions, ParticleState
from ..units import check_units_name, physical_units
from ..validation import ParameterChecks, check_count, deferred_checks, error_if, errors_as_nan
from .cloud import GEOMETRIES, GasCloud, TurbulentField
from .field import check_grid, gaussian_random_field, mid_rank_uniforms
from .pdf import PiecewiseLogDensityPDF
from .placement import smooth_positions
from .velocity import velocity_field

THRESHOLD_MODES = ("sigmoid", "hard")
DENSITY_STREAM, VELOCITY_STREAM, GAS_STREAM, STAR_STREAM, MASS_STREAM, DISPERSION_STREAM = range(6)
# Defaults as named objects: `is` on them tells an explicit argument from the default.
PDF_SLOPE = 2.0
IMF_ALPHA = 2.3
GAS_COUNT = 100_000
DENSITY_FLOOR = 1e-3  # of the cloud's mean density, for the gas smoothing lengths


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def _check_field_arguments(
    checks: ParameterChecks, grid, geometry, mach, pdf_slope, b, beta, velocity_beta, r_cloud, sound_speed
):
    """Validate the arguments that define the field (shared by both builders)."""
    return dict(
        grid=check_grid(grid),
        geometry=_check_choice("geometry", geometry, GEOMETRIES),
        mach=checks.range("mach", mach, lower=0.0),
        pdf_slope=checks.range("pdf_slope", pdf_slope, lower=1.0),
        b=checks.range("b", b, lower=0.0, upper=1.0, upper_inclusive=True),
        beta=checks.range("beta", beta, lower=0.0, lower_inclusive=True),
        velocity_beta=checks.range("velocity_beta", velocity_beta, lower=0.0, lower_inclusive=True),
        r_cloud=checks.range("r_cloud", r_cloud, lower=0.0),
        sound_speed=checks.range("sound_speed", sound_speed, lower=0.0),
    )


def turbulent_field(
    key: Key | int,
    *,
    grid: int = 64,
    mach: ArrayLike = 5.0,
    pdf_slope: ArrayLike = PDF_SLOPE,
    b: ArrayLike = 0.4,
    beta: ArrayLike = 11.0 / 3.0,
    velocity_beta: ArrayLike = 4.0,
    r_cloud: ArrayLike = 1.0,
    sound_speed: ArrayLike = 0.2,
    geometry: str = "sphere",
    alpha: ArrayLike | None = None,
) -> tuple[TurbulentField, PiecewiseLogDensityPDF]:
    """The grid both builders draw from: `(TurbulentField, PiecewiseLogDensityPDF)`.

    Arguments as for `cloud_builder` (same key, same field; `alpha` is the
    deprecated name of `pdf_slope`). Validated like the builders; traceable and
    differentiable in the float arguments.
    """
    pdf_slope = renamed_keyword("turbulent_field", "alpha", alpha, "pdf_slope", pdf_slope, unset=PDF_SLOPE)
    checks = ParameterChecks()
    f = _check_field_arguments(checks, grid, geometry, mach, pdf_slope, b, beta, velocity_beta, r_cloud, sound_speed)
    return checks.attach(_turbulent_field(as_key(key), **f))


def _turbulent_field(key, *, grid, geometry, mach, pdf_slope, b, beta, velocity_beta, r_cloud, sound_speed):
    """`turbulent_field` for validated arguments."""
    dtype = jnp.result_type(mach, pdf_slope, b)
    pdf = PiecewiseLogDensityPDF.from_turbulence(mach, pdf_slope, b)
    z = gaussian_random_field(jax.random.fold_in(key, DENSITY_STREAM), grid, beta, dtype)
    u, u_complement = mid_rank_uniforms(z)
    log_density = pdf.quantile(u, u_complement)
    velocity = velocity_field(jax.random.fold_in(key, VELOCITY_STREAM), grid, mach, sound_speed, b, velocity_beta)
    field = TurbulentField(log_density, velocity, pdf.s_t, 2.0 * r_cloud, geometry)
    return field, pdf


def _field_params(f: dict) -> dict:
    return {k: f[k] for k in ("mach", "pdf_slope", "b", "beta", "velocity_beta", "r_cloud", "sound_speed")}


# -- gas -------------------------------------------------------------------------
def _gas_rows(key, gas_key, rows, first, n, m_cloud, gamma, eta, f, total=lambda value: value):
    """Gas particles `first` to `first + rows - 1` of n (the field from `key`,
    the placement from `gas_key`; `total` completes a sum over all n):
    positions, velocities, masses, internal energies, smoothing lengths, the
    params and the field."""
    field, pdf = _turbulent_field(key, **f)
    dtype = field.log_density.dtype
    weights = field.cell_mass_weights()
    place_key = jax.random.fold_in(gas_key, GAS_STREAM)
    positions, weight_density = smooth_positions(place_key, weights, rows, field.box_size, first, n)
    masses = jnp.full((rows,), m_cloud / n, dtype)
    velocities = field.sample_velocity(positions)
    velocities = velocities - total(jnp.sum(velocities, axis=0)) / n
    # Density in Msun / pc^3 at each particle: the sampled (interpolated) density,
    # the cloud mass shared in proportion to e^s; floored at DENSITY_FLOOR of the
    # cloud's mean so that h stays finite where the interpolation falls to 0.
    mean_weight = jnp.sum(weights) / jnp.sum(field.inside())
    weight_density = jnp.maximum(weight_density, DENSITY_FLOOR * mean_weight)
    density = m_cloud * weight_density / (jnp.sum(weights) * field.cell_size**3)
    smoothing_length = eta * jnp.cbrt(masses / density)
    internal_energy = jnp.full((rows,), f["sound_speed"] ** 2 / (gamma - 1.0), dtype)
    params = {**_field_params(f), "m_cloud": m_cloud, "gamma": gamma, "eta": eta, "sigma_s": pdf.sigma, "s_t": pdf.s_t}
    return positions, velocities, masses, internal_energy, smoothing_length, params, field


def _gas_cloud(positions, velocities, masses, internal_energy, smoothing_length, params, field) -> GasCloud:
    state = ParticleState(positions, velocities, masses)
    model = RecordedModel("gravoturb_gas", dict(params))
    return GasCloud(
        state, jnp.ones_like(masses), internal_energy, smoothing_length, model, params, physical_units(), field
    )


@deferred_checks
def _cloud(key, n, m_cloud, gamma, eta, f):
    return _gas_cloud(*_gas_rows(key, key, n, 0, n, m_cloud, gamma, eta, f))


@deferred_checks
def _cloud_sharded(key, n, m_cloud, gamma, eta, f, mesh):
    """`_cloud` with each device of `mesh` placing n / D particles (`progenax.builders.sharded`)."""

    def draw(share, key, m_cloud, gamma, eta, f):
        k = share.key(key)
        rows = _gas_rows(key, k, share.rows, share.first, n, m_cloud, gamma, eta, f, share.total)
        return rows[:5], rows[5:]

    (x, v, m, u, h), (params, field) = map_shares(draw, (key, m_cloud, gamma, eta, f), n, mesh)
    return _gas_cloud(x, v, m, u, h, params, field)


def cloud_builder(
    key: Key | int,
    *,
    n: int = GAS_COUNT,
    mach: ArrayLike = 5.0,
    pdf_slope: ArrayLike = PDF_SLOPE,
    b: ArrayLike = 0.4,
    grid: int = 64,
    r_cloud: ArrayLike = 1.0,
    m_cloud: ArrayLike = 1000.0,
    sound_speed: ArrayLike = 0.2,
    beta: ArrayLike = 11.0 / 3.0,
    velocity_beta: ArrayLike = 4.0,
    gamma: ArrayLike = 5.0 / 3.0,
    eta: ArrayLike = 1.2,
    geometry: str = "sphere",
    n_gas: int | None = None,
    alpha: ArrayLike | None = None,
    mesh: Mesh | None = None,
) -> GasCloud:
    r"""SPH gas particles of a turbulent cloud (experimental; see the module docstring).

    Positions are drawn from the smooth interpolation $\tilde w(x)$ between
    cell centres of the cell gas mass $w_c = e^{s_c}$ inside the cloud
    (`progenax.gravoturb.placement`: Knothe-Rosenblatt map, stratified in x).
    All particles have the mass $m_\text{cloud}/n$. Velocities: the velocity
    field interpolated trilinearly at each particle, minus the particles' mean
    (zero net momentum). Density at a particle: the sampled density
    $\rho = m_\text{cloud} \tilde w(x) / (\Delta^3 \sum_{c} w_c)$, floored at
    `DENSITY_FLOOR` (1e-3) of the cloud's mean density where the interpolation
    falls to 0 at the cloud's edge;
    smoothing length $h = \eta\,(m/\rho)^{1/3}$ (the default $\eta = 1.2$ gives
    about 58 neighbours with the cubic spline); specific internal energy
    $u = c_s^2/(\gamma - 1)$ for the isothermal sound speed $c_s$ ($P = \rho c_s^2 = (\gamma - 1)\rho u$).

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed); `n`: number of particles (static).
    - `mach`: sonic Mach number $\mathcal M$ (> 0): the velocity grid's rms is $\mathcal M c_s$.
    - `pdf_slope`: slope $\alpha_s$ of the PDF's power-law tail, $p(s) \propto e^{-\alpha_s s}$ (> 1).
    - `b`: turbulence forcing parameter in (0, 1] (1/3 solenoidal, 1 compressive).
    - `grid`: cells per side, a power of two >= 8 (static).
    - `r_cloud`: cloud radius in pc (> 0); the periodic box has side $2 r_\text{cloud}$.
    - `m_cloud`: gas mass in Msun (> 0) inside the cloud.
    - `sound_speed`: isothermal sound speed $c_s$ in km/s (> 0; 0.2 km/s is ~10 K molecular gas).
    - `beta`: power-spectrum slope of the Gaussian field behind $s$ (>= 0; zero gradient).
    - `velocity_beta`: power-spectrum slope of the velocities (>= 0; 4 is Burgers).
    - `gamma`: adiabatic index (> 1) used to express $c_s$ as an internal energy.
    - `eta`: smoothing-length factor (> 0).
    - `geometry`: "sphere" (ball of radius `r_cloud`) or "box" (the whole cube).
    - `n_gas`, `alpha`: the deprecated 0.1.0 names of `n` and `pdf_slope`.
    - `mesh`: None, or a one-axis `jax.sharding.Mesh`: each device places n / D
      particles from the same field (computed on every device) and they come
      back laid out over the mesh (`progenax.builders.sharded`; n a multiple
      of D).

    **Returns:** a `GasCloud`, its `field` the grid it came from. Differentiable
    (through the grid and the continuous placement) in mach, pdf_slope, b,
    velocity_beta, r_cloud, m_cloud, sound_speed, gamma and eta.

    ```python
    cloud = progenax.gravoturb.cloud_builder(jax.random.PRNGKey(0), n=50_000, mach=5.0, pdf_slope=2.0)
    ```
    """
    n = renamed_keyword("cloud_builder", "n_gas", n_gas, "n", n, unset=GAS_COUNT)
    pdf_slope = renamed_keyword("cloud_builder", "alpha", alpha, "pdf_slope", pdf_slope, unset=PDF_SLOPE)
    checks = ParameterChecks()
    n = check_count("n", n)
    f = _check_field_arguments(checks, grid, geometry, mach, pdf_slope, b, beta, velocity_beta, r_cloud, sound_speed)
    m_cloud = checks.range("m_cloud", m_cloud, lower=0.0)
    gamma = checks.range("gamma", gamma, lower=1.0)
    eta = checks.range("eta", eta, lower=0.0)
    if mesh is None:
        return checks.attach(_cloud(as_key(key), n, m_cloud, gamma, eta, f))
    with errors_as_nan():  # an error raised by one device's program would stall the others
        return checks.attach(_cloud_sharded(as_key(key), n, m_cloud, gamma, eta, f, mesh))


# -- stars -----------------------------------------------------------------------
NO_DENSE_CELL_MESSAGE = (
    "star_builder: no cell of the cloud carries star-formation weight (none above the transition s_t "
    "in hard mode, or all far below it for this kappa); use a larger grid, a smaller pdf_slope or Mach "
    "number, a smaller kappa, or threshold_mode='sigmoid'"
)


def star_formation_weights(field: TurbulentField, kappa, hard: bool):
    r"""Per-cell weight of star formation: gas mass $e^{s_c}$ times $\sigma(\kappa(s_c - s_t))$ (or the step)."""
    excess = field.log_density - field.threshold
    gate = (excess > 0).astype(excess.dtype) if hard else jax.nn.sigmoid(kappa * excess)
    return field.cell_mass_weights() * gate


def _star_rows(key, star_key, rows, first, n, kappa, dispersion, alpha, Q, imf, hard, f):
    """Stars `first` to `first + rows - 1` of n: the field from `key` (every
    device's the same), the stars' own draws from `star_key`; and the params."""
    field, _ = _turbulent_field(key, **f)
    dtype = field.log_density.dtype
    weights = star_formation_weights(field, kappa, hard)
    weights = error_if(weights, jnp.sum(weights) <= 0, NO_DENSE_CELL_MESSAGE)
    positions, _ = smooth_positions(jax.random.fold_in(star_key, STAR_STREAM), weights, rows, field.box_size, first, n)
    masses = sample_masses(jax.random.fold_in(star_key, MASS_STREAM), rows, imf, alpha)
    noise = jax.random.normal(jax.random.fold_in(star_key, DISPERSION_STREAM), (rows, 3), dtype)
    velocities = field.sample_velocity(positions) + dispersion * noise
    params = {**_field_params(f), "kappa": kappa, "dispersion": dispersion, "alpha": alpha}
    params["s_t"] = field.threshold
    if Q is not None:
        params["Q"] = Q
    return positions, velocities, masses, params


def _stars_compile_fast(key, n, kappa, dispersion, alpha, Q, imf, units, *args, **kwargs) -> bool:
    """Whether `_stars`' program takes the run-once options: not when it sums
    the nested-mesh W of many stars, to scale to Q or for the Henon length
    unit (`progenax._compile`)."""
    return (Q is None and units != "henon") or mesh_compiles_fast(n)


@deferred_checks(fast_compile=_stars_compile_fast)
def _stars(key, n, kappa, dispersion, alpha, Q, imf, units, hard, f, binaries=None):
    positions, velocities, masses, params = _star_rows(key, key, n, 0, n, kappa, dispersion, alpha, Q, imf, hard, f)
    # Positions stay in the cloud's frame (origin = cloud centre), so the stars
    # sit on the gas of cloud_builder with the same key.
    model = RecordedModel("gravoturb", dict(params), jnp.sum(masses))
    companions = draw_companions(key, masses, binaries, resolve_imf(imf, alpha))
    return finish_cluster(
        model,
        positions,
        velocities,
        masses,
        params,
        Q,
        units,
        centre_positions=False,
        # Clumpy stars: above 20,000 the shell estimate of W about the cloud
        # centre is far off (exact Q 0.10 for a requested 0.5 at n = 24,000).
        large_n_energy="mesh",
        companions=companions,
        binaries=binaries,
    )


@deferred_checks(fast_compile=mesh_core_compiles_fast)  # the ring's W, whatever Q
def _stars_sharded(key, n, kappa, dispersion, alpha, Q, imf, units, hard, f, mesh):
    """`_stars` with each device of `mesh` drawing n / D stars (`progenax.builders.sharded`)."""

    def draw(share, key, kappa, dispersion, alpha, Q, f):
        k = share.key(key)
        x, v, m, params = _star_rows(key, k, share.rows, share.first, n, kappa, dispersion, alpha, Q, imf, hard, f)
        x, v, w = finish_share(share, x, v, m, Q, centre_positions=False, energy="mesh")
        return (x, v, m), (params, w)

    (x, v, m), (params, w) = map_shares(draw, (key, kappa, dispersion, alpha, Q, f), n, mesh)
    model = RecordedModel("gravoturb", dict(params), jnp.sum(m))
    return sharded_cluster(x, v, m, model, params, units, w)


def star_builder(
    key: Key | int,
    *,
    n: int = 1_000,
    mach: ArrayLike = 5.0,
    pdf_slope: ArrayLike = PDF_SLOPE,
    kappa: ArrayLike = 10.0,
    b: ArrayLike = 0.4,
    grid: int = 64,
    r_cloud: ArrayLike = 1.0,
    sound_speed: ArrayLike = 0.2,
    dispersion: ArrayLike = 0.2,
    beta: ArrayLike = 11.0 / 3.0,
    velocity_beta: ArrayLike = 4.0,
    Q: ArrayLike | None = None,
    imf: str | PowerLawIMF | None = None,
    alpha: ArrayLike = IMF_ALPHA,
    threshold_mode: str = "sigmoid",
    geometry: str = "sphere",
    units: str = "physical",
    imf_alpha: ArrayLike | None = None,
    binaries: BinaryPopulation | None = None,
    mesh: Mesh | None = None,
) -> InitialConditions:
    r"""n stars born in the dense gas of a turbulent cloud (experimental).

    Stars are placed with cell weights $e^{s_c}\,\sigma(\kappa(s_c - s_t))$: the gas
    mass of a cell times a logistic step of width $1/\kappa$ at the PDF's
    transition $s_t$ (Burkhart & Mocz 2019: $\kappa = 10$ gives a transition about
    0.1 wide in $s$, 10% in density); `threshold_mode="hard"` uses the step
    $[s_c > s_t]$ (forward only: no gradient in $\kappa$, and the threshold's
    gradient is zero). Positions follow `progenax.gravoturb.placement` (the
    smooth interpolation of these weights, so a star can sit up to one cell
    from a weighted cell centre) and stay in
    the cloud frame (the cloud centre is the origin; not moved to the centre of
    mass). Masses from the IMF; velocities: the gas velocity field at each star
    (trilinear) plus an isotropic Gaussian of 1D dispersion `dispersion`, moved to
    zero net momentum and scaled so that $T/|W| = Q$ when `Q` is given.

    **Arguments:**

    - `key`; `n`: number of stars, exactly (static).
    - `mach`, `pdf_slope`, `b`, `grid`, `r_cloud`, `sound_speed`, `beta`,
      `velocity_beta`, `geometry`: the field, as for `cloud_builder`.
    - `kappa`: sharpness of the threshold (> 0), width $1/\kappa$ in $s$.
    - `dispersion`: 1D velocity dispersion added to the gas velocity, km/s (>= 0).
    - `Q`: virial ratio of the stars (>= 0; 0 is a cold start) or None (keep the inherited velocities).
    - `imf`, `alpha`: as for `progenax.plummer_builder` (`alpha` is the Kroupa
      high-mass slope). In 0.1.0 `alpha` was the PDF's tail slope: for one
      release, passing `alpha` without `pdf_slope` warns, so that an old script
      is not silently given a different IMF.
    - `threshold_mode`: "sigmoid" (default) or "hard".
    - `units`: "physical" or "henon".
    - `imf_alpha`: the deprecated 0.1.0 name of `alpha`.
    - `binaries`: as for `progenax.plummer_builder` (`n` then counts systems).
    - `mesh`: None, or a one-axis `jax.sharding.Mesh`: each device draws n / D
      stars from the same field (computed on every device) and the stars come
      back laid out over the mesh (`progenax.builders.sharded`; W by the
      nested mesh over the devices; not with `binaries`; n a multiple of D).

    **Returns:** `InitialConditions` whose `model` is a `RecordedModel` named "gravoturb". Differentiable in
    mach, pdf_slope, b, kappa, dispersion, alpha and Q through the grid and the
    continuous placement (almost everywhere; forward only in hard mode).

    ```python
    stars = progenax.gravoturb.star_builder(jax.random.PRNGKey(0), n=1000, mach=5.0, pdf_slope=2.0)
    ```
    """
    if alpha is not IMF_ALPHA and pdf_slope is PDF_SLOPE and imf_alpha is None:
        warnings.warn(
            "star_builder: alpha is the IMF's high-mass slope since 0.2.0 (in 0.1.0 it was the density "
            "PDF's tail slope, now pdf_slope=); pass pdf_slope= as well to silence this warning",
            FutureWarning,
            stacklevel=2,
        )
    alpha = renamed_keyword("star_builder", "imf_alpha", imf_alpha, "alpha", alpha, unset=IMF_ALPHA)
    checks = ParameterChecks()
    n = check_count("n", n)
    units = check_units_name(units)
    imf = check_imf(imf)
    hard = _check_choice("threshold_mode", threshold_mode, THRESHOLD_MODES) == "hard"
    f = _check_field_arguments(checks, grid, geometry, mach, pdf_slope, b, beta, velocity_beta, r_cloud, sound_speed)
    kappa = checks.range("kappa", kappa, lower=0.0)
    dispersion = checks.range("dispersion", dispersion, lower=0.0, lower_inclusive=True)
    alpha = checks.range("alpha", alpha, lower=0.0, upper=10.0)
    Q = None if Q is None else checks.range("Q", Q, lower=0.0, lower_inclusive=True)  # 0: a cold start
    binaries = check_binaries(binaries)
    if mesh is None:
        ic, w = checks.attach(_stars(as_key(key), n, kappa, dispersion, alpha, Q, imf, units, hard, f, binaries))
        return recorded(drop_absent_companions(ic), w)
    refuse_unsharded(binaries=binaries)
    with errors_as_nan():  # an error raised by one device's program would stall the others
        return checks.attach(_stars_sharded(as_key(key), n, kappa, dispersion, alpha, Q, imf, units, hard, f, mesh))
