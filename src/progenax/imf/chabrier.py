r"""The Chabrier (2003) log-normal initial mass function.

Below the break mass $m_b$ (1 Msun) the number per unit $\ln m$ is a log-normal,
above it a power law continuous at $m_b$:

$$\frac{dN}{d\ln m} \propto \exp\!\left[-\frac{(\ln m - \ln m_c)^2}{2 s^2}\right]
\quad (m_{\min} \le m \le m_b), \qquad
\frac{dN}{dm} \propto m^{-\alpha} \quad (m_b < m \le m_{\max}),$$

with $s = \sigma \ln 10$ ($\sigma$ is the width in dex, as Chabrier quotes it).
Chabrier's (2003, Table 1) single-star disc IMF is $m_c = 0.079$ Msun,
$\sigma = 0.69$ dex and $\alpha = 2.3$ (his $x = 1.3$ in $dN/d\log m$); his
system IMF is $m_c = 0.22$, $\sigma = 0.57$ (`chabrier(system=True)`).

With $z = (\ln m - \ln m_c)/s$ and $\Phi$ the normal CDF, the log-normal part
holds $N_1 = s\sqrt{2\pi}\,[\Phi(z_b) - \Phi(z_0)]$ stars and
$M_1 = s\sqrt{2\pi}\,m_c e^{s^2/2}\,[\Phi(z_b - s) - \Phi(z_0 - s)]$ Msun (per
unit peak height); the tail $N_2 = C \int_{m_b}^{m_{\max}} m^{-\alpha} dm$ with
$C = e^{-z_b^2/2} m_b^{\alpha - 1}$ for continuity. Sampling is an exact
inverse CDF in both parts (`ndtri` below $m_b$, the power-law inverse above), so
masses are differentiable in $m_c$, $\sigma$, $\alpha$, $m_{\min}$ and
$m_{\max}$ (a star's part is chosen by its uniform variate: the gradient flows
through the masses, never a branch).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from .._types import Array, ArrayLike, Key, Scalar
from ..sampling import ndtri
from ..validation import check_range, error_if
from .power_law import _segment_integral, log1p_frac_over_x

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_LN10 = math.log(10.0)


_RECORDED = ("m_c", "sigma", "alpha", "m_min", "m_break", "m_max")
"""The fields a cluster's `params` record, as `imf_<field>` (`ChabrierIMF.record`)."""


