r"""Kinematic profiles: velocity anisotropy in radial shells, rotation in cylinders.

**Anisotropy.** About a centre $c$, a star at $x$ with velocity $v$ has radial and
tangential parts $v_r = v\cdot\hat r$ and $v_t^2 = |v|^2 - v_r^2$ (two
components). In a radial bin the mass-weighted second moments and the
anisotropy are

$$\langle v_r^2\rangle = \frac{\sum_i w_i v_{r,i}^2}{\sum_i w_i}, \qquad
\langle v_t^2\rangle = \frac{\sum_i w_i v_{t,i}^2}{\sum_i w_i}, \qquad
\beta = 1 - \frac{\langle v_t^2\rangle}{2 \langle v_r^2\rangle},$$

with $\beta = 0$ isotropic, $\beta \to 1$ radial orbits, $\beta < 0$ tangential.
The moments are about zero velocity: pass velocities in the cluster's frame (a
built cluster's centre-of-mass frame), and mind that a mean rotation adds
$\langle v_\phi\rangle^2$ to $\langle v_t^2\rangle$.

**Standard errors.** A bin's weighted mean $\bar y = \sum w_i y_i / \sum w_i$ of
$n$ stars has the sandwich (ratio-estimator) variance

$$\sigma^2_{\bar y} = \frac{n}{n - 1}\,\frac{\sum_i w_i^2 (y_i - \bar y)^2}{(\sum_i w_i)^2},$$

which for equal weights is the sample variance (ddof = 1) over $n$: the sample
standard deviation over $\sqrt n$. The covariance of two bin means is the same
sum with $(y_i - \bar y)(z_i - \bar z)$. $\beta$'s error follows from the delta
method with $T = \langle v_t^2\rangle$, $R = \langle v_r^2\rangle$:
$\partial\beta/\partial T = -1/(2R)$, $\partial\beta/\partial R = T/(2R^2)$,

$$\sigma^2_\beta = \Big(\frac{\partial\beta}{\partial T}\Big)^2 \sigma_T^2
+ \Big(\frac{\partial\beta}{\partial R}\Big)^2 \sigma_R^2
+ 2\,\frac{\partial\beta}{\partial T}\frac{\partial\beta}{\partial R}\,\mathrm{cov}(T, R).$$

**Rotation curve.** In cylindrical radius $R = \sqrt{x^2 + y^2}$ about the z axis
through $c$, $v_\phi = (x v_y - y v_x)/R$ (positive for $L_z > 0$); a bin's mean
is mass-weighted with the error above.

**Jeans solution (Osipkov-Merritt).** For $\beta(r) = r^2/(r^2 + r_a^2)$ the
spherical Jeans equation
$d(\rho\sigma_r^2)/dr + 2\beta\rho\sigma_r^2/r = -\rho\, G M(r)/r^2$ has the
integrating factor $r^2 + r_a^2$:

$$\rho\sigma_r^2(r) = \frac{1}{r^2 + r_a^2}\int_r^\infty (s^2 + r_a^2)\,
\rho(s) \frac{G M(s)}{s^2}\,ds, \qquad \sigma_t^2 = 2(1 - \beta)\,\sigma_r^2,$$

($r_a = \infty$: the isotropic solution). `osipkov_merritt_jeans` evaluates it
by quadrature (scipy's `quad`) at given radii, `osipkov_merritt_jeans_binned`
as mass-weighted means over radial bins, to compare with `anisotropy_profile`.

Units are those of the inputs (pc and km/s for a built cluster). Everything
here is forward-only NumPy/SciPy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .._types import ArrayLike


class AnisotropyProfile(NamedTuple):
    """Per radial bin (bins,): star count, mass-weighted mean radius, the moments
    `v_r2` = <v_r^2>, `v_t2` = <v_t^2> (velocity^2), `beta`, and their standard
    errors; `edges` (bins + 1,). Bins without stars hold NaN (errors: with fewer
    than two stars)."""

    edges: np.ndarray
    count: np.ndarray
    radius: np.ndarray
    v_r2: np.ndarray
    v_t2: np.ndarray
    beta: np.ndarray
    v_r2_err: np.ndarray
    v_t2_err: np.ndarray
    beta_err: np.ndarray

    @property
    def sigma_r(self) -> np.ndarray:
        """sqrt(<v_r^2>) (velocity)."""
        return np.sqrt(self.v_r2)

    @property
    def sigma_t(self) -> np.ndarray:
        """sqrt(<v_t^2>) (velocity; both tangential components together)."""
        return np.sqrt(self.v_t2)

    @property
    def sigma_r_err(self) -> np.ndarray:
        """Standard error of `sigma_r`: delta method, err(<v_r^2>) / (2 sigma_r)."""
        return self.v_r2_err / (2.0 * self.sigma_r)

    @property
    def sigma_t_err(self) -> np.ndarray:
        """Standard error of `sigma_t`: err(<v_t^2>) / (2 sigma_t)."""
        return self.v_t2_err / (2.0 * self.sigma_t)


class RotationCurve(NamedTuple):
    """Per cylindrical bin (bins,): star count, mass-weighted mean R, mean v_phi and
    its standard error; `edges` (bins + 1,). NaN as in `AnisotropyProfile`."""

    edges: np.ndarray
    count: np.ndarray
    radius: np.ndarray
    v_phi: np.ndarray
    v_phi_err: np.ndarray


def _as_arrays(positions, velocities, weights, edges, centre):
    x = np.asarray(positions, dtype=np.float64)
    v = np.asarray(velocities, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 3 or v.shape != x.shape:
        raise ValueError(f"positions and velocities must have the same shape (n, 3), got {x.shape} and {v.shape}")
    if w.shape != (x.shape[0],):
        raise ValueError(f"weights must have shape ({x.shape[0]},), got {w.shape}")
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise ValueError(f"edges must be an increasing 1D array of at least 2 values, got {e!r}")
    if centre is not None:
        x = x - np.asarray(centre, dtype=np.float64)
    return x, v, w, e


class _Bins:
    """Stars with positive weight in [edges[k], edges[k+1]); weighted bin means and
    their sandwich covariances (module docstring)."""

    def __init__(self, radius: np.ndarray, w: np.ndarray, edges: np.ndarray):
        bins = edges.size - 1
        index = np.searchsorted(edges, radius, side="right") - 1
        inside = (index >= 0) & (index < bins) & (w > 0)
        self.index, self.w, self.bins = index[inside], w[inside], bins
        self.inside = inside
        self.count = np.bincount(self.index, minlength=bins)
        self.weight = np.bincount(self.index, weights=self.w, minlength=bins)
        self.weight2 = np.bincount(self.index, weights=self.w**2, minlength=bins)

    def _sum(self, y: np.ndarray) -> np.ndarray:
        return np.bincount(self.index, weights=y, minlength=self.bins)

    def mean(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._sum(self.w * y[self.inside]) / self.weight

    def covariance(self, y: np.ndarray, z: np.ndarray, y_mean: np.ndarray, z_mean: np.ndarray) -> np.ndarray:
        """Sandwich covariance of the bin means of y and z (NaN with < 2 stars)."""
        dy = y[self.inside] - y_mean[self.index]
        dz = z[self.inside] - z_mean[self.index]
        n = self.count.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 1, n / (n - 1), np.nan) * self._sum(self.w**2 * dy * dz) / self.weight**2


def anisotropy_profile(
    positions: ArrayLike,
    velocities: ArrayLike,
    weights: ArrayLike,
    edges: ArrayLike,
    centre: ArrayLike | None = None,
) -> AnisotropyProfile:
    r"""<v_r^2>, <v_t^2> and $\beta = 1 - \langle v_t^2\rangle / (2\langle v_r^2\rangle)$
    in radial bins, with standard errors (module docstring).

    **Arguments:**

    - `positions`, `velocities`: (n, 3), e.g. pc and km/s; velocities in the
      cluster's frame.
    - `weights`: (n,) star weights, e.g. `masses * ic.weights` (mass-weighted
      moments); stars of weight 0 are left out.
    - `edges`: (bins + 1,) increasing radii of the bin edges (same length unit).
    - `centre`: (3,) the centre the radii are measured from (default the origin).

    **Returns:** an `AnisotropyProfile` of arrays (bins,).
    """
    x, v, w, e = _as_arrays(positions, velocities, weights, edges, centre)
    r = np.sqrt((x * x).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        v_r = np.where(r > 0, (x * v).sum(axis=1) / np.where(r > 0, r, 1.0), 0.0)
    vr2 = v_r * v_r
    vt2 = np.maximum((v * v).sum(axis=1) - vr2, 0.0)
    bins = _Bins(r, w, e)
    R, T = bins.mean(vr2), bins.mean(vt2)
    var_R = bins.covariance(vr2, vr2, R, R)
    var_T = bins.covariance(vt2, vt2, T, T)
    cov_TR = bins.covariance(vt2, vr2, T, R)
    with np.errstate(invalid="ignore", divide="ignore"):
        beta = 1.0 - T / (2.0 * R)
        d_T, d_R = -1.0 / (2.0 * R), T / (2.0 * R * R)
        var_beta = d_T**2 * var_T + d_R**2 * var_R + 2.0 * d_T * d_R * cov_TR
    return AnisotropyProfile(
        edges=e,
        count=bins.count,
        radius=bins.mean(r),
        v_r2=R,
        v_t2=T,
        beta=beta,
        v_r2_err=np.sqrt(var_R),
        v_t2_err=np.sqrt(var_T),
        beta_err=np.sqrt(np.maximum(var_beta, 0.0)),
    )


def rotation_curve(
    positions: ArrayLike,
    velocities: ArrayLike,
    weights: ArrayLike,
    edges: ArrayLike,
    centre: ArrayLike | None = None,
) -> RotationCurve:
    r"""Mass-weighted mean $v_\phi$ in bins of cylindrical radius R about the z axis,
    with its standard error (module docstring).

    **Arguments:** as `anisotropy_profile`; `edges` are cylindrical radii and
    `centre` a point on the rotation axis (default the origin).

    **Returns:** a `RotationCurve` of arrays (bins,); v_phi in velocity units,
    positive for prograde stars (L_z > 0).
    """
    x, v, w, e = _as_arrays(positions, velocities, weights, edges, centre)
    R = np.hypot(x[:, 0], x[:, 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        v_phi = np.where(R > 0, (x[:, 0] * v[:, 1] - x[:, 1] * v[:, 0]) / np.where(R > 0, R, 1.0), 0.0)
    bins = _Bins(R, w, e)
    mean = bins.mean(v_phi)
    return RotationCurve(
        edges=e,
        count=bins.count,
        radius=bins.mean(R),
        v_phi=mean,
        v_phi_err=np.sqrt(bins.covariance(v_phi, v_phi, mean, mean)),
    )


def _isotropic_factor(ra: float | None) -> float:
    """1 / ra^2, with ra = None (isotropic) as ra = infinity."""
    return 0.0 if ra is None else 1.0 / float(ra) ** 2


def _rho_sigma_r2(r: float, density: Callable, enclosed_mass: Callable, inv_ra2: float, G: float) -> float:
    from scipy.integrate import quad  # scipy's integrator only for this forward-only check (start-up time)

    def integrand(s):
        return (1.0 + s * s * inv_ra2) * float(density(s)) * G * float(enclosed_mass(s)) / (s * s)

    value = quad(integrand, r, np.inf, epsabs=0.0, epsrel=1e-11, limit=200)[0]
    return value / (1.0 + r * r * inv_ra2)


def osipkov_merritt_jeans(
    r: ArrayLike,
    density: Callable,
    enclosed_mass: Callable,
    ra: float | None,
    *,
    G: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""$\sigma_r^2(r)$ and $\sigma_t^2(r) = 2(1 - \beta)\sigma_r^2$ of the Jeans
    equation with $\beta = r^2/(r^2 + r_a^2)$ (module docstring), by quadrature.

    **Arguments:**

    - `r`: radii (> 0) to evaluate at.
    - `density`, `enclosed_mass`: callables of one radius (float) returning
      $\rho(r)$ and $M(<r)$, in units consistent with `G`.
    - `ra`: the anisotropy radius, or None (isotropic).
    - `G`: the gravitational constant in those units (1: N-body units).

    **Returns:** `(sigma_r2, sigma_t2)`, arrays of the shape of `r`.
    """
    radii = np.asarray(r, dtype=np.float64)
    inv_ra2 = _isotropic_factor(ra)
    flat = radii.ravel()
    sr2 = np.array([_rho_sigma_r2(s, density, enclosed_mass, inv_ra2, G) / float(density(s)) for s in flat])
    beta = flat * flat * inv_ra2 / (1.0 + flat * flat * inv_ra2)
    return sr2.reshape(radii.shape), (2.0 * (1.0 - beta) * sr2).reshape(radii.shape)


