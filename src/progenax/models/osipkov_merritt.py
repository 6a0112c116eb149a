r"""Osipkov-Merritt anisotropy for any spherical model, through the generic Eddington path.

**Osipkov-Merritt.** $f(Q)$, $Q = \mathcal E - L^2/(2r_a^2)$, is Eddington's formula
applied to the augmented density $\rho_Q = (1 + r^2/r_a^2)\rho$; being linear in the
density, it is $f_0 + (r_h/r_a)^2 f_2$ with $f_0$, $f_2$ the inversions of $\rho$ and
$(r/r_h)^2\rho$, stacked in one pass of `df_at_radius` (`osipkov_merritt_parts`).
$f \ge 0$ everywhere iff $r_a \ge r_h\sqrt{\max(-f_2/f_0)}$ (`osipkov_merritt_limit`;
Plummer: $0.75\,a$ to $2\times10^{-7}$). The speed table and sampler are the isotropic
ones with $f(Q)$ in place of $f(\mathcal E)$, for the pseudo-speed $w$
(`sample_osipkov_merritt`).

**Sampling.** At fixed $r$, with $\mathbf w = (v_r, \mathbf v_t\sqrt{1 + r^2/r_a^2})$,
$Q = \Psi(r) - |\mathbf w|^2/2$ and $d^3v = d^3w/(1 + r^2/r_a^2)$: $f(Q)$ is isotropic
in $\mathbf w$ (`sample_osipkov_merritt`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..sampling import isotropic_directions, safe_sqrt
from ..validation import error_if
from .eddington import df_at_radius, df_nodes, eddington_speed_table, sample_eddington_speeds


def _osipkov_merritt_densities(model):
    r"""$r \mapsto [\rho(r), (r/r_h)^2\rho(r)]$: $\rho_Q = \rho + (r_h/r_a)^2 (r/r_h)^2\rho$."""
    r_h = model.r_h

    def density(r):
        rho = model.density(r)
        return jnp.stack([rho, (r / r_h) ** 2 * rho])

    return density


def osipkov_merritt_parts(model, x: ArrayLike) -> tuple[Array, Array]:
    r"""$(f_0, f_2)$ at $Q = \Psi(r_h e^x)$: the Osipkov-Merritt DF is
    $f(Q) = f_0(Q) + (r_h/r_a)^2 f_2(Q)$.

    Eddington's inversion is linear in the density, so the inversion of the
    augmented density $\rho_Q = (1 + r^2/r_a^2)\rho$ is that of $\rho$ ($f_0$, the
    isotropic DF) plus $(r_h/r_a)^2$ times that of $(r/r_h)^2\rho$ ($f_2$), both in
    one pass of `df_at_radius`. Msun pc^-3 (km/s)^-3.
    """
    f = df_at_radius(model, x, density=_osipkov_merritt_densities(model))
    return f[0], f[1]


def _terms(model, ra: ArrayLike, x: ArrayLike) -> tuple[Array, Array]:
    r"""$f_0$ and $(r_h/r_a)^2 f_2$ at $Q = \Psi(r_h e^x)$: the two terms of $f(Q)$."""
    f0, f2 = osipkov_merritt_parts(model, x)
    return f0, (jnp.asarray(model.r_h, f0.dtype) / ra) ** 2 * f2


def osipkov_merritt_df(model, ra: ArrayLike, x: ArrayLike) -> Array:
    r"""The Osipkov-Merritt $f(Q)$, $Q = \mathcal E - L^2/(2r_a^2)$, at $Q = \Psi(r_h e^x)$ (`ra` in pc)."""
    f0, f2 = _terms(model, ra, x)
    return f0 + f2


def osipkov_merritt_limit(model) -> Array:
    r"""The smallest consistent anisotropy radius (pc): $f(Q) \ge 0$ for all $Q$ iff
    $r_a \ge r_h \sqrt{\max_Q(-f_2/f_0)}$ (0 when $f_2 \ge 0$ everywhere), on the
    DF table's nodes ($x \in [-10, 30]$) whose terms are resolved (`_resolved`:
    in float32 Plummer's tail is noise, and the ratio there read 66,024 pc).
    Plummer: $0.75\,a$ (to $2\times10^{-7}$)."""
    f0, f2 = osipkov_merritt_parts(model, df_nodes(model, jnp.result_type(model.r_h, float)))
    counted = (f0 > 0) & _resolved(f2)
    ratio = jnp.max(jnp.where(counted, -f2 / jnp.where(counted, f0, 1.0), 0.0))
    return model.r_h * safe_sqrt(ratio)


def _resolved(f2: Array) -> Array:
    """The DF nodes whose anisotropic term $f_2$ is resolved: $|f_2|$ above
    eps^(3/4) of its largest (2e-12 in float64, 6e-6 in float32). Where $f_2$
    is resolved its sign is, so neither the limit nor the f >= 0 check reads
    noise: in float32 Plummer's $f_2$ beyond e^8 r_h is noise of about 1e-6 of
    its largest and turned negative, where $f_0$ (itself resolved to about
    1e-15 of its largest) is tiny, so the ratio read 66,024 pc. Against the
    sum of both terms' largest instead, a cusp's $f_0$ (Dehnen gamma = 1:
    1e12 at x = -10) hid the nodes that set its limit (x = -1.4, $f_0$ = 1.5e3)
    and the float32 limit read 0.0057 a for 0.20 a."""
    scale = jnp.abs(f2)
    return scale > float(np.finfo(scale.dtype).eps) ** 0.75 * jnp.max(scale)


OSIPKOV_MERRITT_LIMIT_MESSAGE = (
    "ra is below the model's Osipkov-Merritt consistency limit: its f(Q) is negative somewhere; ra must be "
    ">= progenax.models.osipkov_merritt.osipkov_merritt_limit(model) (pc; Plummer: 0.75 a = 0.575 r_h)"
)


_QUADRATURE_ERROR = 1e-6
"""The Eddington quadrature's worst relative error (`models.eddington`: Plummer's f
at x = -10, deep in the core; 6e-12 for most energies)."""


def checked_df(model, ra: Array, x_f: Array) -> Array:
    """The Osipkov-Merritt f at the table's nodes, with its f >= 0 check (`error_if`)."""
    f0, f2 = _terms(model, ra, x_f)
    f = f0 + f2
    # f >= 0 up to rounding and the quadrature's error at each node: 1e-6 of the
    # two terms summed there in float64 (the quadrature's worst, deep in a core
    # at x = -10, where Plummer's f at its limit dips to -2.3e-7 of them), sqrt(eps)
    # = 3.5e-4 in float32, so ra at the limit passes; at nodes whose terms are
    # resolved (`_resolved`). Against the largest |f| instead, a cusp's (Dehnen,
    # Hernquist: 1e8 above the halo's) let whole negative regions through:
    # Hernquist at half its limit built, with T/|W| 0.29.
    eps = float(np.finfo(f.dtype).eps)
    terms = jnp.abs(f0) + jnp.abs(f2)
    floor = max(float(np.sqrt(eps)), _QUADRATURE_ERROR) * terms
    bad = jnp.any((f < -floor) & _resolved(f2))
    # At the limit f touches 0 at one energy: ln f there (clipped at the smallest
    # float) made the table's Hermite interpolation dip over a wide range of
    # energies (Hernquist at its limit: T/|W| 0.34). Floored at the rounding
    # level of its terms, f is unchanged wherever it is resolved.
    return error_if(jnp.maximum(f, floor), bad, OSIPKOV_MERRITT_LIMIT_MESSAGE)


