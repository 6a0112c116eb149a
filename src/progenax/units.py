r"""Unit systems: physical (pc, Msun, km/s) and Henon N-body units.

A `Units` value records how big one code unit of length, mass and velocity is in
physical units, and the gravitational constant in code units:

- **physical** (default): length 1 pc, mass 1 Msun, velocity 1 km/s,
  $G = 4.300917270\times10^{-3}\ \mathrm{pc\,M_\odot^{-1}\,(km/s)^2}$.
- **Henon** (N-body) units: $G = M = 1$ and the length unit is the virial radius
  $r_v = G M^2 / (2|W|)$, so that the total energy of a cluster in virial
  equilibrium ($Q = 1/2$) is $E = -1/4$. The velocity unit is $\sqrt{G M / r_v}$.

Using the virial radius rather than $-G M^2/(4E)$ keeps the conversion defined for
clusters that are not in equilibrium (any Q, even unbound ones); the two agree at
$Q = 1/2$.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._types import ArrayLike, Scalar
from .validation import array_module, check_count

G_PHYSICAL = 4.300917270e-3
"""Gravitational constant in pc Msun^-1 (km/s)^2."""

PC_KM = 3.0856775814913673e13
"""One parsec in km."""

MYR_S = 3.15576e13
"""One mega-year (Julian) in s."""


class Units(eqx.Module):
    """A unit system: the size of one code unit in pc, Msun and km/s.

    **Arguments:**

    - `name`: "physical" or "henon" (static).
    - `length_pc`, `mass_msun`, `velocity_kms`: one code unit of length, mass and
      velocity expressed in pc, Msun and km/s.
    """

    name: str = eqx.field(static=True)
    length_pc: Scalar
    mass_msun: Scalar
    velocity_kms: Scalar

    def __check_init__(self):
        # Concrete scales are checked on the host (a traced one, inside `jit`, is
        # the caller's): a zero or NaN scale made every converted value NaN.
        if self.name not in UNIT_SYSTEMS:
            raise ValueError(f"units name must be one of {UNIT_SYSTEMS}, got {self.name!r}")
        for field in ("length_pc", "mass_msun", "velocity_kms"):
            value = getattr(self, field)
            if isinstance(value, jax.core.Tracer):
                continue
            value = np.asarray(value)
            if not np.all(np.isfinite(value) & (value > 0)):
                raise ValueError(
                    f"the {self.name} unit {field} must be > 0 and finite, got {value}"
                    + (" (a cluster with no mass, or all its stars at one point?)" if self.name == "henon" else "")
                )

    @property
    def G(self) -> Scalar:
        """Gravitational constant in these units.

        Of concrete units it is computed on the host (NumPy, the same bits), so
        that writing or printing a cluster compiles nothing: as eager jnp
        operations it compiled three one-op programs, about 0.08 s of a
        command-line run with an empty compilation cache. Traced units (inside
        `jit` or a gradient) give a traced G."""
        fields = (self.mass_msun, self.length_pc, self.velocity_kms)
        xp = array_module(*fields)
        mass, length, velocity = (xp.asarray(f) for f in fields)
        return G_PHYSICAL * mass / (length * velocity**2)

    @property
    def time_myr(self) -> Scalar:
        """One code unit of time (length / velocity) in Myr."""
        return self.length_pc * PC_KM / self.velocity_kms / MYR_S


def physical_units() -> Units:
    """pc, Msun, km/s (G = 4.300917270e-3)."""
    one = jax.device_put(1.0)  # weakly typed, as jnp.asarray(1.0), which compiles a one-op program eagerly
    return Units("physical", one, one, one)


def henon_units(total_mass_msun: ArrayLike, virial_radius_pc: ArrayLike) -> Units:
    r"""Henon units for a cluster of total mass M (Msun) and virial radius r_v (pc).

    The velocity unit is $\sqrt{G M / r_v}$ km/s, so that $G = 1$ in these units.
    """
    if all(type(x) is float for x in (total_mass_msun, virial_radius_pc)):
        # Python floats (not NumPy's float64, a subclass that is not weakly typed): computed
        # on the host in the default float dtype, the same bits and weak types as below,
        # which eagerly compiles three one-op programs.
        real = jnp.result_type(float).type
        m, r = real(total_mass_msun), real(virial_radius_pc)
        v = np.sqrt(real(G_PHYSICAL) * m / r)
        return Units("henon", *(jax.device_put(float(x)) for x in (r, m, v)))
    m = jnp.asarray(total_mass_msun)
    r = jnp.asarray(virial_radius_pc)
    v = jnp.sqrt(G_PHYSICAL * m / r)
    return Units("henon", r, m, v)


UNIT_SYSTEMS = ("physical", "henon")


HENON_MIN_N = 2
"""The fewest stars Henon units are defined for: one star has no potential
energy, so no virial radius (the length unit) and no finite velocity unit."""


def check_henon_count(n: int) -> int:
    """`n` (static), or `ValueError` if Henon units cannot be set for n stars."""
    return check_count("n", n, HENON_MIN_N, "for units='henon' (one star has no virial radius, the length unit)")


def check_units_name(units: str, n: int | None = None) -> str:
    """Validate a unit-system name eagerly (a static choice), and with `n` that
    the cluster has enough stars for it (`check_henon_count`)."""
    if units not in UNIT_SYSTEMS:
        raise ValueError(f"units must be one of {UNIT_SYSTEMS}, got {units!r}")
    if units == "henon" and n is not None:
        check_henon_count(n)
    return units
