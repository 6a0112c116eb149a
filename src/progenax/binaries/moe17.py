r"""Moe & Di Stefano (2017) joint, primary-mass-dependent binary statistics.

Moe & Di Stefano (2017, ApJS 230, 15; "MD17") fit the companions of main-sequence
primaries of mass $M_1 = 0.8$-$40\,M_\odot$ with $q = M_2/M_1 \ge 0.1$ and
$\ell = \log_{10}(P/\mathrm{day}) \in [0.2, 8]$. The fitted numbers below are
the paper's (its equation numbers in brackets; the published Monte Carlo code
of Moe, as translated in COSMIC's `multidim.py`, fixes the details the paper
leaves open, marked "code").

**Companion frequency** per decade of period, companions with $q > 0.3$
(Eqs. 20-23, $x = \log_{10} M_1$, $\alpha = 0.018$, $\Delta = 0.7$):
$f_1 = 0.020 + 0.04x + 0.07x^2$ for $\ell \le 1$,
$f_{2.7} = 0.039 + 0.07x + 0.01x^2$, $f_{5.5} = 0.078 - 0.05x + 0.04x^2$;
linear in $\ell$ between the nodes $(1, f_1)$, $(2.7-\Delta, f_{2.7}-\alpha\Delta)$,
$(2.7+\Delta, f_{2.7}+\alpha\Delta)$, $(5.5, f_{5.5})$, and
$f_{5.5}\,e^{-0.3(\ell-5.5)}$ beyond. Multiplied by the ratio of companions with
$q > 0.1$ to those with $q > 0.3$ (from the mass-ratio law below) it is
$f_{\log P}(M_1, \ell)$; its integral over $[0.2, 8]$ is the total companion
frequency $f_{\rm mult}(M_1)$ (0.50 at $1\,M_\odot$, 2.1 at $28\,M_\odot$).

**Mass ratios** (Eqs. 5-15): $p(q) \propto q^{\gamma_{\rm small}}$ on
$[0.1, 0.3]$ and $q^{\gamma_{\rm large}}$ on $[0.3, 1]$ (continuous at 0.3),
plus a uniform twin excess on $[0.95, 1]$ holding a fraction $F_{\rm twin}$ of
the $q > 0.3$ companions: $F_{\rm twin} = 0.3 - 0.15\log_{10}M_1$ for
$\ell \le 1$, falling linearly to 0 at $\ell_{\rm twin} = 8 - M_1$
($1.5$ for $M_1 \ge 6.5$). $\gamma_{\rm large}$ and $\gamma_{\rm small}$ are
piecewise linear in $\ell$ at $M_1 = 1.2$, 3.5 and 6 and linear in
$\log_{10} M_1$ between (held constant outside).

**Eccentricities** (Eqs. 17-18): $p(e) \propto e^{\eta}$ with
$\eta = 0.6 - 0.7/(\ell - 0.5)$ at $M_1 \le 3$ and $0.9 - 0.2/(\ell - 0.5)$ at
$M_1 \ge 7$ (linear in $\log_{10}M_1$ between; $\ell$ held at 0.7 below it),
below $e_{\max} = 1 - (P/2\,\mathrm{d})^{-2/3}$ (Eq. 3; circular for
$P \le 2$ d). In $x = e/e_{\max}$ the law is $x^\eta$ on $[10^{-4}, 0.8]$ and
falls linearly to 0 at $x = 1$ (code; the floor $10^{-4}$ keeps the law
normalisable where $\eta \le -1$, i.e. $P \lesssim 9$ d for solar-type stars).

**Binaries, not companions.** A companion frequency above 1 means triples and
higher; we build binaries only. Following MD17's code, a companion at $\ell$ is
the *inner* binary with probability $p_{\rm in} = 1$ for $\ell \le 1.5$ and
$\max[0, 1 - 0.11(\ell - 1.5)^{1.43}(M_1/10)^{0.56}]$ beyond, so the binary
(multiplicity) fraction is $F_{\rm bin}(M_1) = \int f_{\log P}\,p_{\rm in}\,d\ell$
and the inner-binary periods follow $f_{\log P}\,p_{\rm in}$. This gives 0.41,
0.60, 0.81, 0.86 and 0.94 at $M_1 = 1$, 3.5, 7, 12.5 and $28\,M_\odot$
(MD17's multiplicity fractions 0.40, 0.59, 0.76, 0.84, 0.94). The
probability is capped at 1 (it never reaches it in the fitted range). Outside
$[0.8, 40]\,M_\odot$ the statistics of the nearest end are used, and below
$0.8\,M_\odot$ the binary fraction falls linearly in $\log M_1$ to 0 at
$0.08\,M_\odot$ (code).

**Sampling.** $f_{\log P}\,p_{\rm in}$ is tabulated once (NumPy-side, float64)
on 101 masses log-spaced over $[0.8, 40]$ and 157 periods $\ell = 0.2(0.05)8$,
and cumulated by the trapezoid rule. For a primary, the table is interpolated
linearly in $\log M_1$ and in $\ell$ (a piecewise-linear CDF), inverted by a
fixed 8-step bisection over the period nodes plus an exact linear step. $q$ and
$e$ are drawn by the exact inverse CDFs of their piecewise power laws (a fixed
4-step safeguarded Newton solve in the twin segment). Every draw is
differentiable in $M_1$ (piecewise: the fits have kinks), in the truncation
limits and in the uniform variates.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..imf.power_law import _segment_integral as power_integral
from ..imf.power_law import log1p_frac_over_x
from ..sampling import safe_divide, solve_increasing

LP_MIN, LP_MAX, LP_NODES = 0.2, 8.0, 157
"""Period range of the fits, log10(P/day), and the table's nodes (step 0.05)."""
M1_MIN, M1_MAX, M1_NODES = 0.8, 40.0, 101
"""Primary-mass range of the fits (Msun) and the table's nodes (log-spaced)."""
M1_FLOOR = 0.08
"""Below M1_MIN the binary fraction falls linearly in log M1 to 0 here (Msun)."""
Q_MIN, Q_BREAK, Q_TWIN = 0.1, 0.3, 0.95
X_FLOOR, X_TURN = 1e-4, 0.8
"""Eccentricity law in x = e / e_max: power law on [X_FLOOR, X_TURN], linear to 0 at 1."""
_BISECTION_STEPS = 8  # 2**8 = 256 >= LP_NODES - 1 cells
_TWIN_STEPS = 4  # nearly linear CDF: from the secant, Newton reaches float64 rounding in 3