class ChabrierIMF(eqx.Module):
    r"""Chabrier (2003) log-normal IMF with a power-law tail above `m_break`.

    **Fields** (all differentiable): `m_c` (characteristic mass, Msun, > 0),
    `sigma` (log-normal width in dex, > 0), `alpha` (number slope $dN/dm \propto
    m^{-\alpha}$ above `m_break`, in (0, 10)), `m_min` < `m_break` < `m_max`
    (Msun). Use `chabrier()` for Chabrier's values.
    """

    m_c: Array
    sigma: Array
    alpha: Array
    m_min: Array
    m_break: Array
    m_max: Array

    def __init__(self, m_c=0.079, sigma=0.69, alpha=2.3, m_min=0.08, m_break=1.0, m_max=100.0):
        self.m_c = check_range("m_c", m_c, lower=0.0)
        self.sigma = check_range("sigma", sigma, lower=0.0)
        self.alpha = check_range("alpha", alpha, lower=0.0, upper=10.0)
        m_min = check_range("m_min", m_min, lower=0.0)
        m_break = check_range("m_break", m_break, lower=0.0)
        m_max = check_range("m_max", m_max, lower=0.0)
        unordered = (m_min >= m_break) | (m_break >= m_max)
        message = "the masses must satisfy m_min < m_break < m_max"
        if isinstance(unordered, jax.core.Tracer):
            m_min = error_if(m_min, unordered, message)
        elif bool(unordered):
            raise ValueError(f"{message}, got {float(m_min)}, {float(m_break)}, {float(m_max)}")
        self.m_min, self.m_break, self.m_max = m_min, m_break, m_max

    # -- the two parts -------------------------------------------------------------
    def _s(self) -> Array:
        return self.sigma * _LN10

    def _z(self, m: Array) -> Array:
        return (jnp.log(m) - jnp.log(self.m_c)) / self._s()

    def _tail_coefficient(self) -> Array:
        """C: dN/dm = C m^-alpha above m_b, with the log-normal's peak height 1."""
        return jnp.exp(-0.5 * self._z(self.m_break) ** 2) * self.m_break ** (self.alpha - 1.0)

    def _numbers(self) -> tuple[Array, Array]:
        s = self._s()
        low = s * _SQRT_2PI * (ndtr(self._z(self.m_break)) - ndtr(self._z(self.m_min)))
        high = self._tail_coefficient() * _segment_integral(self.m_break, self.m_max, -self.alpha)
        return low, high

    def _masses(self) -> tuple[Array, Array]:
        s = self._s()
        shift = self.m_c * jnp.exp(0.5 * s**2)
        lognormal = ndtr(self._z(self.m_break) - s) - ndtr(self._z(self.m_min) - s)
        low = s * _SQRT_2PI * shift * lognormal
        high = self._tail_coefficient() * _segment_integral(self.m_break, self.m_max, 1.0 - self.alpha)
        return low, high

    # -- public API -----------------------------------------------------------------
    def pdf(self, m: ArrayLike) -> Array:
        """Normalised dN/dm (Msun^-1) at `m`, zero outside [m_min, m_max]."""
        m = jnp.asarray(m)
        inside = (m >= self.m_min) & (m <= self.m_max)
        m_safe = jnp.where(inside, m, self.m_break)
        low = jnp.exp(-0.5 * self._z(m_safe) ** 2) / m_safe
        high = self._tail_coefficient() * m_safe ** (-self.alpha)
        total = sum(self._numbers())
        return jnp.where(inside, jnp.where(m_safe <= self.m_break, low, high) / total, 0.0)

    def cdf(self, m: ArrayLike) -> Array:
        """Fraction of stars with mass below `m`."""
        m = jnp.clip(jnp.asarray(m), self.m_min, self.m_max)
        n_low, n_high = self._numbers()
        m_lo = jnp.minimum(m, self.m_break)
        m_hi = jnp.maximum(m, self.m_break)
        below = self._s() * _SQRT_2PI * (ndtr(self._z(m_lo)) - ndtr(self._z(self.m_min)))
        above = self._tail_coefficient() * _segment_integral(self.m_break, m_hi, -self.alpha)
        return (below + above) / (n_low + n_high)

    def mean_mass(self) -> Scalar:
        """Mean stellar mass in Msun (0.6045 for `chabrier()` over 0.08-100 Msun)."""
        return sum(self._masses()) / sum(self._numbers())

    def icdf(self, u: ArrayLike) -> Array:
        r"""The mass below which a fraction `u` of stars lie (exact in both parts).

        Each part is evaluated at a safe stand-in where it is not selected, and
        the normal quantile never sees 0 or 1 (a narrow log-normal puts
        $\Phi(z_b)$ at 1.0 in floating point), so no inf or NaN reaches a gradient.
        """
        u = jnp.asarray(u)
        n_low, n_high = self._numbers()
        f_low = n_low / (n_low + n_high)
        low = u < f_low
        eps = jnp.finfo(f_low.dtype).eps
        # Log-normal part: Phi(z) runs linearly from Phi(z_0) to Phi(z_b).
        p0, pb = ndtr(self._z(self.m_min)), ndtr(self._z(self.m_break))
        w = jnp.where(low, u / jnp.where(f_low > 0, f_low, 1.0), 0.5)
        p = jnp.clip(p0 + jnp.clip(w, 0.0, 1.0) * (pb - p0), eps, 1.0 - eps)
        m_low = jnp.clip(self.m_c * jnp.exp(self._s() * ndtri(p)), self.m_min, self.m_break)
        # Power-law tail from m_b to m_max.
        rest = 1.0 - f_low
        v = jnp.where(low, 0.5, (u - f_low) / jnp.where(rest > 0, rest, 1.0))
        ratio = log1p_frac_over_x(jnp.clip(v, 0.0, 1.0), 1.0 - self.alpha, jnp.log(self.m_max / self.m_break))
        return jnp.where(low, m_low, self.m_break * jnp.exp(ratio))

    def sample(self, key: Key, sample_shape: tuple[int, ...] = ()) -> Array:
        """Draw masses (Msun) by inverse CDF of uniform variates."""
        return self.icdf(jax.random.uniform(key, sample_shape, self.m_c.dtype))

    def record(self) -> dict[str, Array]:
        """What a built cluster's `params` record about this IMF (`imf_<field>`)."""
        return {f"imf_{name}": getattr(self, name) for name in _RECORDED}

    @classmethod
    def from_record(cls, params: dict) -> ChabrierIMF | None:
        """The IMF a cluster's `params` recorded (`record`), or None if they hold none."""
        if not all(f"imf_{name}" in params for name in _RECORDED):
            return None
        return cls(**{name: float(np.asarray(params[f"imf_{name}"])) for name in _RECORDED})


def chabrier(
    *,
    system: bool = False,
    alpha: ArrayLike = 2.3,
    m_min: ArrayLike = 0.08,
    m_max: ArrayLike = 100.0,
) -> ChabrierIMF:
    """Chabrier (2003, Table 1) IMF: single stars (m_c = 0.079 Msun, sigma = 0.69 dex)
    or, with `system=True`, unresolved systems (m_c = 0.22 Msun, sigma = 0.57 dex);
    slope `alpha` above 1 Msun, over [m_min, m_max] Msun."""
    m_c, sigma = (0.22, 0.57) if system else (0.079, 0.69)
    return ChabrierIMF(m_c, sigma, alpha, m_min, 1.0, m_max)
