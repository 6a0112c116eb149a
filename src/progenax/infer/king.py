r"""numpyro model of a King (1966) cluster: priors over (r_h, alpha, Q, W0) and the unbinned likelihood.

The model is the one `progenax.king_builder` samples: the $g = 1$ lowered
isothermal with central potential $W_0$, solved by
`progenax.profiles.king.solve_king_profile` (on `num_points` = 256 grid nodes
here: the half-mass radius, tidal radius and total mass agree with the
builder's 1,024-node solve to $10^{-7}$ relative, at a quarter of the cost), or
read from the table of such profiles over $W_0$ (`progenax.profiles.king_table`:
the same quantities to $2\times10^{-6}$ relative, with no ODE solved inside the
HMC trajectory, which makes a NUTS step about 15 times cheaper; `king_model` uses
it whenever the $W_0$ prior lies within [0.5, 20], as the default prior does). With
the length unit $L = r_h/\hat r_h$ (pc per King radius), the potential
$W_i = W(r_i/L)$ at each star and $\hat\rho(W) = e^W P(5/2, W)$:

**Positions** (pc$^{-3}$): $p(\mathbf x) = \frac{\hat\rho(W(r/L))/\hat\rho(W_0)}{\hat M_t L^3}$,
zero beyond the tidal radius $r_t = \hat r_t L$ ($\hat M_t$ is the model's mass in
units of $\rho_0 r_0^3$).

**Velocities** ((km/s)$^{-3}$): the DF $f \propto e^{\varepsilon} - 1$,
$\varepsilon = W_i - v^2/(2s^2)$, at the star's potential,
$$p(\mathbf v\mid W_i) = \frac{e^{\varepsilon} - 1}{(2\pi)^{3/2}e^{W_i}P(5/2, W_i)\,s^3},
\qquad \varepsilon > 0,$$
with the velocity scale $s^2 = 2Q\cdot\frac{4\pi G M}{9 L \hat M_t}$: the builder's
scale (which makes the model self-gravitating with mass $M$) times $2Q$, as for the
Plummer model, so $Q = 1/2$ is the equilibrium DF and any $Q$ keeps its shape.
Line-of-sight velocities use the marginal of `progenax.infer.los`, with
per-star errors by the same convolution.

**Masses**: the Kroupa IMF with slope $\alpha$, as for the Plummer model.

Projected positions are not supported by this model (the King surface density has
no closed form; `NotImplementedError`); use 3D positions, or the mock likelihood.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .._types import Array, ArrayLike
from ..kinematics.king_df import mean_square_speed, regularized_lower_gamma
from ..models import King
from ..profiles.king import W0_MAX, king_density_of_W, king_potential, king_velocity_scale_squared
from ..profiles.king_table import TABLE_W0_MIN, king_profile, table_covers
from ..sampling import safe_norm
from ..units import G_PHYSICAL
from .data import ObservedCluster
from .framework import FRAME_PARAMETERS, check_model_arguments, site_above_wall, support_bounds, total_mass_of
from .initialization import INIT_KEY, StartValue
from .likelihoods import kroupa_log_likelihood
from .los import convolve_with_error, king_los_logpdf
from .mock import INITIAL_VALUES, MockLikelihood, mock_factor
from .plummer import default_priors
from .priors import prior_range

PARAMETERS = ("r_h", "alpha", "Q", "W0")
NUM_POINTS = 256
_W0_GRID = np.arange(1.5, 12.01, 0.5)


def king_default_priors(line_of_sight: bool = False) -> dict[str, dist.Distribution]:
    """The Plummer model's priors (`default_priors`) and W0 ~ Uniform(1, 12)."""
    priors = default_priors(False, line_of_sight)
    priors["W0"] = dist.Uniform(1.0, 12.0)
    return priors


def _king_defaults(projected: bool, line_of_sight: bool) -> dict[str, dist.Distribution]:
    return king_default_priors(line_of_sight)


def king_log_likelihood(
    data: ObservedCluster,
    r_h: ArrayLike,
    alpha: ArrayLike,
    Q: ArrayLike,
    W0: ArrayLike,
    *,
    total_mass: ArrayLike | None = None,
    G: ArrayLike = G_PHYSICAL,
    centre: ArrayLike | None = None,
    bulk_velocity: ArrayLike | None = None,
    num_points: int = NUM_POINTS,
    tabulated: bool = False,
) -> Array:
    """The exact unbinned log-likelihood (a scalar) of `data` under a King cluster.

    Arguments as for `plummer_log_likelihood`, plus `W0` (central potential),
    `num_points` (static: grid nodes of the profile solve) and `tabulated`
    (static: read the profile from `progenax.profiles.king_table`, for
    0.5 <= W0 <= 20, instead of solving it). Stars beyond the tidal radius, or
    faster than the local escape speed, have likelihood 0.
    """
    # A non-finite W0 (a NUTS trajectory gone astray) gives -inf rather than
    # tripping the profile solver's range check.
    W0 = jnp.asarray(W0)
    ok = jnp.isfinite(W0)
    terms = king_phase_space_logpdf(
        data,
        r_h,
        Q,
        jnp.where(ok, W0, 6.0),
        total_mass=total_mass,
        G=G,
        centre=centre,
        bulk_velocity=bulk_velocity,
        num_points=num_points,
        tabulated=tabulated,
    )
    total = jnp.where(ok, jnp.sum(terms), -jnp.inf)
    if data.masses is not None:
        total += kroupa_log_likelihood(data.masses, alpha)
    return total