def _piecewise_linear(x: Array, knots, values) -> Array:
    """Linear interpolation through (knots[k], values[k]), constant outside; values may be arrays."""
    out = values[0]
    for k in range(len(knots) - 1):
        w = jnp.clip((x - knots[k]) / (knots[k + 1] - knots[k]), 0.0, 1.0)
        out = out + w * (values[k + 1] - values[k])
    return out


def _in_mass(m1: Array, anchors, values) -> Array:
    """Interpolate values given at anchor masses linearly in log10 M1 (held outside)."""
    return _piecewise_linear(jnp.log10(m1), [float(np.log10(a)) for a in anchors], values)


def _clamped(m1: ArrayLike) -> Array:
    m1 = jnp.asarray(m1)
    return jnp.clip(m1, M1_MIN, M1_MAX)


def companion_frequency_q03(m1: ArrayLike, lp: ArrayLike) -> Array:
    r"""Companions with $q > 0.3$ per decade of period at $\ell$ (MD17 Eqs. 20-23)."""
    m1, lp = _clamped(m1), jnp.asarray(lp)
    x = jnp.log10(m1)
    alpha, delta = 0.018, 0.7
    f1 = 0.020 + 0.04 * x + 0.07 * x**2
    f27 = 0.039 + 0.07 * x + 0.01 * x**2
    f55 = 0.078 - 0.05 * x + 0.04 * x**2
    knots = [1.0, 2.7 - delta, 2.7 + delta, 5.5]
    linear = _piecewise_linear(lp, knots, [f1, f27 - alpha * delta, f27 + alpha * delta, f55])
    return jnp.where(lp > 5.5, f55 * jnp.exp(-0.3 * (jnp.maximum(lp, 5.5) - 5.5)), linear)


