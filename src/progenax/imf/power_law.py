r"""Multi-segment power-law initial mass functions.

$$\xi(m) = \frac{dN}{dm} = c_k\, m^{-\alpha_k}, \qquad m_k \le m < m_{k+1},$$

continuous at the breaks ($c_{k+1} = c_k\, m_{k+1}^{\alpha_{k+1}-\alpha_k}$) and
normalised to unit number over $[m_0, m_K]$. Slopes and breaks are differentiable.

Segment integrals use $\int_a^b m^{-\alpha} dm = a^{1-\alpha} L\, E_1((1-\alpha)L)$ with
$L = \ln(b/a)$ and $E_1(x) = (e^x - 1)/x$, evaluated with `expm1` and a series at
$x = 0$, so a slope of exactly 1 (number) or 2 (mass) is as safe as any other.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import Array, ArrayLike, Key, Scalar
from ..validation import error_if


def _series_threshold(x: Array) -> float:
    # Below this |x| the two-term series is exact to rounding: its error is
    # O(x^2 L^2) while the direct expm1(x)/x is exact except at x = 0 itself.
    return 1e-8 if x.dtype == jnp.float64 else 1e-4


def expm1_over_x(x: Array) -> Array:
    """(exp(x) - 1) / x, with the limit 1 at x = 0 (gradient-safe)."""
    small = jnp.abs(x) < _series_threshold(x)
    x_safe = jnp.where(small, 1.0, x)
    return jnp.where(small, 1.0 + 0.5 * x, jnp.expm1(x_safe) / x_safe)


def log1p_frac_over_x(v: Array, x: Array, L: Array) -> Array:
    """log1p(v (exp(x L) - 1)) / x, with its limit v L at x = 0.

    This is ln(m / a) for the within-segment inverse CDF at fraction v of a
    segment [a, a e^L] with number slope alpha = 1 - x.
    """
    small = jnp.abs(x) < _series_threshold(x)
    x_safe = jnp.where(small, 1.0, x)
    direct = jnp.log1p(v * jnp.expm1(x_safe * L)) / x_safe
    series = v * L + 0.5 * x * L**2 * v * (1.0 - v)
    return jnp.where(small, series, direct)


def _segment_integral(lo: Array, hi: Array, power: Array) -> Array:
    r"""$\int_{lo}^{hi} m^{\text{power}}\, dm$ for each segment, safe at power = -1."""
    L = jnp.log(hi / lo)
    x = 1.0 + power
    return lo**x * L * expm1_over_x(x * L)


class PowerLawIMF(eqx.Module):
    r"""A continuous multi-segment power-law IMF.

    **Fields:**

    - `breaks`: (K+1,) masses $0 < m_0 \le \dots \le m_K$ in Msun (ends included,
      $m_0 < m_K$; a segment of zero width holds no stars).
    - `slopes`: (K,) number slopes $\alpha_k$ with $dN/dm \propto m^{-\alpha_k}$.

    Use `kroupa()` and `salpeter()` for the presets.
    """

    breaks: Array
    slopes: Array

    def __init__(self, breaks: ArrayLike, slopes: ArrayLike):
        # The wider of the two's dtypes (Python numbers weak): a float32 slope
        # keeps the masses float32 when x64 is on.
        breaks, slopes = jnp.asarray(breaks), jnp.asarray(slopes)
        dtype = jnp.result_type(breaks, slopes, float)
        breaks, slopes = breaks.astype(dtype), slopes.astype(dtype)
        if breaks.ndim != 1 or slopes.ndim != 1 or breaks.shape[0] != slopes.shape[0] + 1:
            raise ValueError(
                f"breaks must have one more entry than slopes (got breaks {breaks.shape}, slopes {slopes.shape})"
            )
        unordered = (breaks[0] <= 0) | (breaks[0] >= breaks[-1]) | jnp.any(breaks[1:] < breaks[:-1])
        unordered |= ~jnp.all(jnp.isfinite(breaks))
        message = "the IMF's masses must be finite and satisfy 0 < m_min <= breaks <= m_max, with m_min < m_max"
        if isinstance(unordered, jax.core.Tracer):
            breaks = error_if(breaks, unordered, message)
        elif bool(unordered):
            raise ValueError(f"{message}, got {[float(b) for b in breaks]}")
        # Any finite slope is an IMF (0: flat, < 0: rising); NaN made every mass
        # NaN. Checked when concrete: a traced slope is a builder's `alpha`,
        # which the builder checks and names itself.
        if not isinstance(slopes, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(slopes))):
            raise ValueError(f"the IMF's slopes must be finite, got {[float(a) for a in slopes]}")
        self.breaks = breaks
        self.slopes = slopes

    # -- normalisation -----------------------------------------------------
    def _coefficients(self) -> Array:
        """c_k making xi continuous, with c_0 = 1 (before normalisation)."""
        steps = self.breaks[1:-1] ** (self.slopes[1:] - self.slopes[:-1])
        return jnp.concatenate([jnp.ones((1,), self.slopes.dtype), jnp.cumprod(steps)])

    def _segment_numbers(self) -> Array:
        c = self._coefficients()
        return c * _segment_integral(self.breaks[:-1], self.breaks[1:], -self.slopes)

    def _segment_masses(self) -> Array:
        c = self._coefficients()
        return c * _segment_integral(self.breaks[:-1], self.breaks[1:], 1.0 - self.slopes)

    @property
    def m_min(self) -> Scalar:
        return self.breaks[0]

    @property
    def m_max(self) -> Scalar:
        return self.breaks[-1]

    # -- public API ------------------------------------------------------------
    def pdf(self, m: ArrayLike) -> Array:
        """Normalised dN/dm at masses `m` (zero outside [m_min, m_max])."""
        m = jnp.asarray(m)
        k = self._segment_index(m)
        c = self._coefficients() / jnp.sum(self._segment_numbers())
        inside = (m >= self.m_min) & (m <= self.m_max)
        m_safe = jnp.where(inside, m, self.m_min)
        return jnp.where(inside, c[k] * m_safe ** (-self.slopes[k]), 0.0)

    def cdf(self, m: ArrayLike) -> Array:
        """Fraction of stars with mass below `m`."""
        m = jnp.asarray(m)
        m_clip = jnp.clip(m, self.m_min, self.m_max)
        k = self._segment_index(m_clip)
        numbers = self._segment_numbers()
        below = jnp.concatenate([jnp.zeros((1,), numbers.dtype), jnp.cumsum(numbers)])
        c = self._coefficients()
        partial = c[k] * _segment_integral(self.breaks[k], m_clip, -self.slopes[k])
        return (below[k] + partial) / below[-1]

    def mean_mass(self) -> Scalar:
        """Mean stellar mass in Msun: integral of m xi(m) over integral of xi(m)."""
        return jnp.sum(self._segment_masses()) / jnp.sum(self._segment_numbers())

    def sample(self, key: Key, sample_shape: tuple[int, ...] = ()) -> Array:
        """Draw masses by exact inverse CDF (no rejection, no root finding)."""
        u = jax.random.uniform(key, sample_shape, self.slopes.dtype)
        return self.icdf(u)

    def icdf(self, u: ArrayLike) -> Array:
        """Inverse CDF: the mass below which a fraction `u` of stars lie."""
        u = jnp.asarray(u)
        numbers = self._segment_numbers()
        edges = jnp.concatenate([jnp.zeros((1,), numbers.dtype), jnp.cumsum(numbers)])
        edges = edges / edges[-1]
        # A handful of edges: comparing with each beats a binary search, and the
        # segments' log-widths are taken once, not per star (n = 1e6: 28 -> 16 ms,
        # the same bits).
        k = jnp.searchsorted(edges, u, side="right", method="compare_all")
        k = jnp.clip(k - 1, 0, self.slopes.shape[0] - 1)
        width = edges[k + 1] - edges[k]
        v = jnp.clip((u - edges[k]) / width, 0.0, 1.0)
        log_widths = jnp.log(self.breaks[1:] / self.breaks[:-1])
        log_ratio = log1p_frac_over_x(v, 1.0 - self.slopes[k], log_widths[k])
        return self.breaks[k] * jnp.exp(log_ratio)

    def record(self) -> dict[str, Array]:
        """What a built cluster's `params` record about this IMF."""
        return {"imf_breaks": self.breaks, "imf_slopes": self.slopes}

    def _segment_index(self, m: Array) -> Array:
        k = jnp.searchsorted(self.breaks, m, side="right") - 1
        return jnp.clip(k, 0, self.slopes.shape[0] - 1)