def king_phase_space_logpdf(
    data: ObservedCluster,
    r_h: ArrayLike,
    Q: ArrayLike,
    W0: ArrayLike,
    *,
    total_mass: ArrayLike | None = None,
    G: ArrayLike = G_PHYSICAL,
    centre: ArrayLike | None = None,
    bulk_velocity: ArrayLike | None = None,
    num_points: int = NUM_POINTS,
    tabulated: bool = False,
) -> Array:
    """Per-star log p(x) + log p(v | x) (n,) in pc^-3 (km/s)^-3 (or (km/s)^-1 for line of sight)."""
    _refuse_projected(data)
    profile = king_profile(W0, num_points=num_points, tabulated=tabulated)
    length, W = _star_potential(data, profile, r_h, centre)
    return _phase_space_terms(data, profile, length, W, Q, total_mass, G, bulk_velocity)


def _refuse_projected(data: ObservedCluster) -> None:
    if data.projected:
        raise NotImplementedError(
            "the unbinned King likelihood needs 3D positions (no closed-form surface density); "
            "use 3D data or the mock likelihood"
        )


def _star_radii(data: ObservedCluster, centre: ArrayLike | None) -> Array:
    x = data.positions if centre is None else data.positions - centre
    return safe_norm(x)


def _star_potential(data, profile, r_h, centre) -> tuple[Array, Array]:
    """The length unit L = r_h / r_h-hat (pc) and W at each star (0 beyond r_t)."""
    length = r_h / profile.r_h
    return length, king_potential(profile, _star_radii(data, centre) / length)


def _velocity_scale_unit(data, profile, length, total_mass, G) -> Array:
    """s_1^2 = 4 pi G M / (9 L M_t-hat) in (km/s)^2: the DF's velocity scale is s^2 = 2 Q s_1^2."""
    return king_velocity_scale_squared(G, total_mass_of(data, total_mass), length, profile.total_mass)


def _phase_space_terms(data, profile, length, W, Q, total_mass, G, bulk_velocity) -> Array:
    inside = W > 0
    W_safe = jnp.where(inside, W, 1.0)
    log_rho = jnp.log(king_density_of_W(W_safe, 1.0)) - jnp.log(king_density_of_W(profile.W0, 1.0))
    log_p = jnp.where(inside, log_rho - jnp.log(profile.total_mass) - 3.0 * jnp.log(length), -jnp.inf)
    if data.velocities is not None:
        s = jnp.sqrt(2.0 * Q * _velocity_scale_unit(data, profile, length, total_mass, G))
        v = data.velocities if bulk_velocity is None else data.velocities - bulk_velocity
        if data.line_of_sight:
            if data.velocity_errors is None:
                log_v = king_los_logpdf(v, W, s)
            else:
                W_b = W[:, None]
                log_v = convolve_with_error(
                    lambda u: king_los_logpdf(u, W_b, s), v, data.velocity_errors, jnp.sqrt(2.0 * W) * s
                )
        else:
            log_v = _king_velocity_logpdf(v, W, s)
        log_p = log_p + log_v
    return log_p


def _king_velocity_logpdf(v: Array, W: Array, s: Array) -> Array:
    """log p(v | W) in (km/s)^-3 for 3D velocities (module docstring); -inf at eps <= 0."""
    eps = W - 0.5 * jnp.sum(v**2, axis=-1) / s**2
    ok = (eps > 0) & (W > 0)
    e_safe = jnp.where(ok, eps, 1.0)
    W_safe = jnp.where(ok, W, 1.0)
    value = (
        jnp.log(jnp.expm1(e_safe))
        - 1.5 * np.log(2.0 * np.pi)
        - W_safe
        - jnp.log(regularized_lower_gamma(2.5, W_safe))
        - 3.0 * jnp.log(s)
    )
    return jnp.where(ok, value, -jnp.inf)