def mass_ratio_parameters(m1: ArrayLike, lp: ArrayLike) -> tuple[Array, Array, Array]:
    r"""$(\gamma_{\rm small}, \gamma_{\rm large}, F_{\rm twin})$ at $(M_1, \ell)$ (MD17 Eqs. 5-15)."""
    m1, lp = _clamped(m1), jnp.asarray(lp)
    large = [
        _piecewise_linear(lp, [5.0, 8.0], [-0.5, -1.4]),
        _piecewise_linear(lp, [1.0, 4.5, 6.5], [-0.5, -1.2, -2.0]),
        _piecewise_linear(lp, [1.0, 2.0, 4.0], [-0.5, -1.4, -2.0]),
    ]
    small = [
        jnp.full_like(lp, 0.3),
        _piecewise_linear(lp, [2.5, 5.5, 8.0], [0.2, -0.7, -1.2]),
        _piecewise_linear(lp, [1.0, 3.0, 5.6], [0.1, -0.2, -1.5]),
    ]
    anchors = (1.2, 3.5, 6.0)
    lp_twin = jnp.where(m1 >= 6.5, 1.5, 8.0 - m1)
    twin = (0.3 - 0.15 * jnp.log10(m1)) * jnp.clip(1.0 - (lp - 1.0) / (lp_twin - 1.0), 0.0, 1.0)
    return _in_mass(m1, anchors, small), _in_mass(m1, anchors, large), twin


def _mass_ratio_segments(m1, lp):
    """Unnormalised masses of [0.1, 0.3], [0.3, 0.95], [0.95, 1] (the q > 0.3 part sums to 1)."""
    g_small, g_large, twin = mass_ratio_parameters(m1, lp)
    scale = (1.0 - twin) / power_integral(Q_BREAK, 1.0, g_large)
    small = scale * Q_BREAK ** (g_large - g_small) * power_integral(Q_MIN, Q_BREAK, g_small)
    middle = scale * power_integral(Q_BREAK, Q_TWIN, g_large)
    return (g_small, g_large, twin, scale), (small, middle, 1.0 - middle)


def _twin_segment_cdf(q, g_large, twin, scale):
    return scale * power_integral(Q_TWIN, q, g_large) + twin * (q - Q_TWIN) / (1.0 - Q_TWIN)


def _mass_ratio_cumulative(q, params, segments):
    g_small, g_large, twin, scale = params
    small, middle, _ = segments
    qs, qm, qt = jnp.clip(q, Q_MIN, Q_BREAK), jnp.clip(q, Q_BREAK, Q_TWIN), jnp.clip(q, Q_TWIN, 1.0)
    below = scale * Q_BREAK ** (g_large - g_small) * power_integral(Q_MIN, qs, g_small)
    mid = scale * power_integral(Q_BREAK, qm, g_large)
    top = _twin_segment_cdf(qt, g_large, twin, scale)
    return jnp.where(q <= Q_BREAK, below, jnp.where(q <= Q_TWIN, small + mid, small + middle + top))


def mass_ratio_factor(m1: ArrayLike, lp: ArrayLike) -> Array:
    """Companions with q > 0.1 per companion with q > 0.3 at (M1, lP)."""
    _, (small, _, _) = _mass_ratio_segments(_clamped(m1), jnp.asarray(lp))
    return 1.0 + small


def mass_ratio_cdf(q: ArrayLike, m1: ArrayLike, lp: ArrayLike) -> Array:
    """Fraction of the companions at (M1, lP) with mass ratio below q (0.1 <= q <= 1)."""
    m1, lp = _clamped(m1), jnp.asarray(lp)
    params, segments = _mass_ratio_segments(m1, lp)
    return _mass_ratio_cumulative(jnp.asarray(q), params, segments) / (1.0 + segments[0])