def kroupa(
    alpha_high: ArrayLike = 2.3,
    *,
    m_min: ArrayLike = 0.08,
    m_break: ArrayLike = 0.5,
    m_max: ArrayLike = 100.0,
    alpha_low: ArrayLike = 1.3,
) -> PowerLawIMF:
    """Kroupa (2001) IMF: slope 1.3 below 0.5 Msun and `alpha_high` above.

    Over 0.08 to 100 Msun with alpha_high = 2.3 the mean mass is 0.5739 Msun.
    Other ends restrict that shape to [`m_min`, `m_max`]: a break outside them
    is clamped to the nearer end (`m_min = 1`: the 2.3 slope alone on 1-100 Msun).
    """
    m_min, m_break, m_max = jnp.broadcast_arrays(*map(jnp.asarray, (m_min, m_break, m_max)))
    return PowerLawIMF(
        jnp.stack([m_min, jnp.clip(m_break, m_min, jnp.maximum(m_min, m_max)), m_max]),
        jnp.stack(jnp.broadcast_arrays(*map(jnp.asarray, (alpha_low, alpha_high)))),
    )


def salpeter(alpha: ArrayLike = 2.35, *, m_min: ArrayLike = 0.1, m_max: ArrayLike = 100.0) -> PowerLawIMF:
    """Salpeter (1955) IMF: a single slope of 2.35 (0.1 to 100 Msun by default)."""
    return PowerLawIMF(
        jnp.stack(jnp.broadcast_arrays(*map(jnp.asarray, (m_min, m_max)))),
        jnp.reshape(jnp.asarray(alpha), (1,)),
    )
