r"""Measurements of a gravoturbulent field (numpy, not traced): the PDF of s and its fits.

*Experimental.* Used by the tests and the documentation figures to compare a
built field with its model:

- `lognormal_variance_fit`: a parabola fitted to the log of the histogram of the
  cell values below $s_t$ (weighted least squares, Poisson weights); its
  curvature $-1/(2\sigma_s^2)$ gives the lognormal part's variance.
- `tail_slope_fit`: the maximum-likelihood slope of an exponential tail above
  $s_t$, $\hat\alpha = 1/\langle s - s_t\rangle_{s > s_t}$.
- `volume_mean_density`: $\langle \rho/\rho_0 \rangle = \langle e^s\rangle$ over the cells.
"""

from __future__ import annotations

import numpy as np

from .._types import ArrayLike


def lognormal_variance_fit(log_density: ArrayLike, threshold: float, *, bins: int = 60, min_count: int = 100) -> float:
    """Variance of the lognormal part from a parabola through log counts below `threshold`.

    The histogram spans from the 0.1% quantile to `threshold` in `bins` bins;
    bins with fewer than `min_count` cells are left out.
    """
    s = np.asarray(log_density, dtype=np.float64).ravel()
    below = s[s < threshold]
    lo = np.quantile(below, 1e-3)
    counts, edges = np.histogram(below, bins=bins, range=(lo, threshold))
    centres = 0.5 * (edges[1:] + edges[:-1])
    use = counts >= min_count
    if np.count_nonzero(use) < 4:
        raise ValueError("too few populated bins below the threshold to fit the lognormal part")
    c = np.polyfit(centres[use], np.log(counts[use]), 2, w=np.sqrt(counts[use]))[0]
    return float(-1.0 / (2.0 * c))


def tail_slope_fit(log_density: ArrayLike, threshold: float) -> tuple[float, int]:
    """Maximum-likelihood exponential slope above `threshold`, and the number of cells used."""
    s = np.asarray(log_density, dtype=np.float64).ravel()
    excess = s[s > threshold] - threshold
    if excess.size == 0:
        raise ValueError("no cell lies above the threshold")
    return float(1.0 / np.mean(excess)), int(excess.size)


def volume_mean_density(log_density: ArrayLike) -> float:
    """The volume-weighted mean of rho / rho_0 = e^s over the cells."""
    return float(np.mean(np.exp(np.asarray(log_density, dtype=np.float64))))