def king_initial_values(
    data: ObservedCluster, total_mass, G, num_points: int = NUM_POINTS, tabulated: bool = False
) -> dict[str, Array]:
    r"""Data-derived starting values: centre (median), bulk velocity (mean), r_h
    (median radius), and the best (W0, Q) on a grid of W0 (1.5 to 12 by 0.5).

    At each grid W0, Q is the larger of the moment estimate
    $\langle v^2/(2\,\overline{v^2}(W_i)/s^2\cdot s_1^2)\rangle$ and 1.1 times the
    smallest Q that keeps every star below its escape speed; the grid point with
    the largest likelihood (finite: every star inside $r_t$) is the start.
    """
    centre = jnp.median(data.positions, axis=0)
    r_h = jnp.median(safe_norm(data.positions - centre))
    values = {"r_h": r_h, "centre": centre}
    has_v = data.velocities is not None and (total_mass is not None or data.masses is not None)
    bulk = jnp.mean(data.velocities, axis=0) if has_v else None

    def at(W0):
        Q = jnp.asarray(0.5, r_h.dtype)
        if has_v:
            profile = king_profile(W0, num_points=num_points, tabulated=tabulated)
            length = r_h / profile.r_h
            W = king_potential(profile, safe_norm(data.positions - centre) / length)
            s1 = _velocity_scale_unit(data, profile, length, total_mass, G)
            v2 = (data.velocities - bulk) ** 2
            if data.line_of_sight:
                e2 = 0.0 if data.velocity_errors is None else data.velocity_errors**2
                v2_moment = 3.0 * jnp.maximum(v2 - e2, 0.0)
            else:
                v2 = jnp.sum(v2, axis=-1)
                v2_moment = v2
            W_safe = jnp.maximum(W, 1e-12)
            ms = mean_square_speed(W_safe, 1.0)  # <v^2> / s^2
            Q = jnp.maximum(jnp.mean(v2_moment / (2.0 * ms * s1)), 1.1 * jnp.max(v2 / (4.0 * W_safe * s1)))
        options = {"total_mass": total_mass, "G": G, "num_points": num_points, "tabulated": tabulated}
        log_l = king_log_likelihood(data, r_h, 2.3, Q, W0, centre=centre, bulk_velocity=bulk, **options)
        return jnp.where(jnp.isfinite(log_l), log_l, -jnp.inf), Q

    log_l, Q = jax.vmap(at)(jnp.asarray(_W0_GRID, r_h.dtype))
    best = jnp.argmax(log_l)
    values["W0"] = jnp.minimum(jnp.asarray(_W0_GRID, r_h.dtype)[best], W0_MAX)
    if has_v:
        values["Q"] = Q[best]
        values["bulk_velocity"] = bulk
    return values


INITIAL_VALUES[King] = king_initial_values  # the mock likelihood's fiducial W0 and r_h


