r"""Birth distributions of periods, eccentricities and mass ratios.

Every distribution samples by its exact inverse CDF, on its own support or on a
sub-interval $[l, h]$ of it (`truncated_icdf`, used for the per-system physical
limits):

$$ x = F^{-1}\big(F(l) + u\,[F(h) - F(l)]\big), \qquad u \sim U(0, 1), $$

so the sample is differentiable in every continuous parameter and in the
limits, at a fixed cost (no rejection).

**Periods**, in $\ell = \log_{10}(P/\mathrm{day})$:

- `Kroupa95Period`: $f(\ell) = \eta\,(\ell - \ell_0)/(\delta + (\ell - \ell_0)^2)$ on
  $[\ell_0, \ell_1] = [1, 8.43]$, $\delta = 45$ (Kroupa 1995, MNRAS 277, 1491;
  $\eta \approx 2.5$ is the normalisation). $F(\ell) \propto
  \ln[1 + (\ell - \ell_0)^2/\delta]$ and
  $\ell = \ell_0 + \sqrt{\delta\,\mathrm{expm1}(p)}$ inverts it.
- `LogNormalPeriod`: Gaussian in $\ell$, mean 4.8 and deviation 2.3
  (Duquennoy & Mayor 1991, A&A 248, 485), cut to $(-\infty, 10]$ by default.
- `PowerLawPeriod`: $f(\ell) \propto \ell^{\pi}$, $\pi = -0.55$ on $[0.15, 5.5]$
  (Sana et al. 2012, Science 337, 444, O-type stars).

**Eccentricities**: `PowerLawEccentricity` $f(e) \propto e^{\eta}$ on
$[0, e_{\max}]$ (thermal $\eta = 1$, uniform $\eta = 0$, Sana et al. 2012
$\eta = -0.45$) and `CircularEccentricity` ($e = 0$).

**Mass ratios**: `PowerLawMassRatio` $f(q) \propto q^{\gamma}$ on
$[q_{\min}, q_{\max}]$ (uniform: $\gamma = 0$).

Names accepted by `BinaryPopulation` are in `PERIODS`, `ECCENTRICITIES` and
`MASS_RATIOS`. `"moe17"` (`Moe17`, in `moe17.py`) is not a one-dimensional
distribution: it draws periods, mass ratios and eccentricities jointly.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr

from .._types import Array, ArrayLike
from ..imf.power_law import expm1_over_x, log1p_frac_over_x
from ..sampling import ndtri
from .moe17 import Moe17


def _param(x: ArrayLike) -> Array:
    return jnp.asarray(x, jnp.result_type(float))


class AbstractDistribution(eqx.Module):
    """A one-dimensional distribution sampled by its inverse CDF.

    Subclasses give the support (`lower`, `upper`), a CDF `_cdf` that is 0 at
    `lower` and 1 at `upper` (any increasing function with those values) and
    its inverse `_icdf`.
    """

    @property
    @abc.abstractmethod
    def lower(self) -> Array: ...

    @property
    @abc.abstractmethod
    def upper(self) -> Array: ...

    @abc.abstractmethod
    def _cdf(self, x: Array) -> Array: ...

    @abc.abstractmethod
    def _icdf(self, p: Array) -> Array: ...

    def cdf(self, x: ArrayLike) -> Array:
        """Fraction below `x` (0 below the support, 1 above it)."""
        return self._cdf(jnp.clip(jnp.asarray(x), self.lower, self.upper))

    def pdf(self, x: ArrayLike) -> Array:
        """Density: the derivative of the CDF (zero outside the support)."""
        x = jnp.asarray(x, jnp.result_type(x, float))
        inside = (x >= self.lower) & (x <= self.upper)
        x_in = jnp.where(inside, x, 0.5 * (self.lower + self.upper))
        return jnp.where(inside, jax.jvp(self._cdf, (x_in,), (jnp.ones_like(x_in),))[1], 0.0)

    def icdf(self, u: ArrayLike) -> Array:
        """Inverse CDF on the whole support."""
        return self.truncated_icdf(u, self.lower, self.upper)

    def truncated_icdf(self, u: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> Array:
        r"""Inverse CDF of the distribution cut to $[lo, hi]$ (clipped to the support)."""
        lo = jnp.clip(jnp.asarray(lo), self.lower, self.upper)
        # hi is clipped to the support, not to lo, so a scalar hi (the support's
        # end, say) keeps a scalar CDF; max(F(hi), F(lo)) = F(max(hi, lo)).
        hi = jnp.clip(jnp.asarray(hi), self.lower, self.upper)
        f_lo = self._cdf(lo)
        f_hi = jnp.maximum(self._cdf(hi), f_lo)
        return jnp.clip(self._icdf(f_lo + jnp.asarray(u) * (f_hi - f_lo)), lo, jnp.maximum(hi, lo))


# -- periods (log10 P / day) ----------------------------------------------------


class Kroupa95Period(AbstractDistribution):
    r"""Kroupa (1995) birth periods: $f(\ell) \propto (\ell-\ell_0)/(\delta + (\ell-\ell_0)^2)$.

    **Fields** (differentiable): `lp_min` $= \ell_0$ (1), `lp_max` $= \ell_1$ (8.43), `delta` (45).
    """

    lp_min: Array
    lp_max: Array
    delta: Array

    def __init__(self, lp_min: ArrayLike = 1.0, lp_max: ArrayLike = 8.43, delta: ArrayLike = 45.0):
        self.lp_min, self.lp_max, self.delta = _param(lp_min), _param(lp_max), _param(delta)

    @property
    def lower(self) -> Array:
        return self.lp_min

    @property
    def upper(self) -> Array:
        return self.lp_max

    def _total(self) -> Array:
        return jnp.log1p((self.lp_max - self.lp_min) ** 2 / self.delta)

    def _cdf(self, x: Array) -> Array:
        return jnp.log1p((x - self.lp_min) ** 2 / self.delta) / self._total()

    def _icdf(self, p: Array) -> Array:
        # p > 0 for u in (0, 1) on the whole support; at p = 0 the sqrt's
        # derivative would be infinite, so it is kept away from 0 by a hair.
        tiny = jnp.finfo(p.dtype).tiny
        return self.lp_min + jnp.sqrt(jnp.maximum(self.delta * jnp.expm1(p * self._total()), tiny))


class LogNormalPeriod(AbstractDistribution):
    r"""Log-normal periods: $\ell \sim \mathcal N(\mu, \sigma^2)$ cut to [`lp_min`, `lp_max`].

    Defaults: Duquennoy & Mayor (1991), $\mu = 4.8$, $\sigma = 2.3$, cut at
    $\ell \le 10$ (wider than any cluster's tidal radius allows). The cut CDF is
    inverted from whichever tail is nearer, so a limit several $\sigma$ above the
    mean keeps its precision. Differentiable in `mean`, `sigma` and the cuts.
    """

    mean: Array
    sigma: Array
    lp_min: Array
    lp_max: Array

    def __init__(
        self, mean: ArrayLike = 4.8, sigma: ArrayLike = 2.3, lp_min: ArrayLike = -jnp.inf, lp_max: ArrayLike = 10.0
    ):
        self.mean, self.sigma = _param(mean), _param(sigma)
        self.lp_min, self.lp_max = _param(lp_min), _param(lp_max)

    @property
    def lower(self) -> Array:
        return self.lp_min

    @property
    def upper(self) -> Array:
        return self.lp_max

    def _cdf(self, x: Array) -> Array:
        f = ndtr((x - self.mean) / self.sigma)
        f_lo, f_hi = ndtr((self.lp_min - self.mean) / self.sigma), ndtr((self.lp_max - self.mean) / self.sigma)
        return (f - f_lo) / (f_hi - f_lo)

    def _icdf(self, p: Array) -> Array:
        f_lo, f_hi = ndtr((self.lp_min - self.mean) / self.sigma), ndtr((self.lp_max - self.mean) / self.sigma)
        return self.mean + self.sigma * ndtri(f_lo + p * (f_hi - f_lo))

    def truncated_icdf(self, u: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> Array:
        lo = jnp.clip(jnp.asarray(lo), self.lp_min, self.lp_max)
        hi = jnp.clip(jnp.asarray(hi), lo, self.lp_max)
        z_lo, z_hi = (lo - self.mean) / self.sigma, (hi - self.mean) / self.sigma
        # Mirror z -> -z when the interval lies above the mean: the CDF near 1
        # would lose the digits that the survival function keeps.
        s = jnp.where(z_lo + z_hi > 0, -1.0, 1.0)
        a, b = ndtr(s * z_lo), ndtr(s * z_hi)
        z = s * ndtri(a + jnp.asarray(u) * (b - a))
        return jnp.clip(self.mean + self.sigma * z, lo, hi)


class _PowerLaw(AbstractDistribution):
    r"""$f(x) \propto x^{g}$ on $[x_0, x_1]$, $x_0 > 0$, safe at $g = -1$ (log-uniform)."""

    @property
    @abc.abstractmethod
    def slope(self) -> Array: ...

    def _log_range(self) -> Array:
        return jnp.log(self.upper / self.lower)

    def _cdf(self, x: Array) -> Array:
        s, t, L = 1.0 + self.slope, jnp.log(x / self.lower), self._log_range()
        return t * expm1_over_x(s * t) / (L * expm1_over_x(s * L))

    def _icdf(self, p: Array) -> Array:
        return self.lower * jnp.exp(log1p_frac_over_x(p, 1.0 + self.slope, self._log_range()))


class PowerLawPeriod(_PowerLaw):
    r"""Power law in $\ell = \log_{10}(P/\mathrm{day})$: $f(\ell) \propto \ell^{\pi}$.

    Defaults: Sana et al. (2012), $\pi = -0.55$ on $[0.15, 5.5]$. Fields `index`,
    `lp_min`, `lp_max` (differentiable; `lp_min` > 0).
    """

    index: Array
    lp_min: Array
    lp_max: Array

    def __init__(self, index: ArrayLike = -0.55, lp_min: ArrayLike = 0.15, lp_max: ArrayLike = 5.5):
        self.index, self.lp_min, self.lp_max = _param(index), _param(lp_min), _param(lp_max)

    @property
    def slope(self) -> Array:
        return self.index

    @property
    def lower(self) -> Array:
        return self.lp_min

    @property
    def upper(self) -> Array:
        return self.lp_max


class PowerLawMassRatio(_PowerLaw):
    r"""Mass ratios $q = m_2/m_1$ with $f(q) \propto q^{\gamma}$ on [`q_min`, `q_max`].

    $\gamma = 0$ is the uniform distribution (McLuster's `pairing=3` uses
    $q \in [0.1, 1]$). Differentiable in `gamma` and the bounds.
    """

    gamma: Array
    q_min: Array
    q_max: Array

    def __init__(self, gamma: ArrayLike = 0.0, q_min: ArrayLike = 0.1, q_max: ArrayLike = 1.0):
        self.gamma, self.q_min, self.q_max = _param(gamma), _param(q_min), _param(q_max)

    @property
    def slope(self) -> Array:
        return self.gamma

    @property
    def lower(self) -> Array:
        return self.q_min

    @property
    def upper(self) -> Array:
        return self.q_max


# -- eccentricities -------------------------------------------------------------


class PowerLawEccentricity(AbstractDistribution):
    r"""$f(e) \propto e^{\eta}$ on $[0, e_{\max}]$, $\eta > -1$: $F(e) = (e/e_{\max})^{\eta+1}$.

    `eta` = 1 is the thermal distribution $f(e) = 2e$ (Jeans 1919), 0 the
    uniform one and -0.45 that of Sana et al. (2012). Cut to $[0, h]$ the
    sample is $h\,u^{1/(\eta+1)}$, finite in value and slope at $h = 0$.
    """

    eta: Array
    e_max: Array

    def __init__(self, eta: ArrayLike = 1.0, e_max: ArrayLike = 1.0):
        self.eta, self.e_max = _param(eta), _param(e_max)

    @property
    def lower(self) -> Array:
        return jnp.zeros_like(self.e_max)

    @property
    def upper(self) -> Array:
        return self.e_max

    def _cdf(self, x: Array) -> Array:
        return (x / self.e_max) ** (1.0 + self.eta)

    def _icdf(self, p: Array) -> Array:
        return self.e_max * p ** (1.0 / (1.0 + self.eta))

    def truncated_icdf(self, u: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> Array:
        """Cut to [0, hi] (the lower limit is ignored: eccentricities start at 0)."""
        del lo
        hi = jnp.clip(jnp.asarray(hi), 0.0, self.e_max)
        return hi * jnp.asarray(u) ** (1.0 / (1.0 + self.eta))


class CircularEccentricity(AbstractDistribution):
    """Circular orbits only: e = 0."""

    @property
    def lower(self) -> Array:
        return jnp.zeros(())

    @property
    def upper(self) -> Array:
        return jnp.zeros(())

    def _cdf(self, x: Array) -> Array:
        return jnp.ones_like(x)

    def _icdf(self, p: Array) -> Array:
        return jnp.zeros_like(p)

    def truncated_icdf(self, u: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> Array:
        return jnp.zeros_like(jnp.asarray(u) * jnp.asarray(hi))


PERIODS = {
    "kroupa95": Kroupa95Period,
    "dm91": LogNormalPeriod,
    "sana12": PowerLawPeriod,
    "moe17": Moe17,  # joint with q and e: see moe17.py
}
ECCENTRICITIES = {
    "thermal": lambda: PowerLawEccentricity(1.0),
    "uniform": lambda: PowerLawEccentricity(0.0),
    "sana12": lambda: PowerLawEccentricity(-0.45),
    "circular": CircularEccentricity,
}
MASS_RATIOS = {
    "uniform": lambda: PowerLawMassRatio(0.0),
}


def resolve(value: str | AbstractDistribution, table: dict, argument: str) -> AbstractDistribution:
    """A distribution from a name in `table` or the distribution itself (eager check)."""
    if isinstance(value, (AbstractDistribution, Moe17)):
        return value
    if isinstance(value, str) and value in table:
        return table[value]()
    raise ValueError(f"{argument} must be one of {tuple(table)} or a distribution object, got {value!r}")
