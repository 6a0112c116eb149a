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

from .._types import Array, ArrayLike, Key
from ..sampling import safe_norm
from ..units import MYR_S
from .kepler import solve_kepler

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


def orbital_period(a: ArrayLike, total_mass: ArrayLike, G: ArrayLike) -> Array:
    r"""$P = 2\pi\sqrt{a^3 / (G M)}$ in code time units."""
    a, total_mass = jnp.asarray(a), jnp.asarray(total_mass)
    return 2.0 * jnp.pi * jnp.sqrt(a**3 / (G * total_mass))


def _frame(inclination: Array, ascending_node: Array, periapsis: Array) -> tuple[Array, Array]:
    """Unit vectors P (to pericentre) and Q (90 degrees ahead), shape (..., 3)."""
    ci, si = jnp.cos(inclination), jnp.sin(inclination)
    cO, sO = jnp.cos(ascending_node), jnp.sin(ascending_node)
    cw, sw = jnp.cos(periapsis), jnp.sin(periapsis)
    P = jnp.stack([cO * cw - sO * sw * ci, sO * cw + cO * sw * ci, sw * si], axis=-1)
    Q = jnp.stack([-cO * sw - sO * cw * ci, -sO * sw + cO * cw * ci, cw * si], axis=-1)
    return P, Q


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
    E = solve_kepler(M, e)
    cE, sE = jnp.cos(E), jnp.sin(E)
    root = jnp.sqrt((1.0 - e) * (1.0 + e))
    P, Q = _frame(inc, node, peri)
    x, y = a * (cE - e), a * root * sE
    # n a / (1 - e cos E) = sqrt(mu / a) / (r / a); r / a = 1 - e cos E.
    speed = jnp.sqrt(G * mass / a) / (1.0 - e * cE)
    vx, vy = -speed * sE, speed * root * cE
    r = x[..., None] * P + y[..., None] * Q
    v = vx[..., None] * P + vy[..., None] * Q
    return r, v


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


def sample_orientations(key: Key, shape: tuple[int, ...], dtype=None) -> tuple[Array, Array, Array, Array]:
    r"""Isotropic orbit orientations and uniform mean anomalies.

    $\cos i \sim U(-1, 1)$, $\Omega, \omega \sim U(0, 2\pi)$ and the **mean**
    anomaly $\mathcal M \sim U(0, 2\pi)$ (uniform in time along the orbit; a
    uniform true anomaly would over-weight pericentre).

    **Returns:** `(inclination, ascending_node, periapsis, mean_anomaly)`, each of `shape`.
    """
    dtype = dtype or jnp.result_type(float)
    k_i, k_node, k_peri, k_mean = jax.random.split(key, 4)
    cos_i = jax.random.uniform(k_i, shape, dtype, -1.0, 1.0)
    node = jax.random.uniform(k_node, shape, dtype, 0.0, 2.0 * jnp.pi)
    peri = jax.random.uniform(k_peri, shape, dtype, 0.0, 2.0 * jnp.pi)
    mean = jax.random.uniform(k_mean, shape, dtype, 0.0, 2.0 * jnp.pi)
    return jnp.arccos(cos_i), node, peri, mean


def binding_energy(a: ArrayLike, m1: ArrayLike, m2: ArrayLike, G: ArrayLike) -> Array:
    r"""Binding energy $E_b = G m_1 m_2 / (2a)$ (positive for a bound pair)."""
    return G * jnp.asarray(m1) * jnp.asarray(m2) / (2.0 * jnp.asarray(a))