def osipkov_merritt_jeans_binned(
    edges: ArrayLike,
    density: Callable,
    enclosed_mass: Callable,
    ra: float | None,
    *,
    G: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Mass-weighted means over radial bins of `osipkov_merritt_jeans`'s
    $\sigma_r^2$ and $\sigma_t^2$: $\int 4\pi r^2 \rho\,\sigma^2 dr / \int 4\pi r^2\rho\,dr$
    over each bin, the prediction for `anisotropy_profile`'s `v_r2` and `v_t2`
    with mass weights.

    **Arguments:** `edges` (bins + 1,) increasing radii (the first may be 0);
    the rest as `osipkov_merritt_jeans`.

    **Returns:** `(sigma_r2, sigma_t2)`, arrays (bins,).
    """
    from scipy.integrate import quad  # scipy's integrator only for this forward-only check (start-up time)

    e = np.asarray(edges, dtype=np.float64)
    inv_ra2 = _isotropic_factor(ra)

    def shell(s, which):
        rs2 = _rho_sigma_r2(s, density, enclosed_mass, inv_ra2, G) if s > 0 else 0.0
        tangential = 2.0 / (1.0 + s * s * inv_ra2)  # 2 (1 - beta)
        return s * s * rs2 * (1.0 if which == "r" else tangential)

    out = np.empty((2, e.size - 1))
    for k, (lo, hi) in enumerate(zip(e[:-1], e[1:])):
        mass = quad(lambda s: s * s * float(density(s)), lo, hi, epsrel=1e-11)[0]
        for j, which in enumerate(("r", "t")):
            out[j, k] = quad(lambda s: shell(s, which), lo, hi, epsrel=1e-10)[0] / mass
    return out[0], out[1]
