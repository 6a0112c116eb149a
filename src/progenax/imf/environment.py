r"""Environment-dependent IMF of Marks et al. (2012).

The high-mass slope (above 1 Msun) steepens with metallicity and flattens
(top-heavy) with the density of the star-forming cloud:

$$x = -0.14\,[{\rm Fe/H}] + 0.99 \log_{10}\!\left(\frac{\rho_{\rm cl}}
{10^6\,M_\odot\,{\rm pc}^{-3}}\right),\qquad
\alpha_3 = \begin{cases} 2.3 & x < -0.87 \\ -0.41\,x + 1.94 & x \ge -0.87
\end{cases}$$

with $\rho_{\rm cl}$ the birth density of the cloud (stars + gas) in
Msun pc^-3. The two branches differ by 0.0033 at the threshold, so the
relation is nearly continuous but has a kink. `marks_alpha3(..., mode="sigmoid")`
blends them with $s = \sigma((x + 0.87)/\text{width})$,

$$\alpha_3 = 2.3 + s\,(-0.41\,x + 1.94 - 2.3),$$

differentiable in [Fe/H] and $\rho_{\rm cl}$ everywhere; `mode="hard"` is the
exact piecewise relation (forward use). `marks_imf` returns the three-segment
Kroupa-type IMF with that slope: 1.3 on [0.08, 0.5], 2.3 on [0.5, 1] and
$\alpha_3$ on [1, m_max] Msun.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array, ArrayLike
from ..validation import check_range
from .power_law import PowerLawIMF

X_THRESHOLD = -0.87
CANONICAL_ALPHA3 = 2.3
RHO_REFERENCE = 1e6  # Msun pc^-3
MODES = ("sigmoid", "hard")


def marks_x(feh: ArrayLike, rho_cl: ArrayLike) -> Array:
    """x = -0.14 [Fe/H] + 0.99 log10(rho_cl / 1e6 Msun pc^-3); rho_cl > 0 in Msun pc^-3."""
    rho_cl = check_range("rho_cl", rho_cl, lower=0.0)
    feh = jnp.asarray(feh, dtype=rho_cl.dtype)
    return -0.14 * feh + 0.99 * jnp.log10(rho_cl / RHO_REFERENCE)


def marks_alpha3(feh: ArrayLike, rho_cl: ArrayLike, *, width: ArrayLike = 0.05, mode: str = "sigmoid") -> Array:
    """High-mass IMF slope alpha3 of Marks et al. (2012) (see module docstring).

    **Arguments:** `feh`: [Fe/H] (dex); `rho_cl`: cloud density in Msun pc^-3
    (> 0); `width`: sigmoid width in x (> 0; 0.05 makes the blend reach 98% of
    either branch 0.2 from the threshold); `mode`: "sigmoid" or "hard".
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    width = check_range("width", width, lower=0.0)
    x = marks_x(feh, rho_cl)
    steep = -0.41 * x + 1.94
    if mode == "hard":
        return jnp.where(x < X_THRESHOLD, CANONICAL_ALPHA3, steep)
    s = jax.nn.sigmoid((x - X_THRESHOLD) / width)
    return CANONICAL_ALPHA3 + s * (steep - CANONICAL_ALPHA3)


def marks_imf(
    feh: ArrayLike,
    rho_cl: ArrayLike,
    *,
    width: ArrayLike = 0.05,
    mode: str = "sigmoid",
    m_min: ArrayLike = 0.08,
    m_max: ArrayLike = 100.0,
) -> PowerLawIMF:
    """Three-segment IMF: 1.3 (m_min-0.5), 2.3 (0.5-1), alpha3 (1-m_max Msun).

    Pass it as `imf=` to any builder; differentiable in [Fe/H] and rho_cl
    through alpha3.
    """
    alpha3 = marks_alpha3(feh, rho_cl, width=width, mode=mode)
    dtype = alpha3.dtype
    breaks = jnp.stack(
        [jnp.asarray(m_min, dtype), jnp.asarray(0.5, dtype), jnp.asarray(1.0, dtype), jnp.asarray(m_max, dtype)]
    )
    slopes = jnp.stack([jnp.asarray(1.3, dtype), jnp.asarray(2.3, dtype), alpha3])
    return PowerLawIMF(breaks, slopes)