def sample_mass_ratio(u: ArrayLike, m1: ArrayLike, lp: ArrayLike, q_lo: ArrayLike = Q_MIN) -> Array:
    """Mass ratios by the exact inverse CDF at (M1, lP), cut to [max(0.1, q_lo), 1]."""
    m1, lp = _clamped(m1), jnp.asarray(lp)
    params, (small, middle, twin_mass) = _mass_ratio_segments(m1, lp)
    g_small, g_large, twin, scale = params
    q_lo = jnp.clip(jnp.asarray(q_lo), Q_MIN, 1.0)
    c_lo = _mass_ratio_cumulative(q_lo, params, (small, middle, twin_mass))
    t = c_lo + jnp.asarray(u) * (1.0 + small - c_lo)
    # Each segment's inverse, on its own clipped fraction (finite everywhere for the where).
    v_s = jnp.clip(t / small, 0.0, 1.0)
    q_s = Q_MIN * jnp.exp(log1p_frac_over_x(v_s, 1.0 + g_small, jnp.log(Q_BREAK / Q_MIN)))
    v_m = jnp.clip((t - small) / middle, 0.0, 1.0)
    q_m = Q_BREAK * jnp.exp(log1p_frac_over_x(v_m, 1.0 + g_large, jnp.log(Q_TWIN / Q_BREAK)))
    t_top = jnp.clip(t - small - middle, 0.0, twin_mass)
    q_t = solve_increasing(
        lambda q: _twin_segment_cdf(q, g_large, twin, scale),
        t_top,
        jnp.full_like(t, Q_TWIN),
        jnp.ones_like(t),
        num_steps=_TWIN_STEPS,
        F_lo=jnp.zeros_like(t),
        F_hi=twin_mass,
    )
    q = jnp.where(t <= small, q_s, jnp.where(t <= small + middle, q_m, q_t))
    return jnp.clip(q, q_lo, 1.0)


# -- eccentricities -------------------------------------------------------------


def eccentricity_slope(m1: ArrayLike, lp: ArrayLike) -> Array:
    r"""$\eta(M_1, \ell)$ of $p(e) \propto e^\eta$ (MD17 Eqs. 17-18)."""
    m1, lp = _clamped(m1), jnp.maximum(jnp.asarray(lp), 0.7)
    return _in_mass(m1, (3.0, 7.0), [0.6 - 0.7 / (lp - 0.5), 0.9 - 0.2 / (lp - 0.5)])


def max_eccentricity(lp: ArrayLike) -> Array:
    r"""$e_{\max} = 1 - (P/2\,\mathrm{d})^{-2/3}$, 0 for $P \le 2$ d (MD17 Eq. 3)."""
    return jnp.clip(1.0 - 10.0 ** (-(2.0 / 3.0) * (jnp.asarray(lp) - np.log10(2.0))), 0.0, 1.0)


def _eccentricity_cumulative(x, eta):
    """Unnormalised CDF in x = e / e_max, and the power-law segment's mass."""
    head = power_integral(X_FLOOR, X_TURN, eta)
    x_head = jnp.clip(x, X_FLOOR, X_TURN)
    x_tail = jnp.clip(x, X_TURN, 1.0)
    tail = 2.5 * X_TURN**eta * ((1.0 - X_TURN) ** 2 - (1.0 - x_tail) ** 2)
    return jnp.where(x <= X_TURN, power_integral(X_FLOOR, x_head, eta), head + tail), head


def eccentricity_cdf(e: ArrayLike, m1: ArrayLike, lp: ArrayLike) -> Array:
    """Fraction of the binaries at (M1, lP) with eccentricity below e (1 at e >= e_max)."""
    e_max = max_eccentricity(lp)
    eta = eccentricity_slope(m1, lp)
    x = jnp.clip(safe_divide(jnp.asarray(e), e_max), 0.0, 1.0)
    total, _ = _eccentricity_cumulative(jnp.ones_like(x), eta)
    value, _ = _eccentricity_cumulative(x, eta)
    return jnp.where(e_max > 0, value / total, 1.0)


