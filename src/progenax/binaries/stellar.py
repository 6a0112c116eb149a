r"""A main-sequence mass-radius relation for the contact limit of close binaries.

$$ \frac{R}{R_\odot} = \begin{cases} (M/M_\odot)^{0.8} & M < M_\odot \\
   (M/M_\odot)^{0.57} & M \ge M_\odot \end{cases} $$

the broken power law usually quoted for zero-age main-sequence stars (e.g.
Kippenhahn & Weigert 1990, *Stellar Structure and Evolution*; the fits of
Demircan & Kahraman 1991, Ap&SS 181, 313, have similar slopes). It is continuous
at $1\,M_\odot$ and good to a few tens of per cent from 0.1 to 50 $M_\odot$, which
is all the contact limit $r_p \ge 2(R_1 + R_2)$ needs.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._types import Array, ArrayLike
from ..units import PC_KM

RSUN_KM = 6.957e5
"""Nominal solar radius (IAU 2015 B3) in km."""

RSUN_PC = RSUN_KM / PC_KM
"""Solar radius in pc (2.2546e-8)."""


def main_sequence_radius(mass_msun: ArrayLike) -> Array:
    """Main-sequence radius in Rsun of stars of mass `mass_msun` (Msun); 0 for mass 0."""
    m = jnp.asarray(mass_msun)
    positive = m > 0
    m_safe = jnp.where(positive, m, 1.0)
    # One log and one exp (both cheap on CPU) rather than two powers, one per branch.
    radius = jnp.exp(jnp.where(m_safe < 1.0, 0.8, 0.57) * jnp.log(m_safe))
    return jnp.where(positive, radius, 0.0)