def king_model(
    data: ObservedCluster,
    *,
    likelihood="unbinned",
    priors: Mapping[str, dist.Distribution] | None = None,
    fit_frame: bool = True,
    total_mass: ArrayLike | None = None,
    G: float = G_PHYSICAL,
    num_points: int = NUM_POINTS,
    reparametrize: bool = True,
    tabulated: bool | None = None,
) -> None:
    r"""numpyro model: priors over r_h (pc), alpha, Q and W0, and the King likelihood.

    As `plummer_model`, with the extra site `"W0"` (default prior Uniform(1, 12)).
    `likelihood` is "unbinned" (the exact likelihood of the module docstring;
    3D positions) or a `MockLikelihood` built with
    `progenax.infer.mock_likelihood(data, "king", ...)`. Use
    `init_strategy=progenax.infer.init_to_data()`.

    **The support walls** (`reparametrize`, unbinned likelihood only). The
    likelihood is zero when a star lies beyond the tidal radius,
    $r_t = \hat r_t(W_0)\,r_h/\hat r_h(W_0) \le \max_i|\mathbf x_i - \mathbf c|$, or
    moves faster than its escape speed, $Q \le \max_i v_i^2/(4 W_i s_1^2)$ (with
    $s^2 = 2 Q s_1^2$; line-of-sight speeds without errors likewise; with per-star errors
    the convolution leaves a wall only 8 errors beyond the escape speed, and Q is
    sampled directly). The posterior presses against both walls
    (the outermost star sits within about $r_t/n$ of $r_t$), and NUTS trajectories
    that cross them diverge. With `reparametrize=True` (the default) r_h and Q are
    sampled through unconstrained sites `"r_h_unconstrained"` and
    `"Q_unconstrained"` that map onto the allowed range only
    (`_site_above_wall`: the range's lower end is the wall given (W0, centre), then
    (r_h, W0, centre, bulk velocity)); their priors and the Jacobian enter as the
    factors `"r_h_prior"` and `"Q_prior"`, so the posterior of
    (r_h, alpha, Q, W0, frame) is the same as with `reparametrize=False`, which
    samples r_h and Q directly. `"r_h"` and `"Q"` are deterministic sites then
    (in `mcmc.get_samples()`; condition on the `_unconstrained` sites, or pass
    `reparametrize=False` to condition on r_h or Q). Priors on r_h and Q must
    have an interval, lower-bounded or real support.

    **The profile** (`tabulated`, static). `True` reads the King profile at each
    W0 from the table of `progenax.profiles.king_table` (0.5 <= W0 <= 20; a W0
    prior whose support leaves it is a `ValueError`); `False`
    solves Poisson's equation at every gradient, which makes a NUTS step about 15
    times slower. The default `None` takes the table when the W0 prior's support
    lies in [0.5, 20].

    ```python
    data = progenax.infer.simulate_king(key, n=2000, W0=6.0)
    mcmc = MCMC(NUTS(progenax.infer.king_model, init_strategy=progenax.infer.init_to_data()), ...)
    mcmc.run(jax.random.PRNGKey(1), data)
    ```
    """
    merged = check_model_arguments(data, likelihood, priors, King, PARAMETERS + FRAME_PARAMETERS, _king_defaults)
    if isinstance(likelihood, MockLikelihood):
        params = {
            p: numpyro.sample(p, merged[p], infer={INIT_KEY: StartValue(likelihood.fiducial[p])}) for p in PARAMETERS
        }
        mock_factor(likelihood, params)
        return
    if data.projected:
        raise NotImplementedError(
            "the unbinned King likelihood needs 3D positions: use 3D data or likelihood=mock_likelihood(data, 'king')"
        )
    if reparametrize:
        for name in ("r_h", "Q"):
            support_bounds(name, merged[name])  # eager check of the support
        if data.velocities is not None:
            total_mass_of(data, total_mass)  # ValueError without masses or total_mass
    span = prior_range(merged["W0"])
    if tabulated is None:
        tabulated = span is not None and table_covers(*span)
    elif tabulated and span is not None and not table_covers(*span):
        # Else the first W0 the sampler proposed outside the table failed the
        # table's run-time check, mid-warmup, deep inside a JaxRuntimeError.
        raise ValueError(
            f"tabulated=True reads W0 from the King table, [{TABLE_W0_MIN}, {W0_MAX}], but the W0 prior's "
            f"support is [{span[0]:g}, {span[1]:g}]: give a prior inside the table, or tabulated=False"
        )
    start = king_initial_values(data, total_mass, G, num_points, tabulated)

    def site(name):
        return numpyro.sample(name, merged[name], infer={INIT_KEY: StartValue(start[name])} if name in start else {})

    if not reparametrize:
        r_h, alpha, Q, W0 = (site(name) for name in PARAMETERS)
        centre = site("centre") if fit_frame else None
        bulk = site("bulk_velocity") if fit_frame and data.velocities is not None else None
        log_l = king_log_likelihood(
            data,
            r_h,
            alpha,
            Q,
            W0,
            total_mass=total_mass,
            G=G,
            centre=centre,
            bulk_velocity=bulk,
            num_points=num_points,
            tabulated=tabulated,
        )
        numpyro.factor("log_likelihood", log_l)
        return

    alpha, W0 = site("alpha"), site("W0")
    centre = site("centre") if fit_frame else None
    W0_ok = jnp.isfinite(W0)  # as in king_log_likelihood: -inf, not the solver's range check
    profile = king_profile(jnp.where(W0_ok, W0, 6.0), num_points=num_points, tabulated=tabulated)
    r_wall = jnp.max(_star_radii(data, centre)) * profile.r_h / profile.r_t
    r_h = site_above_wall("r_h", merged["r_h"], r_wall, start["r_h"])
    length, W = _star_potential(data, profile, r_h, centre)
    if data.velocities is not None:
        bulk = site("bulk_velocity") if fit_frame else None
        v = data.velocities if bulk is None else data.velocities - bulk
        if data.line_of_sight and data.velocity_errors is not None:
            Q = site("Q")  # the error convolution has no hard wall in Q
        else:
            v2 = v**2 if data.line_of_sight else jnp.sum(v**2, axis=-1)
            inside = W > 0  # every star, but for rounding at the wall
            s1 = _velocity_scale_unit(data, profile, length, total_mass, G)
            q_wall = jnp.max(jnp.where(inside, v2 / (4.0 * jnp.where(inside, W, 1.0) * s1), jnp.inf))
            Q = site_above_wall("Q", merged["Q"], q_wall, start["Q"])
    else:
        bulk, Q = None, site("Q")
    terms = _phase_space_terms(data, profile, length, W, Q, total_mass, G, bulk)
    log_l = jnp.where(W0_ok, jnp.sum(terms), -jnp.inf)
    if data.masses is not None:
        log_l += kroupa_log_likelihood(data.masses, alpha)
    numpyro.factor("log_likelihood", log_l)