def sample_eccentricity(u: ArrayLike, m1: ArrayLike, lp: ArrayLike, e_hi: ArrayLike = 1.0) -> Array:
    """Eccentricities by the exact inverse CDF at (M1, lP), cut to [0, min(e_max(P), e_hi)]."""
    e_max = max_eccentricity(lp)
    eta = eccentricity_slope(m1, lp)
    x_hi = jnp.clip(safe_divide(jnp.asarray(e_hi), e_max), 0.0, 1.0)
    c_hi, head = _eccentricity_cumulative(x_hi, eta)
    t = jnp.asarray(u) * c_hi
    x_head = X_FLOOR * jnp.exp(log1p_frac_over_x(jnp.clip(t / head, 0.0, 1.0), 1.0 + eta, np.log(X_TURN / X_FLOOR)))
    tiny = jnp.finfo(t.dtype).tiny
    # (1 - x)^2 = 0.04 - (t - head) / (2.5 * 0.8^eta); the floor keeps sqrt's slope finite at x = 1.
    rest = (1.0 - X_TURN) ** 2 - jnp.maximum(t - head, 0.0) / (2.5 * X_TURN**eta)
    x_tail = 1.0 - jnp.sqrt(jnp.maximum(rest, tiny))
    x = jnp.minimum(jnp.where(t <= head, x_head, x_tail), x_hi)
    return x * e_max


# -- the period table -----------------------------------------------------------


def inner_binary_probability(m1: ArrayLike, lp: ArrayLike) -> Array:
    r"""Probability that a companion at $\ell$ is the inner binary (MD17's code)."""
    m1, lp = _clamped(m1), jnp.asarray(lp)
    outer = 0.11 * jnp.maximum(lp - 1.5, 0.0) ** 1.43 * (m1 / 10.0) ** 0.56
    return jnp.clip(1.0 - outer, 0.0, 1.0)


def companion_frequency_density(m1: ArrayLike, lp: ArrayLike) -> Array:
    r"""$f_{\log P}$: companions with $q > 0.1$ per decade of period at $(M_1, \ell)$."""
    return companion_frequency_q03(m1, lp) * mass_ratio_factor(m1, lp)


def _cumulate(density: np.ndarray, step: float) -> np.ndarray:
    steps = 0.5 * (density[:, 1:] + density[:, :-1]) * step
    return np.concatenate([np.zeros_like(density[:, :1]), np.cumsum(steps, axis=1)], axis=1)


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray]:
    """Cumulative companion and inner-binary frequencies over log P, (M1_NODES, LP_NODES), float64."""
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        m1 = jnp.logspace(np.log10(M1_MIN), np.log10(M1_MAX), M1_NODES)[:, None]
        lp = jnp.linspace(LP_MIN, LP_MAX, LP_NODES)[None, :]
        companions = np.asarray(companion_frequency_density(m1, lp), np.float64)
        inner = companions * np.asarray(inner_binary_probability(m1, lp), np.float64)
    step = (LP_MAX - LP_MIN) / (LP_NODES - 1)
    return _cumulate(companions, step), _cumulate(inner, step)


def _mass_cell(m1: Array) -> tuple[Array, Array]:
    """Table row below M1 and the weight of the row above (linear in log M1, clamped)."""
    lo, hi = np.log10(M1_MIN), np.log10(M1_MAX)
    s = (jnp.clip(jnp.log10(m1), lo, hi) - lo) / (hi - lo) * (M1_NODES - 1)
    i = jnp.clip(jnp.floor(s), 0, M1_NODES - 2).astype(jnp.int32)
    return i, s - i


