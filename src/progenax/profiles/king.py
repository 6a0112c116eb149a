r"""Isotropic lowered-isothermal models: Woolley ($g=0$), King ($g=1$), Wilson ($g=2$).

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
with $q$ the potential-energy integral $\int M\,dM/r$, by diffrax's Tsit5 with a
fixed step list (`StepTo`) equal to the output grid: a log-spaced grid from
$r_{\min} = 10^{-4}$ to `r_max`, started from the series
$W = W_0 - \tfrac32 r^2 + \tfrac{27}{40}\,\frac{d\ln\hat\rho}{dW}\big|_{W_0} r^4$
(the $r = 0$ singularity is never evaluated) and with the node $r = 0$ prepended.
The number of steps is static, so the solve has a fixed cost and differentiates
(reverse mode, through diffrax's checkpointed adjoint) with respect to $W_0$.

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
At $g = 0$ only the one-sided derivative is meaningful. Anisotropy ($r_a$) is not
implemented.

**Range.** $r_t$ grows steeply with $W_0$ and $g$ (and diverges as $g \to 3.5$):
with the default `r_max` = $10^5$, King models reach $W_0 = 20$ ($c \approx 4.5$),
but e.g. $g = 3$ needs $W_0 \lesssim 3.5$ (3 works, 4 does not); such a call raises (eagerly, or
through `equinox.error_if` under jit) rather than returning a wrong $r_t$.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammainc, gammaln

from .._types import Array, ArrayLike
from ..sampling import solve_increasing
from ..validation import check_range

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
    """A solved isotropic lowered-isothermal model on a fixed radial grid.

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


def king_density_of_W(W: ArrayLike, g: ArrayLike) -> Array:
    r"""Unnormalised $\hat\rho(W) = e^W P(g + 3/2, W)$, 0 for $W \le 0$ (gradient-safe)."""
    W = jnp.asarray(W)
    pos = W > 0
    Ws = jnp.where(pos, W, 1.0)
    return jnp.where(pos, jnp.exp(Ws) * gammainc(g + 1.5, Ws), 0.0)


def _dlnrho_dW(W: Array, g: Array) -> Array:
    """d ln rho / dW at W > 0: 1 + W^(a-1) e^(-W) / (Gamma(a) P(a, W)), a = g + 3/2."""
    a = g + 1.5
    return 1.0 + jnp.exp((a - 1.0) * jnp.log(W) - W - gammaln(a)) / gammainc(a, W)


def solve_king_profile(
    W0: ArrayLike,
    g: ArrayLike = 1.0,
    *,
    num_points: int = 2048,
    r_max: float = 1e5,
) -> KingProfile:
    r"""Solve Poisson's equation for an isotropic lowered-isothermal model.

    **Arguments:**

    - `W0`: central dimensionless potential, $10^{-3} \le W_0 \le 20$ (differentiable).
    - `g`: truncation index, $0 \le g < 3.5$ (0 Woolley, 1 King, 2 Wilson).
    - `num_points`: grid nodes, r = 0 included (static, >= 64). The ODE takes one
      Tsit5 step per node interval in ln r.
    - `r_max`: outer end of the grid in King radii (static); must exceed r_t
      (checked: a model that has not crossed W = 0 by r_max raises).

    **Returns:** a `KingProfile`.
    """
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)) or num_points < 64:
        raise ValueError(f"num_points must be an int >= 64 (static), got {num_points!r}")
    if not (isinstance(r_max, (int, float)) and np.isfinite(r_max) and r_max > 10.0):
        raise ValueError(f"r_max must be a finite float > 10 (static), got {r_max!r}")
    W0 = check_range("W0", W0, lower=W0_MIN, upper=W0_MAX, lower_inclusive=True, upper_inclusive=True)
    g = check_range("g", g, lower=0.0, upper=G_MAX, lower_inclusive=True)
    dtype = jnp.result_type(W0, g)
    W0, g = W0.astype(dtype), g.astype(dtype)

    s_grid = jnp.linspace(np.log(_R_MIN), np.log(r_max), num_points - 1, dtype=dtype)
    rho0 = king_density_of_W(W0, g)
    four_pi = 4.0 * np.pi

    def rhs(s, y, args):
        W, z, q = y
        r = jnp.exp(s)
        rho = king_density_of_W(W, g) / rho0
        mass = -four_pi / 9.0 * z
        return (z / r, -9.0 * rho * r**3, mass * four_pi * rho * r**2)

    # Series start at r = R_MIN: W = W0 - 1.5 r^2 + k r^4, k = (27/40) dln rho/dW.
    r1 = _R_MIN
    k4 = 27.0 / 40.0 * _dlnrho_dW(W0, g)
    W_start = W0 - 1.5 * r1**2 + k4 * r1**4
    z_start = r1**2 * (-3.0 * r1 + 4.0 * k4 * r1**3)  # r^2 W'
    m_start = -four_pi / 9.0 * z_start
    q_start = 0.6 * m_start**2 / r1  # uniform sphere: int M dM / r = (3/5) M^2 / r
    y0 = (W_start, z_start.astype(dtype), jnp.asarray(q_start, dtype))

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Tsit5(),
        t0=s_grid[0],
        t1=s_grid[-1],
        dt0=None,
        y0=y0,
        saveat=diffrax.SaveAt(ts=s_grid),
        stepsize_controller=diffrax.StepTo(ts=s_grid),
        max_steps=num_points,
        adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=num_points),
    )
    W_nodes, z_nodes, q_nodes = sol.ys

    zero = jnp.zeros((1,), dtype)
    r = jnp.concatenate([zero, jnp.exp(s_grid)])
    W_raw = jnp.concatenate([W0[None], W_nodes])
    W = jnp.maximum(W_raw, 0.0)
    density = king_density_of_W(W_raw, g) / rho0
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
    ra, rb = r[j - 1], r[j]
    ma, mb, da, db = mass[j - 1], mass[j], dmass[j - 1], dmass[j]

    def hermite(x):
        h = rb - ra
        tt = (x - ra) / h
        h00 = (1 + 2 * tt) * (1 - tt) ** 2
        h10 = tt * (1 - tt) ** 2
        h01 = tt**2 * (3 - 2 * tt)
        h11 = tt**2 * (tt - 1)
        return h00 * ma + h10 * h * da + h01 * mb + h11 * h * db

    r_h = solve_increasing(hermite, half, ra, rb, num_steps=_N_HALF_MASS_STEPS, F_lo=ma, F_hi=mb)

    r_v = total_mass**2 / (2.0 * q_nodes[-1])
    c = jnp.log10(r_t)
    profile = KingProfile(
        r=r, W=W, W_raw=W_raw, density=density, mass=mass, total_mass=total_mass,
        r_t=r_t, r_h=r_h, r_v=r_v, c=c, W0=W0, g=g,
    )
    # Tied to every leaf, so the check fires whichever output a jitted caller keeps.
    return eqx.error_if(profile, ~jnp.any(crossed), "r_max is smaller than the tidal radius; increase r_max")
