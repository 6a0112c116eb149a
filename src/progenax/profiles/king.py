r"""Lowered-isothermal models: Woolley ($g=0$), King ($g=1$), Wilson ($g=2$), LIMEPY anisotropy.

The family of Gomez-Leyton & Velazquez (2014) and Gieles & Zocchi (2015, LIMEPY)
lowers the isothermal distribution function by the truncation index $g$; in the
isotropic case the density as a function of the dimensionless potential
$W = -(\Phi - \Phi_t)/\sigma^2$ (zero at the tidal radius) is

$$\hat\rho(W) = e^{W} P\!\left(g + \tfrac32, W\right),\qquad W > 0,$$

with $P$ the regularised lower incomplete gamma function, and $\hat\rho = 0$ for
$W \le 0$. In King radii $r_0$, $r_0^2 = 9\sigma^2/(4\pi G\rho_0)$, Poisson's
equation reads

$$W'' + \frac{2}{r}W' = -9\,\frac{\hat\rho(W)}{\hat\rho(W_0)},\qquad W(0) = W_0,\ W'(0) = 0.$$

**Method.** The equation is integrated in $s = \ln r$ for $(W, z = r^2 W', q)$,
with $q$ the potential-energy integral $\int M\,dM/r$, by Tsitouras' 5th-order
Runge-Kutta method with one step per interval of the output grid
(`progenax.profiles.ode.integrate_on_grid`): a log-spaced grid from
$r_{\min} = 10^{-4}$ to `r_max`, started from the series
$W = W_0 - \tfrac32 r^2 + \tfrac{27}{40}\,\frac{d\ln\hat\rho}{dW}\big|_{W_0} r^4$
(the $r = 0$ singularity is never evaluated) and with the node $r = 0$ prepended.
The number of steps is static, so the solve has a fixed cost and differentiates
(reverse mode, through the scan of steps) with respect to $W_0$.

The right-hand side uses the clamped potential $\max(W, 0)$ (no mass where
$W \le 0$), but the state keeps integrating past the edge, where $W$ goes negative
as the Keplerian $W = W_t - z(1/r_t - 1/r)$. The tidal radius is found on that
unclamped `W_raw`: between the two nodes that bracket the sign change, $W$ is
(nearly exactly, since there is almost no mass in the bracket) linear in $1/r$, so

$$\frac{1}{r_t} = u_0 + \frac{W_0'}{W_0' - W_1'}(u_1 - u_0),\qquad u = 1/r,$$

with $W_0', W_1'$ the raw potentials at the bracket. This is smooth in the node
values, so $\partial r_t/\partial W_0$ flows through the solve; interpolating the
clamped potential would snap $r_t$ to a node (weight exactly 1) and zero the slope.

The half-mass radius solves $M(r_h) = M_t/2$ on the cubic Hermite interpolant of
$M$ (with $dM/dr = 4\pi\hat\rho r^2$ known at the nodes), by
`solve_increasing` with implicit gradients.

**Units.** `r` in King radii $r_0$; `density` is $\hat\rho/\hat\rho(W_0)$ (1 at
the centre); `mass` is $4\pi\int_0^r \hat\rho r'^2 dr'$ in units of $\rho_0 r_0^3$,
which equals $-\tfrac{4\pi}{9} r^2 W'$ (so $G M / (\sigma^2 r_0) = \tfrac{9}{4\pi}$ `mass`).

**Differentiability.** All outputs are differentiable in $W_0$ and $g$ (reverse
mode). The index of the bracketing nodes is piecewise constant (no gradient flows
through it); the crossing weight and the Hermite root carry the slope. Gradients in
$g$ use `jax.scipy.special.gammainc`'s derivative in its first argument, which
agrees with central differences to about $10^{-6}$ relative (tests check $10^{-5}$).
At $g = 0$ only the one-sided derivative is meaningful.

**Anisotropy.** With an anisotropy radius $r_a$ (King radii) the DF is
$f \propto e^{-J^2/(2 r_a^2 s^2)} E_\gamma(g, \varepsilon)$ (Michie-type, Gieles &
Zocchi 2015): isotropic in the centre, radially anisotropic beyond $\sim r_a$ and
isotropic again at $r_t$ (where all speeds vanish). The density then depends on $r$
explicitly through $p^2 = r^2/r_a^2$ (GZ15 eq. 11),

$$\hat\rho(W, r) = \frac{e^W P(g+\tfrac32, W) + p^2 W^{g+3/2}\,
{}_1F_1(1; g+\tfrac52; -p^2 W)/\Gamma(g+\tfrac52)}{1 + p^2},$$

and Poisson's equation is solved with $\hat\rho(W, r)/\hat\rho(W_0, 0)$ on the same
steps (`progenax.kinematics.king_df.kummer_1f1_neg` evaluates ${}_1F_1$ to
$\sim 10^{-14}$, differentiably in $g$). The profile then also holds
$\beta(r) = 1 - \sigma_t^2/(2\sigma_r^2)$ on the grid (GZ15 eqs. 12-14, 32), and
every scalar is differentiable in $r_a$ too. $r_a \to \infty$ recovers the
isotropic model ($\hat\rho$ changes by $O(r^2/r_a^2)$).

**Multi-mass models.** `solve_multimass_king_profile` solves the same equation
with the density summed over mass components, each with its own velocity scale
$s_j \propto m_j^{-\delta}$ and a self-consistent central fraction (fixed
iterations); `multimass_sample_radii` draws each component's radii.

**Sampling.** `king_sample_radii` inverts $M(r)$ on the grid (every radius
$\le r_t$) and returns the potential there; `king_potential` evaluates $W(r)$.

**Range.** $r_t$ grows steeply with $W_0$ and $g$ (and diverges as $g \to 3.5$):
with the default `r_max` = $10^5$, King models reach $W_0 = 20$ ($c \approx 4.5$),
but e.g. $g = 3$ needs $W_0 \lesssim 3.5$ (3 works, 4 does not); such a call raises (eagerly, or
through `equinox.error_if` under jit) rather than returning a wrong $r_t$.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .._forward_mode import forward_mode
from .._types import Array, ArrayLike
from ..kinematics.king_df import (
    anisotropic_moments,
    kummer_1f1_neg,
    regularized_lower_gamma,
    static_or_array,
    static_scalar,
)
from ..sampling import hermite_cell, safe_divide, solve_increasing
from ..validation import check_range, check_scalar, check_static_int, check_static_range, error_if
from .ode import integrate_on_grid

G_MAX = 3.5
"""Models are finite only for g < 3.5 (Gieles & Zocchi 2015)."""

W0_MIN = 1e-3
"""Smallest accepted central potential: r_t ~ sqrt(W0 / 1.5) must lie well beyond
the first node r = 1e-4, where the start series holds."""

W0_MAX = 20.0
"""Largest accepted central potential (r_t must also fit inside `r_max`)."""

_R_MIN = 1e-4  # first integration node (King radii); series error there ~ r^6 ~ 1e-24
_N_HALF_MASS_STEPS = 12  # safeguarded Newton on a cubic from a node bracket


class KingProfile(eqx.Module):
    """A solved lowered-isothermal model on a fixed radial grid.

    Arrays have length `num_points` (node 0 is r = 0); radii in King radii r_0.
    """

    r: Array
    """Radial grid (King radii); r[0] = 0, then log-spaced up to r_max."""
    W: Array
    """Clamped dimensionless potential max(W, 0): for density, CDF, velocities."""
    W_raw: Array
    """Unclamped potential: negative beyond the tidal radius."""
    density: Array
    """rho / rho(0) (1 at the centre, 0 beyond r_t)."""
    mass: Array
    """Enclosed mass 4 pi int rho r^2 dr, units rho_0 r_0^3."""
    total_mass: Array
    """Mass within r_t."""
    r_t: Array
    """Tidal (truncation) radius, where W_raw crosses zero."""
    r_h: Array
    """3D half-mass radius."""
    r_v: Array
    """Virial radius G M^2 / (2 |U|)."""
    c: Array
    """Concentration log10(r_t / r_0)."""
    W0: Array
    g: Array
    ra: Array | None = None
    """Anisotropy radius (King radii); None for the isotropic model."""
    beta: Array | None = None
    """Anisotropy 1 - sigma_t^2 / (2 sigma_r^2) on the grid (0 at r = 0 and
    beyond r_t); None for the isotropic model."""


def king_density_of_W(W: ArrayLike, g: ArrayLike) -> Array:
    r"""Unnormalised $\hat\rho(W) = e^W P(g + 3/2, W)$, 0 for $W \le 0$ (gradient-safe)."""
    W = jnp.asarray(W)
    pos = W > 0
    Ws = jnp.where(pos, W, 1.0)
    return jnp.where(pos, jnp.exp(Ws) * regularized_lower_gamma(g + 1.5, Ws), 0.0)


def _dlnrho_dW(W: Array, g: Array, rho: Array) -> Array:
    """d ln rho / dW at W > 0: 1 + W^(a-1) e^(-W) / (Gamma(a) P(a, W)), a = g + 3/2.

    `rho` = king_density_of_W(W, g) = e^W P(a, W) is passed in: reusing it saves a
    gammainc call site (compile time).
    """
    a = g + 1.5
    return 1.0 + jnp.exp((a - 1.0) * jnp.log(W) - gammaln(a)) / rho


def anisotropic_density(W: ArrayLike, g: ArrayLike, p2: ArrayLike) -> Array:
    r"""Unnormalised $\hat\rho(W, p^2)$ of the anisotropic model (module docstring), 0 at $W \le 0$.

    A lighter twin of `anisotropic_moments(W, g, p2)[0]` for the ODE's right-hand side.
    """
    W = jnp.asarray(W)
    pos = W > 0
    Ws = jnp.where(pos, W, 1.0)
    extra = p2 * jnp.exp((g + 1.5) * jnp.log(Ws) - gammaln(g + 2.5)) * kummer_1f1_neg(1, g + 2.5, p2 * Ws)
    return jnp.where(pos, (jnp.exp(Ws) * regularized_lower_gamma(g + 1.5, Ws) + extra) / (1.0 + p2), 0.0)


def checked_g(g: ArrayLike) -> Array | float:
    """The truncation index g, range-checked. A static number (Python or NumPy, a
    multiple of 1/2: `static_order`) stays a Python float, so that every P(a, x) of
    the model takes its closed forms (`regularized_lower_gamma`); any other g is a
    float array (differentiable)."""
    bounds = dict(lower=0.0, upper=G_MAX, lower_inclusive=True)
    static = static_scalar(g)
    if static is not None:
        return check_static_range("g", static, **bounds)
    return check_range("g", g, **bounds)


def solve_king_profile(
    W0: ArrayLike,
    g: ArrayLike = 1.0,
    ra: ArrayLike | None = None,
    *,
    num_points: int = 1024,
    r_max: float = 1e5,
) -> KingProfile:
    r"""Solve Poisson's equation for a lowered-isothermal model.

    **Arguments:**

    - `W0`: central dimensionless potential, $10^{-3} \le W_0 \le 20$ (differentiable).
    - `g`: truncation index, $0 \le g < 3.5$ (0 Woolley, 1 King, 2 Wilson).
    - `ra`: None (isotropic) or the anisotropy radius $r_a > 0$ in King radii $r_0$
      (differentiable; `inf` is the isotropic limit). Radial anisotropy lowers the
      density at $r \gtrsim r_a$, so a small $r_a$ makes a more extended model.
    - `num_points`: grid nodes, r = 0 included (static, >= 64). The ODE takes one
      Tsit5 step per node interval in ln r.
    - `r_max`: outer end of the grid in King radii (static); must exceed r_t
      (checked: a model that has not crossed W = 0 by r_max raises).

    **Returns:** a `KingProfile`; with `ra`, its `ra` and `beta` (the anisotropy
    $\beta(r) = 1 - \sigma_t^2/(2\sigma_r^2)$ on the grid) are set.
    """
    num_points = check_static_int("num_points", num_points, 64)
    if not (isinstance(r_max, (int, float)) and np.isfinite(r_max) and r_max > 10.0):
        raise ValueError(f"r_max must be a finite float > 10 (static), got {r_max!r}")
    check_scalar("W0", W0)
    W0 = check_range("W0", W0, lower=W0_MIN, upper=W0_MAX, lower_inclusive=True, upper_inclusive=True)
    g = checked_g(g)
    if ra is not None:
        ra = check_range("ra", ra, lower=0.0)
    dtype = jnp.result_type(W0, g) if ra is None else jnp.result_type(W0, g, ra)
    W0, g = W0.astype(dtype), static_or_array(g, dtype)
    inv_ra2 = None if ra is None else 1.0 / ra.astype(dtype) ** 2

    s_grid = jnp.linspace(np.log(_R_MIN), np.log(r_max), num_points - 1, dtype=dtype)
    rho0 = king_density_of_W(W0, g)
    four_pi = 4.0 * np.pi

    # Every traced value the right-hand side reads goes in `args`, so that the
    # solve's forward-mode derivative sees it (`_traced_order`).
    args = {"rho0": rho0, "inv_ra2": inv_ra2, "g": _traced_order(g)}

    def rhs(s, y, args):
        W, z, q = y
        r = jnp.exp(s)
        g_ = _order(g, args["g"])
        if args["inv_ra2"] is None:
            rho = king_density_of_W(W, g_) / args["rho0"]
        else:
            rho = anisotropic_density(W, g_, r * r * args["inv_ra2"]) / args["rho0"]
        mass = -four_pi / 9.0 * z
        return (z / r, -9.0 * rho * r**3, mass * four_pi * rho * r**2)

    # Series start at r = R_MIN: W = W0 - 1.5 r^2 + k r^4 with k = -(9/20) c1 for
    # rho / rho0 = 1 + c1 r^2 + ...: c1 = -1.5 dln rho/dW (isotropic), plus
    # (W0^(g+3/2) / (Gamma(g+5/2) rho0) - 1) / ra^2 from the explicit r-dependence.
    r1 = _R_MIN
    k4 = 27.0 / 40.0 * _dlnrho_dW(W0, g, rho0)
    if inv_ra2 is not None:
        c_ra = jnp.exp((g + 1.5) * jnp.log(W0) - gammaln(g + 2.5)) / rho0 - 1.0
        k4 = k4 - 9.0 / 20.0 * c_ra * inv_ra2
    W_start = W0 - 1.5 * r1**2 + k4 * r1**4
    z_start = r1**2 * (-3.0 * r1 + 4.0 * k4 * r1**3)  # r^2 W'
    m_start = -four_pi / 9.0 * z_start
    q_start = 0.6 * m_start**2 / r1  # uniform sphere: int M dM / r = (3/5) M^2 / r
    y0 = (W_start, z_start.astype(dtype), jnp.asarray(q_start, dtype))

    W_nodes, z_nodes, q_nodes = integrate_on_grid(rhs, y0, s_grid, args)

    zero = jnp.zeros((1,), dtype)
    r = jnp.concatenate([zero, jnp.exp(s_grid)])
    W_raw = jnp.concatenate([W0[None], W_nodes])
    W = jnp.maximum(W_raw, 0.0)
    if inv_ra2 is None:
        density, beta = king_density_of_W(W_raw, g) / rho0, None
    else:
        rho_hat, rho_r, rho_t = anisotropic_moments(W_raw, g, r * r * inv_ra2)
        density = rho_hat / rho0
        beta = 1.0 - 0.5 * rho_t / jnp.where(rho_r > 0, rho_r, 1.0)
        beta = jnp.where(rho_r > 0, beta, 0.0)
    mass = jnp.concatenate([zero, -four_pi / 9.0 * z_nodes])
    total_mass = mass[-1]

    # Tidal radius: first sign change of the unclamped potential, linear in 1/r.
    crossed = W_raw <= 0
    k = jnp.clip(jnp.argmax(crossed), 2, num_points - 1)  # node 1 > 0 always (r = R_MIN)
    w_in, w_out = W_raw[k - 1], W_raw[k]
    u_in, u_out = 1.0 / r[k - 1], 1.0 / r[k]
    t = w_in / (w_in - w_out)
    r_t = 1.0 / (u_in + t * (u_out - u_in))

    # Half-mass radius on the cubic Hermite interpolant of M(r).
    dmass = four_pi * density * r**2
    half = 0.5 * total_mass
    j = jnp.clip(jnp.searchsorted(jax.lax.stop_gradient(mass), jax.lax.stop_gradient(half)), 1, num_points - 1)
    r_lo, r_hi = r[j - 1], r[j]
    ma, mb, da, db = mass[j - 1], mass[j], dmass[j - 1], dmass[j]

    def hermite(x):
        return cubic_hermite(x, r_lo, r_hi, ma, mb, da, db)

    r_h = solve_increasing(hermite, half, r_lo, r_hi, num_steps=_N_HALF_MASS_STEPS, F_lo=ma, F_hi=mb)

    r_v = total_mass**2 / (2.0 * q_nodes[-1])
    c = jnp.log10(r_t)
    profile = KingProfile(
        r=r,
        W=W,
        W_raw=W_raw,
        density=density,
        mass=mass,
        total_mass=total_mass,
        r_t=r_t,
        r_h=r_h,
        r_v=r_v,
        c=c,
        W0=W0,
        g=g,
        ra=None if ra is None else ra.astype(dtype),
        beta=beta,
    )
    # Tied to every leaf, so the check fires whichever output a jitted caller keeps.
    return error_if(profile, ~jnp.any(crossed), TOO_LARGE_MESSAGE)


TOO_LARGE_MESSAGE = (
    "the model has no tidal radius within the solver grid (r_max, 1e5 King radii in the builders): "
    "W0 or g too large, or ra too small; lower W0 or g, or raise ra "
    "(solve_king_profile also takes a larger r_max)"
)


def cubic_hermite(x: Array, xa: Array, xb: Array, fa: Array, fb: Array, da: Array, db: Array) -> Array:
    """The cubic through (xa, fa), (xb, fb) with slopes da, db (f at xb if xb == xa)."""
    h = xb - xa
    ok = h > 0
    h_safe = jnp.where(ok, h, 1.0)
    t = jnp.where(ok, (x - xa) / h_safe, 1.0)
    return hermite_cell(t, h, fa, fb, da, db)


def _truncated_nodes(p: KingProfile) -> tuple[Array, Array, Array, Array, Array]:
    """Grid nodes with every node at or past r_t moved onto r_t.

    Returns (r, M, dM/dr, W, dW/dr) on that grid: the last cell ends exactly at
    r_t, where M = M_t, dM/dr = 0 and W = 0, so interpolants never reach past it.
    """
    inside = p.r < p.r_t
    r = jnp.where(inside, p.r, p.r_t)
    mass = jnp.where(inside, p.mass, p.total_mass)
    dmass = jnp.where(inside, 4.0 * np.pi * p.density * r**2, 0.0)
    W = jnp.where(inside, p.W_raw, 0.0)
    pos = r > 0
    r_safe = jnp.where(pos, r, 1.0)
    dW = jnp.where(pos, -9.0 / (4.0 * np.pi) * mass / r_safe**2, 0.0)  # W' = -9 M / (4 pi r^2)
    return r, mass, dmass, W, dW


def king_sample_radii(profile: KingProfile, u: Array, *, num_steps: int = 6) -> tuple[Array, Array]:
    r"""Radii with enclosed-mass fractions `u`, and the clamped potential there.

    Inverts $M(r) = u M_t$ on the cubic Hermite interpolant of the solved $M(r)$
    (slopes $4\pi\hat\rho r^2$ at the nodes), bracketed by the table and polished by
    `num_steps` safeguarded-Newton steps (a cell spans $\Delta\ln r = 0.02$, where
    $M$ is nearly linear: 3 steps reach machine precision, 6 leave a margin). The
    potential at the root is the Hermite interpolant of $W$ with $W' = -9M/(4\pi r^2)$.
    The last cell ends exactly at $r_t$, so every radius is $\le r_t$ and every
    $W \ge 0$. Gradients with respect to the profile (hence $W_0$, $g$) follow the
    implicit-function theorem.

    **Arguments:** `profile` from `solve_king_profile`; `u` in (0, 1), any shape.

    **Returns:** `(r, W)`, radii in King radii and the dimensionless potential.
    """
    r, mass, dmass, W, dW = _truncated_nodes(profile)
    target = u * profile.total_mass
    size = r.shape[0]
    k = jnp.clip(
        jnp.searchsorted(jax.lax.stop_gradient(mass), jax.lax.stop_gradient(target), side="right"), 1, size - 1
    )
    ra, rb, ma, mb, da, db = r[k - 1], r[k], mass[k - 1], mass[k], dmass[k - 1], dmass[k]

    def enclosed(x):
        return cubic_hermite(x, ra, rb, ma, mb, da, db)

    # Rolled (unroll=False): a fifth less compile for the builder, a few ms per 1e6 stars.
    radius = solve_increasing(enclosed, target, ra, rb, num_steps=num_steps, F_lo=ma, F_hi=mb, unroll=False)
    W_at = cubic_hermite(radius, ra, rb, W[k - 1], W[k], dW[k - 1], dW[k])
    return radius, jnp.maximum(W_at, 0.0)


def king_velocity_scale_squared(G: ArrayLike, total_mass: ArrayLike, length: ArrayLike, model_mass: ArrayLike) -> Array:
    r"""$s^2 = 4\pi G M / (9 L \hat M_t)$: the square of the DF's velocity unit for a
    cluster of mass M whose King radius is L (length) and whose model mass in
    King units is $\hat M_t$ (from $G M / (s^2 L) = \tfrac{9}{4\pi}\hat M_t$)."""
    return 4.0 * np.pi * G * total_mass / (9.0 * length * model_mass)


def king_potential(profile: KingProfile, radius: ArrayLike) -> Array:
    """Clamped dimensionless potential W(r) at radii in King radii (0 beyond r_t)."""
    radius = jnp.asarray(radius)
    r, _, _, W, dW = _truncated_nodes(profile)
    k = jnp.clip(jnp.searchsorted(r, radius, side="right"), 1, r.shape[0] - 1)
    W_at = cubic_hermite(jnp.minimum(radius, profile.r_t), r[k - 1], r[k], W[k - 1], W[k], dW[k - 1], dW[k])
    return jnp.where(radius < profile.r_t, jnp.maximum(W_at, 0.0), 0.0)


def king_radius_of_potential(profile: KingProfile, W: ArrayLike, *, num_steps: int = 8) -> Array:
    r"""The radius (King radii) where the model's potential equals `W` (0 <= W <= W0).

    Inverts the same cubic Hermite interpolant of $W(r)$ as `king_potential`
    ($W' = -9M/(4\pi r^2)$ at the nodes), bracketed by the table and polished by
    `num_steps` safeguarded-Newton steps (the interpolant is nearly linear in a
    cell; 8 steps reach rounding). $W = W_0$ gives 0, $W \to 0$ gives $r_t$.
    Gradients by the implicit-function rule (0 at r = 0, where $W' = 0$).
    """
    r, _, _, Wn, dW = _truncated_nodes(profile)
    target = -jnp.asarray(W)
    size = r.shape[0]
    k = jnp.clip(jnp.searchsorted(jax.lax.stop_gradient(-Wn), jax.lax.stop_gradient(target), side="right"), 1, size - 1)
    r_lo, r_hi, w_lo, w_hi, d_lo, d_hi = r[k - 1], r[k], Wn[k - 1], Wn[k], dW[k - 1], dW[k]

    def minus_W(x):
        return -cubic_hermite(x, r_lo, r_hi, w_lo, w_hi, d_lo, d_hi)

    # Rolled: unrolled, XLA fused each Newton step with every step before it
    # (the chain is elementwise), about a third of an anisotropic LIMEPY
    # build's program; the callers invert a table's rows, not every star.
    return solve_increasing(minus_W, target, r_lo, r_hi, num_steps=num_steps, F_lo=-w_lo, F_hi=-w_hi, unroll=False)


# -- multi-mass models -----------------------------------------------------------
MULTIMASS_R_MAX = 1e10
"""Outer end of the multi-mass solver grid, in King radii of the *total* central
density. The heaviest bin (it holds the IMF's massive tail) dominates the centre,
so the light components reach far out in that unit: a Kroupa IMF in 8 bins at
W0 = 6, delta = 0.5, n = 1e5 has r_t ~ 5e5 r_0, in 10 bins ~ 4.5e6 r_0, beyond
the single-mass grid's 1e5. The 1024 nodes then span Delta ln r = 0.032."""

MULTIMASS_TOO_LARGE_MESSAGE = (
    "the multi-mass model's tidal radius lies beyond the solver grid (r_max, 1e10 King radii of the total "
    "central density): lower W0, delta or mass_bins"
)


class MultiMassKingProfile(eqx.Module):
    r"""A solved multi-mass lowered-isothermal model (see `solve_multimass_king_profile`).

    Arrays over the grid have length `num_points`; per-component ones a leading
    axis of K components. Radii in King radii $r_0$ of the *total* central density;
    masses in units of $\rho_0 r_0^3$.
    """

    r: Array
    W: Array
    W_raw: Array
    mass: Array
    """Total enclosed mass."""
    mass_j: Array
    """(K, num_points) enclosed mass of each component."""
    density_j: Array
    """(K, num_points) rho_j / rho_0 (rho_0 the total central density)."""
    total_mass: Array
    total_mass_j: Array
    r_t: Array
    r_h: Array
    r_h_j: Array
    """(K,) 3D half-mass radius of each component."""
    c: Array
    W0: Array
    g: Array
    b_j: Array
    """(K,) s^2 / s_j^2 = mu_j^(2 delta): component j feels the potential b_j W."""
    mass_fraction_error: Array
    """max_j |achieved / requested mass fraction - 1| after the iterations."""


def _component_density(W: Array, W0: Array, g: Array, kappa: Array, b: Array) -> Array:
    """rho_j / rho_0 = kappa_j exp(b_j (W - W0)) P(g + 3/2, b_j W) / P(g + 3/2, b_j W0), 0 at W <= 0.

    Written relative to the centre so that b_j W0 of hundreds never overflows.
    """
    W = jnp.asarray(W)[..., None]
    pos = W > 0
    Ws = jnp.where(pos, W, 1.0)
    a = g + 1.5
    P = regularized_lower_gamma(
        a, jnp.concatenate([jnp.broadcast_to(b * W0, Ws.shape[:-1] + b.shape), b * Ws], axis=-1)
    )
    K = b.shape[0]
    val = kappa * jnp.exp(b * (Ws - W0)) * P[..., K:] / P[..., :K]
    return jnp.where(pos, val, 0.0)


def _solve_multimass_ode(W0, g, kappa, b, s_grid, num_points):
    """One profile solve for given central fractions kappa (sum 1) and scales b."""
    four_pi = 4.0 * np.pi
    dtype = s_grid.dtype

    args = {"W0": W0, "kappa": kappa, "b": b, "g": _traced_order(g)}  # as in solve_king_profile

    def rhs(s, y, args):
        W, z, q, m = y
        r = jnp.exp(s)
        rho_j = _component_density(W, args["W0"], _order(g, args["g"]), args["kappa"], args["b"])
        rho = jnp.sum(rho_j)
        mass = -four_pi / 9.0 * z
        return (z / r, -9.0 * rho * r**3, mass * four_pi * rho * r**2, four_pi * rho_j * r**3)

    r1 = _R_MIN
    rho_c = king_density_of_W(b * W0, g)  # only its logarithmic slope is used
    dlnrho = jnp.sum(kappa * b * _dlnrho_dW(b * W0, g, rho_c))  # sum kappa_j = 1
    k4 = 27.0 / 40.0 * dlnrho
    W_start = W0 - 1.5 * r1**2 + k4 * r1**4
    z_start = r1**2 * (-3.0 * r1 + 4.0 * k4 * r1**3)
    m_start = -four_pi / 9.0 * z_start
    q_start = 0.6 * m_start**2 / r1
    y0 = (W_start, z_start.astype(dtype), jnp.asarray(q_start, dtype), (four_pi / 3.0 * r1**3) * kappa)
    return integrate_on_grid(rhs, y0, s_grid, args)


def _traced_order(g: Array | float) -> Array | None:
    """The order g among a forward-mode solve's traced inputs: None when it is
    static (a Python float, which stays in the closure and keeps its special
    cases; `kinematics.king_df.static_or_array`)."""
    return None if isinstance(g, float) else g


def _order(g: Array | float, traced: Array | None) -> Array | float:
    """g inside such a solve: the traced input if there is one, else the static g."""
    return g if traced is None else traced


def _iterate_central_fractions(static: tuple, traced: dict) -> Array:
    """kappa after `num_iterations` updates of `solve_multimass_king_profile` from
    kappa = target: static = (num_iterations, num_points, g), traced = W0, b,
    target, s_grid and g (`_traced_order`)."""
    num_iterations, num_points, static_g = static
    g = _order(static_g, traced["g"])
    target = traced["target"]

    def iterate(kappa, _):
        m_end = _solve_multimass_ode(traced["W0"], g, kappa, traced["b"], traced["s_grid"], num_points)[3][-1]
        achieved = m_end / jnp.sum(m_end)
        kappa = kappa * safe_divide(target, achieved)
        return kappa / jnp.sum(kappa), None

    return jax.lax.scan(iterate, target, None, length=num_iterations)[0]


# Differentiated in forward mode: its few scalar inputs, and 16 profile solves
# that reverse mode would run backwards one after the other (`progenax._forward_mode`).
_central_fractions = forward_mode(_iterate_central_fractions, nondiff_argnums=(0,))


def solve_multimass_king_profile(
    W0: ArrayLike,
    m_j: ArrayLike,
    M_j: ArrayLike,
    g: ArrayLike = 1.0,
    delta: ArrayLike = 0.5,
    *,
    num_iterations: int = 16,
    num_points: int = 1024,
    r_max: float = MULTIMASS_R_MAX,
) -> MultiMassKingProfile:
    r"""Solve a multi-mass lowered-isothermal model (Gieles & Zocchi 2015, sect. 2.2).

    Component $j$ (stellar mass $m_j$, total mass $M_j$) has the DF of the
    single-mass model with velocity scale $s_j = s\,\mu_j^{-\delta}$,
    $\mu_j = m_j/\bar m$ ($\bar m = \sum M_j / \sum (M_j/m_j)$, the mean stellar
    mass), so it sees the potential $b_j W$ with $b_j = \mu_j^{2\delta}$ and

    $$\rho_j(W) = \kappa_j\, e^{b_j (W - W_0)}\,
    \frac{P(g + 3/2, b_j W)}{P(g + 3/2, b_j W_0)}\,\rho_0,\qquad \sum_j \kappa_j = 1.$$

    The central fractions $\kappa_j$ are found self-consistently: starting from
    $\kappa_j \propto M_j$, each of `num_iterations` (static) profile solves rescales
    $\kappa_j$ by (requested / achieved mass fraction). Heavier components are more
    concentrated, so the update contracts, by a factor ~3 per iteration for two
    components with m_2 / m_1 = 4 (measured: 1e-5 after 12, 6e-10 after 20); the
    default 16 gives ~1e-7 there and 2.4e-8 for 8 Kroupa bins of equal numbers,
    but widely spread components contract slower (m_j = 0.3, 1, 3 with M_j =
    0.5, 0.3, 0.2: 6e-3 after 16, 1e-15 after 60): `mass_fraction_error`
    reports it, and `num_iterations` raises it. Every output is
    differentiable in W0, g, delta, m_j and M_j: the derivative of the fixed
    iterations, taken in forward mode in those few scalars
    (`progenax._forward_mode`), so reverse mode does not run the 16 solves backwards.

    **Arguments:** `W0` as in `solve_king_profile` (the potential of the total
    model; component $j$ has central potential $b_j W_0$); `m_j`, `M_j`: (K,) positive
    stellar masses and component masses (any units, only ratios matter); `g`;
    `delta` >= 0 (0.5: equipartition-like).

    **Returns:** a `MultiMassKingProfile`.
    """
    num_iterations = check_static_int("num_iterations", num_iterations, 1)
    check_scalar("W0", W0)
    W0 = check_range("W0", W0, lower=W0_MIN, upper=W0_MAX, lower_inclusive=True, upper_inclusive=True)
    g = checked_g(g)
    delta = check_range("delta", delta, lower=0.0, lower_inclusive=True)
    m_j = check_range("m_j", m_j, lower=0.0)
    M_j = check_range("M_j", M_j, lower=0.0, lower_inclusive=True)
    if m_j.ndim != 1 or m_j.shape != M_j.shape:
        raise ValueError(f"m_j and M_j must be 1-D of the same length, got {m_j.shape} and {M_j.shape}")
    dtype = jnp.result_type(W0, g, m_j)
    W0, delta, m_j, M_j = (x.astype(dtype) for x in (W0, delta, m_j, M_j))
    g = static_or_array(g, dtype)
    target = M_j / jnp.sum(M_j)
    m_mean = jnp.sum(M_j) / jnp.sum(M_j / m_j)
    b = (m_j / m_mean) ** (2.0 * delta)
    s_grid = jnp.linspace(np.log(_R_MIN), np.log(r_max), num_points - 1, dtype=dtype)

    traced = {"W0": W0, "b": b, "target": target, "s_grid": s_grid, "g": _traced_order(g)}
    static = (num_iterations, num_points, g if traced["g"] is None else None)
    kappa = _central_fractions(static, traced)
    W_nodes, z_nodes, q_nodes, m_nodes = _solve_multimass_ode(W0, g, kappa, b, s_grid, num_points)

    zero = jnp.zeros((1,), dtype)
    r = jnp.concatenate([zero, jnp.exp(s_grid)])
    W_raw = jnp.concatenate([W0[None], W_nodes])
    mass_j = jnp.concatenate([jnp.zeros((1, b.shape[0]), dtype), m_nodes], axis=0).T
    density_j = _component_density(W_raw, W0, g, kappa, b).T
    mass = jnp.concatenate([zero, -4.0 * np.pi / 9.0 * z_nodes])
    total_mass_j = mass_j[:, -1]
    achieved = total_mass_j / jnp.sum(total_mass_j)
    crossed = W_raw <= 0
    k = jnp.clip(jnp.argmax(crossed), 2, num_points - 1)
    w_in, w_out = W_raw[k - 1], W_raw[k]
    t = w_in / (w_in - w_out)
    r_t = 1.0 / (1.0 / r[k - 1] + t * (1.0 / r[k] - 1.0 / r[k - 1]))
    dmass_j = 4.0 * np.pi * density_j * r**2
    r_h_j = jax.vmap(lambda m, dm: _half_radius(r, m, dm, num_points))(mass_j, dmass_j)
    r_h = _half_radius(r, mass, jnp.sum(dmass_j, axis=0), num_points)
    profile = MultiMassKingProfile(
        r=r,
        W=jnp.maximum(W_raw, 0.0),
        W_raw=W_raw,
        mass=mass,
        mass_j=mass_j,
        density_j=density_j,
        total_mass=mass[-1],
        total_mass_j=total_mass_j,
        r_t=r_t,
        r_h=r_h,
        r_h_j=r_h_j,
        c=jnp.log10(r_t),
        W0=W0,
        g=g,
        b_j=b,
        mass_fraction_error=jnp.max(jnp.abs(safe_divide(achieved, target) - 1.0)),
    )
    return error_if(profile, ~jnp.any(crossed), MULTIMASS_TOO_LARGE_MESSAGE)


def _half_radius(r: Array, mass: Array, dmass: Array, num_points: int) -> Array:
    """Radius enclosing half of mass[-1], on the cubic Hermite interpolant."""
    half = 0.5 * mass[-1]
    j = jnp.clip(jnp.searchsorted(jax.lax.stop_gradient(mass), jax.lax.stop_gradient(half)), 1, num_points - 1)
    ra, rb, ma, mb, da, db = r[j - 1], r[j], mass[j - 1], mass[j], dmass[j - 1], dmass[j]
    return solve_increasing(
        lambda x: cubic_hermite(x, ra, rb, ma, mb, da, db), half, ra, rb, num_steps=_N_HALF_MASS_STEPS, F_lo=ma, F_hi=mb
    )


def _row_searchsorted(table: Array, rows: Array, targets: Array) -> Array:
    """For each target, the first column k >= 1 of its row with table[row, k] > target
    (clamped to the last column): a fixed bisection, index decisions only."""
    size = table.shape[1]
    table, targets = jax.lax.stop_gradient(table), jax.lax.stop_gradient(targets)
    lo = jnp.zeros(targets.shape, jnp.int32)
    hi = jnp.full(targets.shape, size - 1, jnp.int32)
    for _ in range(int(np.ceil(np.log2(size)))):
        mid = (lo + hi) // 2
        go = table[rows, mid] <= targets
        lo = jnp.where(go, mid, lo)
        hi = jnp.where(go, hi, mid)
    return jnp.maximum(hi, 1)


def multimass_sample_radii(
    profile: MultiMassKingProfile, component: Array, u: Array, *, num_steps: int = 6
) -> tuple[Array, Array]:
    """Radii of stars of the given components (int array) with enclosed-mass
    fractions `u` of their component, and the total potential W there.

    As `king_sample_radii`, on each component's own M_j(r); no radius exceeds r_t.
    """
    p = profile
    inside = p.r < p.r_t
    r = jnp.where(inside, p.r, p.r_t)
    mass_j = jnp.where(inside, p.mass_j, p.total_mass_j[:, None])
    dmass_j = jnp.where(inside, 4.0 * np.pi * p.density_j * r**2, 0.0)
    mass = jnp.where(inside, p.mass, p.total_mass)
    W = jnp.where(inside, p.W_raw, 0.0)
    pos = r > 0
    dW = jnp.where(pos, -9.0 / (4.0 * np.pi) * mass / jnp.where(pos, r, 1.0) ** 2, 0.0)
    target = u * p.total_mass_j[component]
    k = _row_searchsorted(mass_j, component, target)
    ra, rb = r[k - 1], r[k]
    ma, mb = mass_j[component, k - 1], mass_j[component, k]
    da, db = dmass_j[component, k - 1], dmass_j[component, k]
    # Rolled, as in `king_sample_radii`: unrolled, XLA fused each step with
    # the steps before it into ever longer kernels.
    radius = solve_increasing(
        lambda x: cubic_hermite(x, ra, rb, ma, mb, da, db),
        target,
        ra,
        rb,
        num_steps=num_steps,
        F_lo=ma,
        F_hi=mb,
        unroll=False,
    )
    W_at = cubic_hermite(radius, ra, rb, W[k - 1], W[k], dW[k - 1], dW[k])
    return radius, jnp.maximum(W_at, 0.0)