class Moe17(eqx.Module):
    """The MD17 joint model: `BinaryPopulation(period="moe17")` samples from it.

    Holds the tabulated cumulative frequencies (fixed constants, no gradient
    wanted) and offers the per-primary draws. Masses in Msun.
    """

    companions: Array
    inner: Array

    def __init__(self):
        companions, inner = _tables()
        dtype = jnp.result_type(float)
        self.companions, self.inner = jnp.asarray(companions, dtype), jnp.asarray(inner, dtype)

    def _at(self, table: Array, i: Array, w: Array, j: Array) -> Array:
        return (1.0 - w) * table[i, j] + w * table[i + 1, j]

    def _cumulative(self, table: Array, m1: ArrayLike, lp: ArrayLike) -> Array:
        m1 = jnp.asarray(m1)
        i, w = _mass_cell(m1)
        s = (jnp.clip(jnp.asarray(lp), LP_MIN, LP_MAX) - LP_MIN) / (LP_MAX - LP_MIN) * (LP_NODES - 1)
        j = jnp.clip(jnp.floor(s), 0, LP_NODES - 2).astype(jnp.int32)
        f = s - j
        return (1.0 - f) * self._at(table, i, w, j) + f * self._at(table, i, w, j + 1)

    def companion_frequency(self, m1: ArrayLike, lp_lo: ArrayLike = LP_MIN, lp_hi: ArrayLike = LP_MAX) -> Array:
        r"""Companions ($q > 0.1$) per primary with $\ell \in$ [`lp_lo`, `lp_hi`] (all orders)."""
        return self._cumulative(self.companions, m1, lp_hi) - self._cumulative(self.companions, m1, lp_lo)

    def binary_fraction(self, m1: ArrayLike) -> Array:
        """Probability that a primary of mass m1 has a companion (its inner binary), capped at 1."""
        m1 = jnp.asarray(m1)
        low = jnp.clip(jnp.log10(jnp.maximum(m1, M1_FLOOR) / M1_FLOOR) / np.log10(M1_MIN / M1_FLOOR), 0.0, 1.0)
        return jnp.clip(low * self._cumulative(self.inner, m1, LP_MAX), 0.0, 1.0)

    def log_period_cdf(self, lp: ArrayLike, m1: ArrayLike) -> Array:
        """Fraction of the inner binaries of primaries m1 with log10(P/day) below lp."""
        return self._cumulative(self.inner, m1, lp) / self._cumulative(self.inner, m1, LP_MAX)

    def sample_log_period(self, u: ArrayLike, m1: ArrayLike, lo: ArrayLike = LP_MIN, hi: ArrayLike = LP_MAX) -> Array:
        """Inner-binary log10(P/day) by the inverse of the tabulated CDF, cut to [lo, hi] ∩ [0.2, 8]."""
        m1 = jnp.asarray(m1)
        lo = jnp.clip(jnp.asarray(lo), LP_MIN, LP_MAX)
        hi = jnp.clip(jnp.asarray(hi), lo, LP_MAX)
        c_lo, c_hi = self._cumulative(self.inner, m1, lo), self._cumulative(self.inner, m1, hi)
        t = c_lo + jnp.asarray(u) * (c_hi - c_lo)
        i, w = _mass_cell(m1)
        t_search = jax.lax.stop_gradient(t)
        table, i_s, w_s = jax.lax.stop_gradient((self.inner, i, w))

        def bisect(_, ab):
            # Invariant C[a] <= t < C[b]; the index carries no gradient.
            a, b = ab
            mid = (a + b) // 2
            below = self._at(table, i_s, w_s, mid) <= t_search
            return jnp.where(below, mid, a), jnp.where(below, b, mid)

        start = (jnp.zeros(t.shape, jnp.int32), jnp.full(t.shape, LP_NODES - 1, jnp.int32))
        a, _ = jax.lax.fori_loop(0, _BISECTION_STEPS, bisect, start)
        a = jnp.minimum(a, LP_NODES - 2)
        c_a, c_b = self._at(self.inner, i, w, a), self._at(self.inner, i, w, a + 1)
        step = (LP_MAX - LP_MIN) / (LP_NODES - 1)
        lp = LP_MIN + step * (a + jnp.clip(safe_divide(t - c_a, c_b - c_a), 0.0, 1.0))
        return jnp.clip(lp, lo, hi)

    sample_mass_ratio = staticmethod(sample_mass_ratio)
    sample_eccentricity = staticmethod(sample_eccentricity)