def osipkov_merritt_velocities(pseudo: Array, directions: Array, radii: Array, ra: ArrayLike) -> Array:
    r"""Velocities (km/s) from pseudo-velocities $\mathbf w$ isotropic about each star.

    $v_r = \mathbf w\cdot\hat{\mathbf r}$ and $\mathbf v_t = \mathbf w_t / \sqrt{1 + r^2/r_a^2}$:
    in $\mathbf w = (v_r, \mathbf v_t\sqrt{1 + r^2/r_a^2})$, $Q = \Psi - |\mathbf w|^2/2$,
    so $f(Q)$ is isotropic in $\mathbf w$ (`directions` are the stars' unit radial vectors).
    """
    w_r = jnp.sum(pseudo * directions, axis=-1, keepdims=True)
    radial = w_r * directions
    stretch = jnp.sqrt(1.0 + (radii / ra) ** 2)[:, None]
    return radial + (pseudo - radial) / stretch


def sample_osipkov_merritt(model, ra: ArrayLike, keys: tuple[Array, Array], radii: Array, directions: Array) -> Array:
    r"""Velocities (km/s) of stars at `radii` (pc, unit radial vectors `directions`)
    from the Osipkov-Merritt DF $f(Q)$, $Q = \mathcal E - L^2/(2r_a^2)$ (`ra` in pc).

    At fixed $r$, with $\mathbf w = (v_r, \mathbf v_t\sqrt{1 + r^2/r_a^2})$,
    $Q = \Psi(r) - |\mathbf w|^2/2$ and $d^3v = d^3w/(1 + r^2/r_a^2)$, so
    $p(\mathbf w\,|\,r) \propto f(\Psi - w^2/2)$ is isotropic in $\mathbf w$:
    $w = |\mathbf w|$ is drawn by the fixed-iteration inverse CDF of
    `sample_eddington_speeds` with $f(Q)$ in place of $f(\mathcal E)$ (first key),
    its angle $\eta$ to $\hat{\mathbf r}$ by an isotropic direction ($\cos\eta$
    uniform, second key), and

    $$v_r = w\cos\eta,\qquad v_t = \frac{w\sin\eta}{\sqrt{1 + r^2/r_a^2}}.$$

    Then $\beta(r) = 1 - \sigma_t^2/(2\sigma_r^2) = r^2/(r^2 + r_a^2)$, the density
    is the model's ($\int f\,d^3v = \rho_Q/(1 + r^2/r_a^2) = \rho$), and every star
    is bound ($\mathcal E \ge Q \ge 0$). Differentiable in `ra`, the radii and
    the model's parameters.
    """
    k_speed, k_dir = keys
    ra = jnp.asarray(ra, jnp.result_type(model.r_h, float))
    table = eddington_speed_table(model, df=lambda x: checked_df(model, ra, x))
    w = sample_eddington_speeds(model, k_speed, radii, table=table)
    pseudo = w[:, None] * isotropic_directions(k_dir, radii.shape[0], radii.dtype)
    return osipkov_merritt_velocities(pseudo, directions, radii, jnp.asarray(ra, radii.dtype))
