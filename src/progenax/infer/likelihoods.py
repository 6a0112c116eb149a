r"""Exact per-star log-densities of the Plummer model (the unbinned likelihood).

With Plummer radius $a = r_h\sqrt{2^{2/3}-1}$ (pc; `plummer_scale_radius`),
total mass $M$ (Msun), $G$ in pc Msun$^{-1}$ (km/s)$^2$ and virial ratio $Q$:

**Positions** (pc). In 3D the number density of stars per unit volume is
$$p(\mathbf x) = \frac{3}{4\pi a^3}\Bigl(1 + \frac{r^2}{a^2}\Bigr)^{-5/2}
\quad[\mathrm{pc}^{-3}],$$
and projected on the sky ($R^2 = x^2 + y^2$) the surface density per unit area is
$$p(R) = \frac{1}{\pi a^2}\Bigl(1 + \frac{R^2}{a^2}\Bigr)^{-2} = \frac{a^2}{\pi b^4},
\qquad b^2 = R^2 + a^2 \quad[\mathrm{pc}^{-2}].$$

**Velocities** (km/s). The isotropic Plummer DF $f(E) \propto (-E)^{7/2}$ gives,
at a star's position, the velocity density
$$p(\mathbf v \mid r) = \frac{C}{w^3}\Bigl(1 - \frac{v^2}{w^2}\Bigr)^{7/2}
\ \text{for } v < w,\ 0 \text{ beyond},\qquad C = \frac{128}{7\pi^2}
\quad[(\mathrm{km/s})^{-3}],$$
whose edge $w = \sqrt{2Q}\,v_e(r)$ is the escape speed
$v_e = \sqrt{2GM/\sqrt{r^2 + a^2}}$ scaled by $\sqrt{2Q}$ ($Q = 1/2$ is the
equilibrium DF; any $Q$ keeps its shape, with $\langle v^2\rangle \propto Q$). $C$
follows from $4\pi\int_0^1 q^2(1-q^2)^{7/2}dq = 7\pi^2/128$. A speed at or beyond
the edge has log-density $-\infty$ (and zero gradient).

**Projected positions with 3D velocities.** The unknown depth $z$ is integrated
out: with $z = b\tan\theta$, $r^2 + a^2 = b^2\sec^2\theta$ and
$w_0^2 = 4 Q G M / b$,
$$p(R, \mathbf v) = \int p(\mathbf x)\,p(\mathbf v\mid r)\,dz
 = \frac{3 a^2 C}{4\pi b^4 w_0^3}\, I\!\Bigl(\frac{v^2}{w_0^2}\Bigr),\qquad
I(u) = 2\int_0^{\arccos u} \frac{(\cos\theta - u)^{7/2}}{\cos^2\theta}\,d\theta,$$
for $u < 1$ (zero beyond), evaluated with fixed Gauss-Legendre nodes after a
substitution that smooths its end point (`depth_integral`).

**Masses** (Msun): the Kroupa (2001) IMF with high-mass slope $\alpha$,
$\log p(m) = \log \xi(m)$ with $\xi$ normalised over 0.08-100 Msun
(`progenax.imf.kroupa`), in Msun$^{-1}$.

All functions are elementwise over stars, differentiable in $a$, $M$, $Q$ and
$\alpha$, and safe at $r = 0$ and at the velocity edge (double-where).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..imf import kroupa
from ..profiles.plummer import plummer_escape_speed_squared

VELOCITY_NORM = 128.0 / (7.0 * np.pi**2)
"""C in p(v | r) = C w^-3 (1 - v^2/w^2)^(7/2)."""

_I_NODES, _I_WEIGHTS = np.polynomial.legendre.leggauss(32)


def plummer_position_logpdf(positions: ArrayLike, a: ArrayLike) -> Array:
    """log p(x) in pc^-3 for 3D positions (n, 3) about the centre; Plummer radius `a` (pc)."""
    x = jnp.asarray(positions)
    r2 = jnp.sum(x**2, axis=-1)
    return jnp.log(3.0 / (4.0 * np.pi)) - 3.0 * jnp.log(a) - 2.5 * jnp.log1p(r2 / a**2)


def plummer_projected_logpdf(positions: ArrayLike, a: ArrayLike) -> Array:
    """log p(x, y) in pc^-2 for projected positions (n, 2): the Plummer surface density."""
    x = jnp.asarray(positions)
    R2 = jnp.sum(x**2, axis=-1)
    return -jnp.log(np.pi) - 2.0 * jnp.log(a) - 2.0 * jnp.log1p(R2 / a**2)


def _log_edge_factor(u: Array, power: float) -> Array:
    """power * log(1 - u) for u < 1, -inf for u >= 1, gradient-safe (double where)."""
    inside = u < 1.0
    u_safe = jnp.where(inside, u, 0.0)
    return jnp.where(inside, power * jnp.log1p(-u_safe), -jnp.inf)


def plummer_velocity_logpdf(
    velocities: ArrayLike, r: ArrayLike, a: ArrayLike, total_mass: ArrayLike, Q: ArrayLike, G: ArrayLike
) -> Array:
    """log p(v | r) in (km/s)^-3 for 3D velocities (n, 3) at 3D radii r (n,) in pc.

    The edge speed is w = sqrt(2Q) v_e(r), v_e^2 = 2 G M / sqrt(r^2 + a^2).
    """
    v2 = jnp.sum(jnp.asarray(velocities) ** 2, axis=-1)
    w2 = 2.0 * Q * plummer_escape_speed_squared(jnp.asarray(r) ** 2, total_mass, a, G)
    return np.log(VELOCITY_NORM) - 1.5 * jnp.log(w2) + _log_edge_factor(v2 / w2, 3.5)


def depth_integral(u: ArrayLike, power: float = 3.5) -> Array:
    r"""$I_p(u) = 2\int_0^{\arccos u} (\cos\theta - u)^{p} \sec^2\theta\, d\theta$ for u in [0, 1).

    $p = 7/2$ for 3D velocities, $9/2$ for line-of-sight ones
    (`progenax.infer.los`). With $\theta = \theta_{\max}(1 - s^2)$ the integrand's
    $(\theta_{\max} - \theta)^{p}$ end becomes a smooth $s^{2p}$, and 32 fixed
    Gauss-Legendre nodes in s on [0, 1] reach a relative error below 1e-12.
    Returns 0 for u >= 1.
    """
    u = jnp.asarray(u)
    inside = u < 1.0
    u_safe = jnp.where(inside, u, 0.5)
    theta_max = jnp.arccos(u_safe)[..., None]
    s = 0.5 * (1.0 + _I_NODES)
    theta = theta_max * (1.0 - s**2)
    c = jnp.cos(theta)
    integrand = jnp.clip(c - u_safe[..., None], 0.0) ** power / c**2 * 2.0 * theta_max * s
    value = 2.0 * 0.5 * jnp.sum(_I_WEIGHTS * integrand, axis=-1)
    return jnp.where(inside, value, 0.0)


def plummer_projected_velocity_logpdf(
    positions: ArrayLike, velocities: ArrayLike, a: ArrayLike, total_mass: ArrayLike, Q: ArrayLike, G: ArrayLike
) -> Array:
    """log p(x, y, v) in pc^-2 (km/s)^-3: projected positions (n, 2), 3D velocities (n, 3).

    The depth z along the line of sight is integrated out (`depth_integral`).
    """
    R2 = jnp.sum(jnp.asarray(positions) ** 2, axis=-1)
    b2 = R2 + a**2
    w02 = 2.0 * Q * plummer_escape_speed_squared(R2, total_mass, a, G)
    u = jnp.sum(jnp.asarray(velocities) ** 2, axis=-1) / w02
    inside = u < 1.0
    log_i = jnp.log(jnp.where(inside, depth_integral(jnp.where(inside, u, 0.5)), 1.0))
    log_i = jnp.where(inside, log_i, -jnp.inf)
    return (
        np.log(3.0 * VELOCITY_NORM / (4.0 * np.pi)) + 2.0 * jnp.log(a) - 2.0 * jnp.log(b2) - 1.5 * jnp.log(w02) + log_i
    )


def kroupa_logpdf(masses: ArrayLike, alpha: ArrayLike) -> Array:
    """log xi(m) in Msun^-1 under the Kroupa (2001) IMF with high-mass slope alpha.

    -inf outside [0.08, 100] Msun.
    """
    m = jnp.asarray(masses)
    pdf = kroupa(alpha).pdf(m)
    positive = pdf > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, pdf, 1.0)), -jnp.inf)


def kroupa_log_likelihood(masses: ArrayLike, alpha: ArrayLike) -> Array:
    r"""$\sum_i \log\xi(m_i \mid \alpha)$ under the Kroupa IMF, from sufficient statistics.

    Within segment k, $\log\xi(m) = \log\xi(m_k) - \alpha_k \log(m / m_k)$, so the sum
    needs only the number of stars and the sum of $\log m$ in each segment (0.08-0.5
    and 0.5-100 Msun) and two evaluations of the pdf: the same value as summing
    `kroupa_logpdf`, at O(1) cost per new alpha instead of O(n). Masses must lie in
    [0.08, 100] Msun (checked by the model).
    """
    m = jnp.asarray(masses)
    imf = kroupa(alpha)
    m_low, m_break = imf.breaks[0], imf.breaks[1]
    high = m >= m_break
    log_m = jnp.log(m)
    n_high = jnp.sum(high)
    n_low = m.shape[0] - n_high
    s_high = jnp.sum(jnp.where(high, log_m, 0.0))
    s_low = jnp.sum(log_m) - s_high
    low_part = n_low * jnp.log(imf.pdf(m_low)) - imf.slopes[0] * (s_low - n_low * jnp.log(m_low))
    high_part = n_high * jnp.log(imf.pdf(m_break)) - imf.slopes[1] * (s_high - n_high * jnp.log(m_break))
    return low_part + high_part
