r"""The piecewise log-density PDF of Burkhart (2018) and Burkhart & Mocz (2019).

*Experimental.* With $s = \ln(\rho/\rho_0)$ the PDF is a lognormal below a
transition $s_t$ and a power-law (exponential in $s$) tail above it:

$$
p(s) = \frac{1}{\mathcal N}\begin{cases}
\dfrac{1}{\sqrt{2\pi}\,\sigma_s}\exp\!\left[-\dfrac{(s - s_0)^2}{2\sigma_s^2}\right], & s < s_t,\\[2ex]
p_t\, e^{-\alpha (s - s_t)}, & s \ge s_t,
\end{cases}
\qquad \sigma_s^2 = \ln(1 + b^2 \mathcal M^2),
$$

with $\mathcal M$ the sonic Mach number and $b$ the turbulence forcing parameter.

**Continuity.** Matching the PDF and its slope at $s_t$ gives
$-(s_t - s_0)/\sigma_s^2 = -\alpha$, i.e. $s_t = s_0 + \alpha\sigma_s^2$, and
$p_t = \varphi(\alpha\sigma_s)/\sigma_s$ ($\varphi$, $\Phi$: the standard normal
PDF and CDF). The normalisation is then

$$\mathcal N = G(\alpha\sigma_s), \qquad G(x) = \Phi(x) + \frac{\varphi(x)}{x}.$$

**Mean density.** With the lognormal's usual mean $s_0 = -\sigma_s^2/2$ the tail
adds mass, and $\langle e^s\rangle \ne 1$. Here $\rho_0$ is the volume-weighted
mean density, so $s_0 = -\sigma_s^2/2 + \delta$ with the shift

$$\langle e^s \rangle = e^{\delta}\,\frac{G((\alpha - 1)\sigma_s)}{G(\alpha\sigma_s)} = 1
\quad\Longrightarrow\quad
\delta = \ln G(\alpha\sigma_s) - \ln G((\alpha - 1)\sigma_s) \le 0,$$

which is finite only for $\alpha > 1$ (for $\alpha \le 1$ the tail holds infinite
mass). Without the shift, $s_t = (\alpha - \tfrac12)\sigma_s^2$ as in BM19; with
it, $s_t = (\alpha - \tfrac12)\sigma_s^2 + \delta$. The shift leaves the width
$\sigma_s$ of the lognormal part and the tail slope $\alpha$ unchanged.

**Inverse CDF.** With $F_t = \Phi(\alpha\sigma_s)/\mathcal N$ the mass below the
transition,

$$
s(u) = \begin{cases}
s_0 + \sigma_s\,\Phi^{-1}(u\,\mathcal N), & u < F_t,\\
s_t - \dfrac{1}{\alpha}\left[\ln(1 - u) + \ln\dfrac{\alpha\,\mathcal N}{p_t}\right], & u \ge F_t,
\end{cases}
$$

both smooth in $(\mathcal M, b, \alpha)$; `quantile` takes $1 - u$ separately so
the far tail keeps full precision.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
from jax.scipy.special import ndtr

from .._types import Array, ArrayLike, Scalar
from ..sampling import ndtri
from ..validation import check_range

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def log_density_variance(mach: ArrayLike, b: ArrayLike) -> Array:
    r"""$\sigma_s^2 = \ln(1 + b^2\mathcal M^2)$ (Padoan & Nordlund; Federrath et al. 2008)."""
    mach = jnp.asarray(mach)
    return jnp.log1p((jnp.asarray(b) * mach) ** 2)


def _log_normal_pdf(x: Array) -> Array:
    return -0.5 * x**2 - _LOG_SQRT_2PI


def _log_g(x: Array) -> Array:
    r"""$\ln G(x) = \ln[\Phi(x) + \varphi(x)/x]$ for $x > 0$."""
    return jnp.log(ndtr(x) + jnp.exp(_log_normal_pdf(x)) / x)


class PiecewiseLogDensityPDF(eqx.Module):
    r"""The lognormal + power-law PDF of $s = \ln(\rho/\rho_0)$ (see the module docstring).

    Build it with `PiecewiseLogDensityPDF.from_turbulence(mach, alpha, b)`.

    **Fields:** `sigma` ($\sigma_s$), `alpha` (tail slope), `s0` (mean of the
    lognormal part), `s_t` (transition), `log_norm` ($\ln\mathcal N$).
    """

    sigma: Scalar
    alpha: Scalar
    s0: Scalar
    s_t: Scalar
    log_norm: Scalar

    @classmethod
    def from_turbulence(cls, mach: ArrayLike, alpha: ArrayLike, b: ArrayLike) -> PiecewiseLogDensityPDF:
        """The PDF for Mach number `mach` (> 0), tail slope `alpha` (> 1) and forcing `b` in (0, 1].

        Out-of-range values raise `ValueError` (concrete) or through `equinox.error_if` (traced).
        """
        mach = check_range("mach", mach, lower=0.0)
        alpha = check_range("alpha", alpha, lower=1.0)
        b = check_range("b", b, lower=0.0, upper=1.0, upper_inclusive=True)
        mach, alpha, b = jnp.broadcast_arrays(mach, alpha, b)
        sigma2 = log_density_variance(mach, b)
        sigma = jnp.sqrt(sigma2)
        log_norm = _log_g(alpha * sigma)
        shift = log_norm - _log_g((alpha - 1.0) * sigma)
        s0 = -0.5 * sigma2 + shift
        return cls(sigma=sigma, alpha=alpha, s0=s0, s_t=s0 + alpha * sigma2, log_norm=log_norm)

    @property
    def variance(self) -> Scalar:
        r"""$\sigma_s^2$ of the lognormal part."""
        return self.sigma**2

    @property
    def log_p_t(self) -> Scalar:
        r"""$\ln p_t$, the unnormalised PDF at $s_t$."""
        return _log_normal_pdf(self.alpha * self.sigma) - jnp.log(self.sigma)

    @property
    def transition_mass(self) -> Scalar:
        r"""$F_t = \Phi(\alpha\sigma_s)/\mathcal N$: the volume fraction below $s_t$."""
        return ndtr(self.alpha * self.sigma) * jnp.exp(-self.log_norm)

    def log_pdf(self, s: ArrayLike) -> Array:
        """ln p(s), volume-weighted."""
        s = jnp.asarray(s)
        lower = _log_normal_pdf((s - self.s0) / self.sigma) - jnp.log(self.sigma)
        upper = self.log_p_t - self.alpha * (s - self.s_t)
        return jnp.where(s < self.s_t, lower, upper) - self.log_norm

    def pdf(self, s: ArrayLike) -> Array:
        """p(s): the volume fraction per unit s."""
        return jnp.exp(self.log_pdf(s))

    def cdf(self, s: ArrayLike) -> Array:
        """The volume fraction with log-density below `s`."""
        s = jnp.asarray(s)
        lower = ndtr((jnp.minimum(s, self.s_t) - self.s0) / self.sigma)
        tail = jnp.exp(self.log_p_t) / self.alpha * -jnp.expm1(-self.alpha * jnp.maximum(s - self.s_t, 0.0))
        return (lower + tail) * jnp.exp(-self.log_norm)

    def mass_above(self, s: ArrayLike) -> Array:
        r"""Mass fraction $\int_s^\infty e^{x} p(x)\,dx$ (with $\langle e^s\rangle = 1$), for $s \ge s_t$."""
        s = jnp.asarray(s)
        log_tail = self.log_p_t + self.s_t - self.log_norm - jnp.log(self.alpha - 1.0)
        return jnp.exp(log_tail - (self.alpha - 1.0) * (s - self.s_t))

    def quantile(self, u: ArrayLike, u_complement: ArrayLike | None = None) -> Array:
        """s(u), the inverse CDF; `u_complement` = 1 - u, exact, if the caller has it."""
        u = jnp.asarray(u)
        uc = 1.0 - u if u_complement is None else jnp.asarray(u_complement)
        f_t = self.transition_mass
        below = u < f_t
        # Double-where: the lower branch sees only arguments inside (0, Phi(alpha sigma)].
        arg = jnp.where(below, u * jnp.exp(self.log_norm), 0.5)
        lower = self.s0 + self.sigma * ndtri(arg)
        uc_safe = jnp.where(below, 1.0, uc)
        upper = self.s_t - (jnp.log(uc_safe) + jnp.log(self.alpha) + self.log_norm - self.log_p_t) / self.alpha
        return jnp.where(below, lower, upper)
