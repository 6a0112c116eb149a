r"""The Dehnen (1993) family of cusped spheres: Hernquist ($\gamma = 1$), Jaffe ($\gamma = 2$).

With inner slope $\gamma \in [0, 3)$ ($[0, 2.5)$ for a cluster: `GAMMA_MAX`), scale radius $a$ and $X = r/(r+a)$
(Dehnen 1993, MNRAS 265, 250; Tremaine et al. 1994, AJ 107, 634):

$$\rho(r) = \frac{(3-\gamma) M a}{4\pi r^\gamma (r+a)^{4-\gamma}},\qquad
M(<r) = M X^{3-\gamma},\qquad
\Phi(r) = -\frac{GM}{a}\,\frac{1 - X^{2-\gamma}}{2-\gamma}
\ \ \Big(\tfrac{GM}{a}\ln X \text{ at } \gamma = 2\Big).$$

With $p = 2-\gamma$ and $L = \ln X \le 0$, $(1 - X^p)/p = -\mathrm{expm1}(pL)/p$,
which is written as its Taylor series in $pL$ where $|pL| < 10^{-2}$, so $\Phi$ is
smooth and differentiable in $\gamma$ through $\gamma = 2$. The half-mass radius
$r_h$ sets $a = r_h\,(2^{1/(3-\gamma)} - 1)$.

Radii invert $M(<r)$ exactly, $r = a\,s/(1-s)$ with $s = u^{1/(3-\gamma)}$; speeds
come from the model's isotropic DF by the generic Eddington inversion
(`progenax.models.eddington`), or, with `ra` (pc), from the Osipkov-Merritt DF
of its augmented density (`osipkov_merritt.sample_osipkov_merritt`; the consistency
limit, `osipkov_merritt.osipkov_merritt_limit`, e.g. 0.20 a for Hernquist). The
density falls as $r^{-4}$, so the centre of mass of a sample has infinite variance:
positions stay about the model centre.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._fusion import materialize
from .._types import Array, ArrayLike
from ..sampling import uniform_open
from ..units import G_PHYSICAL
from ._base import ANISOTROPY_RADIUS, AbstractClusterModel, Interval, Parameter, optional_array
from ._math import one_minus_exp_over

_LN2 = float(np.log(2.0))

GAMMA_MAX = 2.5
"""The builders' bound on gamma (exclusive). The density is a model up to 3,
but W = -G M^2 / (2a (5 - 2 gamma)) diverges at 5/2: a sample's innermost star
then has a speed without bound (gamma = 2.8: 99.5% of the stars unbound with
the model's own velocities, 1e38 km/s at 2.95), and T/|W| means nothing. Just
below it a sample's W and T are dominated by its few innermost stars (gamma =
2.45, n = 5,000, the model's velocities: T/|W| 0.61 and 0.48 at two keys)."""


def dehnen_scale_radius(r_h: ArrayLike, gamma: ArrayLike) -> Array:
    r"""Scale radius $a = r_h (2^{1/(3-\gamma)} - 1)$ (pc)."""
    return jnp.asarray(r_h) * jnp.expm1(_LN2 / (3.0 - jnp.asarray(gamma)))


def _log_x(r: Array, a: Array) -> tuple[Array, Array]:
    """(r > 0, ln(r / (r + a))), gradient-safe: r = 0 lanes evaluate at r = a instead."""
    pos = r > 0
    return pos, -jnp.log1p(a / jnp.where(pos, r, a))


class Dehnen(AbstractClusterModel):
    """Dehnen sphere of inner slope `gamma` and 3D half-mass radius `r_h` (pc)."""

    NAME: ClassVar[str] = "dehnen"
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = (
        Parameter(
            "gamma",
            Interval(0.0, GAMMA_MAX, lower_inclusive=True),
            1.0,
            "inner density slope (< 2.5: the potential energy diverges from there on)",
            audit=(1.0, (0.05, 2.45)),
        ),
        Parameter("r_h", Interval(0.0), 1.0, "3D half-mass radius", "pc", audit=(1.0, (1e-3, 1e3))),
        ANISOTROPY_RADIUS,
    )
    CENTRE_POSITIONS: ClassVar[bool] = False

    gamma: Array = eqx.field(converter=jnp.asarray)
    r_h: Array = eqx.field(converter=jnp.asarray)
    total_mass: Array = eqx.field(default=1.0, converter=jnp.asarray)
    G: float = eqx.field(static=True, default=G_PHYSICAL)
    ra: Array | None = eqx.field(default=None, converter=optional_array)

    @property
    def scale_radius(self) -> Array:
        """Scale radius a (pc)."""
        return dehnen_scale_radius(self.r_h, self.gamma)

    def mass_fraction(self, r: ArrayLike) -> Array:
        pos, L = _log_x(jnp.asarray(r), self.scale_radius)
        return jnp.where(pos, jnp.exp((3.0 - self.gamma) * L), 0.0)

    def density(self, r: ArrayLike) -> Array:
        r, a, g = jnp.asarray(r), self.scale_radius, jnp.asarray(self.gamma)
        pos, L = _log_x(r, a)
        r_s = jnp.where(pos, r, a)
        # r^-g (r + a)^(g-4) = e^(-g L) (a / (r + a))^4 / a^4: (r + a)^4 itself
        # overflows float32 beyond r ~ 1e9 a, inside the DF's grid (to e^36 r_h).
        rho = (3.0 - g) * self.total_mass / (4.0 * np.pi * a**3) * jnp.exp(-g * L) * (a / (r_s + a)) ** 4
        centre = jnp.where(g > 0, jnp.inf, 3.0 * self.total_mass / (4.0 * np.pi * a**3))
        return jnp.where(pos, rho, centre)

    def potential(self, r: ArrayLike) -> Array:
        r, a, g = jnp.asarray(r), self.scale_radius, jnp.asarray(self.gamma)
        pos, L = _log_x(r, a)
        p = 2.0 - g
        scale = self.G * self.total_mass / a
        centre = jnp.where(p > 0, -scale / jnp.where(p > 0, p, 1.0), -jnp.inf)
        return jnp.where(pos, -scale * one_minus_exp_over(p, L), centre)

    def sample_radii(self, key: Array, n: int, dtype) -> Array:
        """Exact inverse of M(<r): r = a s / (1 - s), s = u^(1/(3 - gamma))."""
        log_s = jnp.log(uniform_open(key, (n,), dtype)) / (3.0 - jnp.asarray(self.gamma, dtype))
        a = jnp.asarray(self.scale_radius, dtype)
        return materialize(a * jnp.exp(log_s) / -jnp.expm1(log_s))
