r"""Tidal truncation with soft membership weights, and Jacobi radii.

`apply_tidal_truncation(ic, r_t)` does not remove stars (shapes never depend on
data): it multiplies each star's membership weight by

$$w_i = \sigma\!\left(\kappa\, \frac{r_t - r_i}{r_t}\right), \qquad
\sigma(z) = \frac{1}{1 + e^{-z}},$$

a sigmoid step of width $1/\kappa$ in units of $r_t$ centred on $r_t$ (weight 1/2
at $r = r_t$, $1/(1 + e^{\kappa/10}) $ at $1.1\,r_t$...). It is differentiable in
the positions, $r_t$ and $\kappa$. `mode="hard"` gives exact weights 0 or 1
($r_i \le r_t$ kept) for forward-only use: its gradient with respect to $r_t$
is zero. Consumers weight each star by `ic.weights` (energies, radii, writers).

Jacobi (tidal) radii of a cluster of mass $m$ on a circular orbit of radius $R$
in a host with angular frequency $\Omega$:
$r_J = \left(G m / (\Omega^2 - \partial^2\Phi/\partial R^2)\right)^{1/3}$, i.e.

- point-mass host $M$: $r_J = R\,\left(m / 3M\right)^{1/3}$;
- flat rotation curve $V_c$ (singular isothermal host):
  $r_J = \left(G m R^2 / 2 V_c^2\right)^{1/3}$.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import Array, ArrayLike, Scalar
from ..sampling import safe_norm
from ..state import InitialConditions
from ..units import G_PHYSICAL
from ..validation import check_argument, check_finite, check_range

MODES = ("sigmoid", "hard")


def tidal_weights(radii: ArrayLike, r_t: ArrayLike, kappa: ArrayLike = 10.0, mode: str = "sigmoid") -> Array:
    """Membership weight of stars at `radii` for a tidal radius `r_t` (see module)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    radii = jnp.asarray(radii)
    r_t = check_range("r_t", r_t, lower=0.0)
    kappa = check_range("kappa", kappa, lower=0.0)
    if mode == "hard":
        return (radii <= r_t).astype(radii.dtype)
    return jax.nn.sigmoid(kappa * (r_t - radii) / r_t)


def apply_tidal_truncation(
    ic: InitialConditions,
    r_t: ArrayLike,
    kappa: ArrayLike = 10.0,
    mode: str = "sigmoid",
    *,
    centre: ArrayLike | None = None,
) -> InitialConditions:
    r"""Soft (or hard) truncation of a cluster at the tidal radius `r_t`.

    **Arguments:**

    - `ic`: the cluster; `r_t` (> 0) is in its length unit (pc for physical
      units, the Henon length unit otherwise).
    - `kappa`: sharpness (> 0): the weight drops from 0.73 to 0.27 between
      $r_t (1 \mp 1/\kappa)$. Checked but otherwise unused for `mode="hard"`.
    - `mode`: "sigmoid" (differentiable) or "hard" (exact 0/1, forward only).
    - `centre`: (3,) centre for the radii; default the model's centre (the
      origin) for a model whose builder leaves the stars about it
      (`CENTRE_POSITIONS` False: EFF, Dehnen, King/LIMEPY, whose centre of mass
      can scatter far: 4.8e3 pc for an untruncated EFF with gamma = 2.5),
      else the centre of mass (unweighted by the current weights).

    **Returns:** `ic` with `weights` multiplied by the truncation weights (so
    truncations compose) and `params["r_t_tidal"]` recorded. Positions,
    velocities and masses are unchanged.
    """
    s = ic.state
    if centre is None and not getattr(ic.model, "CENTRE_POSITIONS", True):
        centre = jnp.zeros(3, s.positions.dtype)
    elif centre is None:
        centre = jnp.sum(s.masses[:, None] * s.positions, axis=0) / jnp.sum(s.masses)
    check_finite("centre", centre)  # a NaN centre made every weight NaN
    x = s.positions - jnp.asarray(centre, s.positions.dtype)
    r = safe_norm(x)
    w = tidal_weights(r, r_t, kappa, mode)
    params = {**ic.params, "r_t_tidal": jnp.asarray(r_t, r.dtype)}
    ic = eqx.tree_at(lambda c: c.params, ic, params)
    return eqx.tree_at(lambda c: c.weights, ic, ic.weights * w)


def jacobi_radius_point_mass(cluster_mass: ArrayLike, host_mass: ArrayLike, R: ArrayLike) -> Scalar:
    r"""$r_J = R\,(m / 3M)^{1/3}$ for a point-mass host (lengths in the unit of R)."""
    m = check_range("cluster_mass", cluster_mass, lower=0.0)
    M = check_range("host_mass", host_mass, lower=0.0)
    R = check_range("R", R, lower=0.0)
    return R * (m / (3.0 * M)) ** (1.0 / 3.0)


def jacobi_radius_flat_rotation(
    cluster_mass: ArrayLike, V_c: ArrayLike, R: ArrayLike, *, G: ArrayLike = G_PHYSICAL
) -> Scalar:
    r"""$r_J = (G m R^2 / 2 V_c^2)^{1/3}$ for a flat rotation curve host.

    Physical units by default: m in Msun, V_c in km/s, R in pc, r_J in pc
    (G = 4.3009e-3 pc Msun^-1 (km/s)^2). For the Sun's orbit (R = 8,000 pc,
    V_c = 220 km/s) a 10^4 Msun cluster has r_J of about 31 pc.
    """
    m = check_range("cluster_mass", cluster_mass, lower=0.0)
    V_c = check_range("V_c", V_c, lower=0.0)
    R = check_range("R", R, lower=0.0)
    G = check_argument("G", G, lower=0.0)
    return (G * m * R**2 / (2.0 * V_c**2)) ** (1.0 / 3.0)
