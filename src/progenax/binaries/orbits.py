r"""Two-body orbits: Keplerian elements to relative phase space and back.

For a pair of total mass $M$ (so $\mu = G M$) the relative vector
$\mathbf r = \mathbf x_2 - \mathbf x_1$ follows the ellipse with semi-major axis
$a$, eccentricity $e$, inclination $i$, longitude of the ascending node
$\Omega$, argument of pericentre $\omega$ and mean anomaly $\mathcal M$:

$$ \mathbf r = a(\cos E - e)\,\hat{\mathbf P} + a\sqrt{1-e^2}\sin E\,\hat{\mathbf Q},
\qquad
\mathbf v = \frac{n a}{1 - e\cos E}\left(-\sin E\,\hat{\mathbf P}
  + \sqrt{1-e^2}\cos E\,\hat{\mathbf Q}\right), $$

with $n = \sqrt{\mu/a^3}$, $E$ from Kepler's equation and $\hat{\mathbf P}$,
$\hat{\mathbf Q}$ the first two columns of $R_z(\Omega) R_x(i) R_z(\omega)$.
Kepler's third law links the period: $P = 2\pi\sqrt{a^3/\mu}$.

Units are the caller's: `G` in the code units of length, mass and velocity
(the period then comes in code time units, length/velocity; `DAY_MYR` and
`progenax.Units.time_myr` convert to days). The orbital plane's reference is the
$z = 0$ plane with the node measured from the $x$ axis.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._fusion import materialize
from .._types import Array, ArrayLike, Key
from ..sampling import safe_norm
from ..units import MYR_S
from .kepler import solve_kepler_sin_cos

DAY_MYR = 86400.0 / MYR_S
"""One day in Myr (Julian year)."""


class OrbitalElements(NamedTuple):
    """Keplerian elements of relative orbits (angles in radians).

    - `a`: semi-major axis (code length; negative for an unbound pair),
    - `e`: eccentricity, `inclination` in [0, pi], `ascending_node` and
      `periapsis` (argument of pericentre) in [-pi, pi], `mean_anomaly` in [0, 2 pi)
      (meaningful only for bound pairs).
    """

    a: Array
    e: Array
    inclination: Array
    ascending_node: Array
    periapsis: Array
    mean_anomaly: Array


def semi_major_axis(period: ArrayLike, total_mass: ArrayLike, G: ArrayLike) -> Array:
    r"""$a = (G M P^2 / 4\pi^2)^{1/3}$ (period in code time units)."""
    period, total_mass = jnp.asarray(period), jnp.asarray(total_mass)
    return jnp.cbrt(G * total_mass * (period / (2.0 * jnp.pi)) ** 2)


def semi_major_axis_of_log_period(
    log10_period: ArrayLike, time_unit: ArrayLike, total_mass: ArrayLike, G: ArrayLike
) -> Array:
    r"""`semi_major_axis` for $P = 10^{\ell}$ `time_unit` (code time units), in logarithms:

    $$ a = \exp\tfrac13\left[\ln(G M) + 2\,\ell\ln 10 + 2\ln\frac{t}{2\pi}\right], $$

    one log and one exp, which XLA vectorises on CPU, where $10^{\ell}$ and the
    cube root are scalar calls (relative difference from `semi_major_axis` a
    few ulp: the rounding of $\ell \ln 10$).
    """
    lp, total_mass = jnp.asarray(log10_period), jnp.asarray(total_mass)
    log_time = jnp.log(jnp.asarray(time_unit) / (2.0 * jnp.pi))
    return jnp.exp((jnp.log(G * total_mass) + 2.0 * (lp * np.log(10.0) + log_time)) / 3.0)


def orbital_period(a: ArrayLike, total_mass: ArrayLike, G: ArrayLike) -> Array:
    r"""$P = 2\pi\sqrt{a^3 / (G M)}$ in code time units."""
    a, total_mass = jnp.asarray(a), jnp.asarray(total_mass)
    return 2.0 * jnp.pi * jnp.sqrt(a**3 / (G * total_mass))


class Orientations(NamedTuple):
    r"""Orbit orientations by the cosines and sines of their angles, with the mean anomalies.

    What `elements_to_phase_space` needs of $i$, $\Omega$, $\omega$ is their
    cosines and sines: drawn as such (`draw_orientations`), they cost one
    cosine per angle instead of an arccos and six trigonometric calls.
    """

    cos_i: Array
    sin_i: Array
    cos_node: Array
    sin_node: Array
    cos_peri: Array
    sin_peri: Array
    mean_anomaly: Array

    @classmethod
    def from_angles(cls, inclination, ascending_node, periapsis, mean_anomaly) -> Orientations:
        """From the angles (radians)."""
        return cls(
            jnp.cos(inclination),
            jnp.sin(inclination),
            jnp.cos(ascending_node),
            jnp.sin(ascending_node),
            jnp.cos(periapsis),
            jnp.sin(periapsis),
            mean_anomaly,
        )

    def angles(self) -> tuple[Array, Array, Array, Array]:
        """`(inclination, ascending_node, periapsis, mean_anomaly)`, node and periapsis in [0, 2 pi)."""
        two_pi = 2.0 * jnp.pi
        node = jnp.mod(jnp.arctan2(self.sin_node, self.cos_node), two_pi)
        peri = jnp.mod(jnp.arctan2(self.sin_peri, self.cos_peri), two_pi)
        return jnp.arctan2(self.sin_i, self.cos_i), node, peri, self.mean_anomaly

    def frame(self) -> tuple[Array, Array]:
        """Unit vectors P (to pericentre) and Q (90 degrees ahead), shape (..., 3)."""
        ci, si, cO, sO, cw, sw = self[:6]
        P = jnp.stack([cO * cw - sO * sw * ci, sO * cw + cO * sw * ci, sw * si], axis=-1)
        Q = jnp.stack([-cO * sw - sO * cw * ci, -sO * sw + cO * cw * ci, cw * si], axis=-1)
        return P, Q


def orbit_phase_space(
    a: Array, e: Array, orientations: Orientations, total_mass: Array, G: ArrayLike, *, store: bool = False
) -> tuple[Array, Array]:
    """Relative position and velocity of orbits (a, e) with `orientations` (arrays of one shape).

    `store=True` (static; finite elements only) stores the per-orbit scalars
    once before they are spread over three components (`solve_kepler_sin_cos`).
    """
    _, sE, cE = solve_kepler_sin_cos(orientations.mean_anomaly, e, store=store)
    root = jnp.sqrt((1.0 - e) * (1.0 + e))
    P, Q = orientations.frame()
    x, y = a * (cE - e), a * root * sE
    # n a / (1 - e cos E) = sqrt(mu / a) / (r / a); r / a = 1 - e cos E.
    speed = jnp.sqrt(G * total_mass / a) / (1.0 - e * cE)
    vx, vy = -speed * sE, speed * root * cE
    if store:
        x, y, vx, vy = materialize(jnp.stack([x, y, vx, vy]))
    r = x[..., None] * P + y[..., None] * Q
    v = vx[..., None] * P + vy[..., None] * Q
    return r, v


def elements_to_phase_space(
    a: ArrayLike,
    e: ArrayLike,
    inclination: ArrayLike,
    ascending_node: ArrayLike,
    periapsis: ArrayLike,
    mean_anomaly: ArrayLike,
    total_mass: ArrayLike,
    G: ArrayLike,
) -> tuple[Array, Array]:
    r"""Relative position and velocity ($\mathbf x_2 - \mathbf x_1$, $\mathbf v_2 - \mathbf v_1$).

    **Arguments:** the elements (broadcasting; $0 \le e < 1$, $a > 0$ in code
    length, angles in radians), the pair's total mass and `G` in code units.

    **Returns:** `(r, v)`, each of shape (..., 3). Differentiable in every
    argument (Kepler's equation by the implicit-function theorem).
    """
    args = (a, e, inclination, ascending_node, periapsis, mean_anomaly, total_mass)
    dtype = jnp.result_type(*args, float)
    a, e, inc, node, peri, M, mass = jnp.broadcast_arrays(*(jnp.asarray(x, dtype) for x in args))
    return orbit_phase_space(a, e, Orientations.from_angles(inc, node, peri, M), mass, G)


def phase_space_to_elements(r: ArrayLike, v: ArrayLike, total_mass: ArrayLike, G: ArrayLike) -> OrbitalElements:
    r"""Keplerian elements of relative orbits (the inverse of `elements_to_phase_space`).

    With $\mu = G M$, $\mathbf h = \mathbf r\times\mathbf v$ and
    $\mathbf e = \mathbf v\times\mathbf h/\mu - \hat{\mathbf r}$:
    $a = (2/r - v^2/\mu)^{-1}$, $e = |\mathbf e|$, $\cos i = h_z/h$,
    $\Omega = \operatorname{atan2}(h_x, -h_y)$, $\omega$ the angle from the node to
    $\mathbf e$ and the true anomaly the angle from $\mathbf e$ to $\mathbf r$;
    then $E = 2\operatorname{atan2}(\sqrt{1-e}\sin\frac\nu2, \sqrt{1+e}\cos\frac\nu2)$
    and $\mathcal M = E - e\sin E$.

    `r`, `v` have shape (..., 3), `total_mass` broadcasts with (...). Degenerate
    angles get finite conventional values: $\Omega$ from the $x$ axis when
    $i = 0$, $\omega = 0$ (anomalies from the node) when $e = 0$.
    """
    r, v = jnp.asarray(r), jnp.asarray(v)
    mu = G * jnp.asarray(total_mass)
    rn = safe_norm(r)
    h = jnp.cross(r, v)
    h_norm = safe_norm(h)
    a = 1.0 / (2.0 / rn - jnp.sum(v * v, axis=-1) / mu)
    rhat = r / jnp.where(rn > 0, rn, 1.0)[..., None]
    e_vec = jnp.cross(v, h) / mu[..., None] - rhat
    e = safe_norm(e_vec)
    inclination = jnp.arctan2(safe_norm(h[..., :2]), h[..., 2])
    node = jnp.arctan2(h[..., 0], -h[..., 1])
    n_hat = jnp.stack([jnp.cos(node), jnp.sin(node), jnp.zeros_like(node)], axis=-1)
    hhat = h / jnp.where(h_norm > 0, h_norm, 1.0)[..., None]
    m_hat = jnp.cross(hhat, n_hat)
    # With e = 0 exactly both arguments of atan2 vanish: omega = 0.
    periapsis = jnp.arctan2(jnp.sum(e_vec * m_hat, -1), jnp.sum(e_vec * n_hat, -1))
    latitude = jnp.arctan2(jnp.sum(r * m_hat, -1), jnp.sum(r * n_hat, -1))
    nu = latitude - periapsis
    e_bound = jnp.clip(e, 0.0, 1.0)
    E = 2.0 * jnp.arctan2(jnp.sqrt(1.0 - e_bound) * jnp.sin(0.5 * nu), jnp.sqrt(1.0 + e_bound) * jnp.cos(0.5 * nu))
    mean_anomaly = jnp.mod(E - e_bound * jnp.sin(E), 2.0 * jnp.pi)
    return OrbitalElements(a, e, inclination, node, periapsis, mean_anomaly)


def _unit_circle(u: Array) -> tuple[Array, Array]:
    r"""$(\cos\theta, \sin\theta)$ for $\theta = 2\pi u$: one cosine, and the sine as
    $\pm\sqrt{(1 - c)(1 + c)}$ with the sign of $\sin\theta$ (so $c^2 + s^2 = 1$
    to rounding: a point exactly on the circle, uniform as $\theta$ is)."""
    c = jnp.cos(2.0 * jnp.pi * u)
    s = jnp.sqrt(jnp.maximum((1.0 - c) * (1.0 + c), 0.0))
    return c, jnp.where(u < 0.5, s, -s)


def draw_orientations(key: Key, shape: tuple[int, ...], dtype=None) -> Orientations:
    r"""Isotropic orbit orientations and uniform mean anomalies, as `Orientations`.

    $\cos i \sim U(-1, 1)$ (and $\sin i = \sqrt{(1 - \cos i)(1 + \cos i)}$,
    $i \in [0, \pi]$), $\Omega, \omega \sim U(0, 2\pi)$ by their cosines and sines
    (`_unit_circle`) and the **mean** anomaly $\mathcal M \sim U(0, 2\pi)$
    (uniform in time along the orbit; a uniform true anomaly would over-weight
    pericentre).
    """
    dtype = dtype or jnp.result_type(float)
    k_i, k_node, k_peri, k_mean = jax.random.split(key, 4)
    cos_i = jax.random.uniform(k_i, shape, dtype, -1.0, 1.0)
    sin_i = jnp.sqrt((1.0 - cos_i) * (1.0 + cos_i))
    cos_node, sin_node = _unit_circle(jax.random.uniform(k_node, shape, dtype))
    cos_peri, sin_peri = _unit_circle(jax.random.uniform(k_peri, shape, dtype))
    mean = jax.random.uniform(k_mean, shape, dtype, 0.0, 2.0 * jnp.pi)
    # Stored once: each feeds several components of the frame (see progenax._fusion).
    stored = materialize(jnp.stack([cos_i, sin_i, cos_node, sin_node, cos_peri, sin_peri, mean]))
    return Orientations(*stored)


def sample_orientations(key: Key, shape: tuple[int, ...], dtype=None) -> tuple[Array, Array, Array, Array]:
    r"""Isotropic orbit orientations and uniform mean anomalies, as angles.

    $\cos i \sim U(-1, 1)$, $\Omega, \omega \sim U(0, 2\pi)$ and the **mean**
    anomaly $\mathcal M \sim U(0, 2\pi)$: the angles of `draw_orientations`
    with the same key.

    **Returns:** `(inclination, ascending_node, periapsis, mean_anomaly)`, each of `shape`.
    """
    return draw_orientations(key, shape, dtype).angles()


def binding_energy(a: ArrayLike, m1: ArrayLike, m2: ArrayLike, G: ArrayLike) -> Array:
    r"""Binding energy $E_b = G m_1 m_2 / (2a)$ (positive for a bound pair)."""
    return G * jnp.asarray(m1) * jnp.asarray(m2) / (2.0 * jnp.asarray(a))
