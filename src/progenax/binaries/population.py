r"""Primordial binary populations: companions, orbits and membership weights.

`BinaryPopulation` describes the population (fraction, period, eccentricity and
mass-ratio distributions, pairing mode, physical limits); `sample_binaries`
draws, for n systems, the two masses, the relative orbit and a companion weight.
Every system has a companion slot (fixed shapes); the weight says how much of
it exists.

**Order of the draws** (system by system, one uniform variate each):

1. masses $m_1 \ge m_2$ by the pairing mode (see `PAIRINGS`);
2. the period, from its distribution cut to $[P_c, P_{hs}]$: $P_c$ is the period
   at which a circular orbit touches the contact limit
   $a_c = f_c\,(R_1 + R_2)$ ($f_c$ = `contact_factor`, 2 by default; radii from
   `main_sequence_radius`), $P_{hs}$ the period of the hard/soft boundary
   $G m_1 m_2 / 2a = \langle m\rangle\sigma^2$ when `hard_soft_cap` is on, else
   the distribution's own end;
3. the eccentricity, cut to $[0, 1 - a_c/a]$, so the pericentre
   $a(1 - e) \ge a_c$: wide pairs keep the requested distribution, close ones
   are made rounder, as tidal circularisation would;
4. an isotropic orientation and a uniform **mean** anomaly.

Each step is an inverse CDF, so the orbits are differentiable in every
continuous parameter and in the masses.

**Membership.** With $u_i \sim U(0, 1)$, system $i$ is a binary when
$u_i < f$ ($f$ = `fraction`). The weight is that 0/1 choice (exact, the default)
or, with `fraction_width` $= w$, $\sigma((f - u_i)/w)$: a sigmoid that tends to
the hard choice as $w \to 0$ and makes $\partial/\partial f$ of weighted
observables finite (partial in the hard mode: zero almost everywhere).

**Moe & Di Stefano (2017).** With `period="moe17"` the period, mass ratio and
eccentricity come from the joint, primary-mass-dependent model of `moe17.py`,
and the membership probability is mass dependent: $f\,F_{\rm bin}(m_1)$,
capped at 1, with $F_{\rm bin}$ MD17's binary fraction and $f$ = `fraction`
a scale (1, the default, is MD17's). The draws are then: membership; the
period, cut to $[P_c, P_{hs}]$ of an equal-mass pair (the widest contact
limit over $q \le 1$, so no $q$ can touch; and the hard/soft cap, which then
needs `mean_mass`); $q$ given $(m_1, P)$, cut to $q \ge m_{\min}/m_1$ and,
with the cap, to the $q$ above which the pair is hard at that period; $e$
given $(m_1, P)$ below both MD17's $e_{\max}(P)$ and the contact limit.
Only the `"ratio"` pairing applies.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._sort import float_order
from .._types import Array, ArrayLike, Key
from ..sampling import uniform_open
from ..units import Units, physical_units
from ..validation import check_range, check_scalar, error_if
from .distributions import (
    ECCENTRICITIES,
    MASS_RATIOS,
    PERIODS,
    AbstractDistribution,
    resolve,
)
from .moe17 import Q_MIN, Moe17
from .orbits import (
    DAY_MYR,
    OrbitalElements,
    draw_orientations,
    orbit_phase_space,
    orbital_period,
    semi_major_axis_of_log_period,
)
from .stellar import RSUN_PC, main_sequence_radius

PAIRINGS = ("ratio", "random", "ordered", "separate", "split")
r"""Pairing modes (McLuster's, Kuepper et al. 2011, with its numbers):

- `"ratio"`: $m_2 = q\,m_1$ with $q$ from `mass_ratio` for every system;
- `"random"` (McLuster 0): the companion is an independent IMF draw, the heavier
  of the two is the primary;
- `"ordered"` (McLuster 1): stars above `m_sort` are paired in order of mass
  (the heaviest with the next heaviest), the others at random;
- `"separate"` (McLuster 2): stars above `m_sort` are paired at random among
  themselves, the others at random among themselves;
- `"split"` (McLuster 3, any `mass_ratio`): $q$ from `mass_ratio` for
  primaries above `m_sort`, random pairing below.
"""


class BinaryPopulation(eqx.Module):
    r"""A primordial binary population.

    **Arguments:**

    - `fraction`: fraction of systems that are binaries, in [0, 1] (differentiable
      with `fraction_width`).
    - `period`: `"kroupa95"` (default), `"dm91"`, `"sana12"` or a period
      distribution in $\log_{10}(P/\mathrm{day})$ (`Kroupa95Period(...)`,
      `LogNormalPeriod(mean, sigma)`, `PowerLawPeriod(index, ...)`); or
      `"moe17"` (`Moe17()`): Moe & Di Stefano's joint model, which also sets
      the eccentricities, the mass ratios and a mass-dependent membership
      (`fraction` then scales it; see the module notes).
    - `eccentricity`: `"thermal"` (default), `"uniform"`, `"sana12"`,
      `"circular"` or `PowerLawEccentricity(eta)` (leave unset, or
      `"moe17"`, with the joint model).
    - `mass_ratio`: `"uniform"` (q in [0.1, 1], default) or
      `PowerLawMassRatio(gamma, q_min, q_max)`; used by the `"ratio"` and
      `"split"` pairings (leave unset, or `"moe17"`, with the joint model).
    - `pairing`: one of `PAIRINGS` (static), default `"ratio"`.
    - `m_sort`: mass in Msun above which `"ordered"`, `"separate"` and `"split"`
      pair differently (default 5, McLuster's; a threshold: no gradient).
    - `fraction_width`: None (hard 0/1 weights) or the sigmoid width $w > 0$.
    - `contact_factor`: $f_c$ in $a(1-e) \ge f_c (R_1 + R_2)$ (default 2; 0 turns
      the limit off).
    - `hard_soft_cap`: cut periods at the local hard/soft boundary (static;
      `sample_binaries` then needs `sigma`).
    """

    fraction: Array
    period: AbstractDistribution | Moe17
    eccentricity: AbstractDistribution | None
    mass_ratio: AbstractDistribution | None
    m_sort: Array
    fraction_width: Array | None
    contact_factor: Array
    pairing: str = eqx.field(static=True)
    hard_soft_cap: bool = eqx.field(static=True)

    def __init__(
        self,
        fraction: ArrayLike = 1.0,
        period: str | AbstractDistribution | Moe17 = "kroupa95",
        eccentricity: str | AbstractDistribution | None = None,
        mass_ratio: str | AbstractDistribution | None = None,
        pairing: str = "ratio",
        *,
        m_sort: ArrayLike = 5.0,
        fraction_width: ArrayLike | None = None,
        contact_factor: ArrayLike = 2.0,
        hard_soft_cap: bool = False,
    ):
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
        # Every number checked, concrete (NumPy, JAX) or traced: only Python
        # numbers were, and a NaN or NumPy contact_factor gave all-NaN positions.
        for name, value in (
            ("fraction", fraction),
            ("m_sort", m_sort),
            ("fraction_width", fraction_width),
            ("contact_factor", contact_factor),
        ):
            if value is not None:
                check_scalar(name, value)
        inclusive = dict(lower_inclusive=True, upper_inclusive=True)
        fraction = check_range("fraction", fraction, lower=0.0, upper=1.0, **inclusive)
        m_sort = check_range("m_sort", m_sort, lower=0.0, lower_inclusive=True)
        if fraction_width is not None:
            fraction_width = check_range("fraction_width", fraction_width, lower=0.0, note=" (None: hard weights)")
        contact_factor = check_range("contact_factor", contact_factor, lower=0.0, lower_inclusive=True)
        dtype = jnp.result_type(float)
        self.fraction = jnp.asarray(fraction, dtype)
        self.period = resolve(period, PERIODS, "period")
        if isinstance(self.period, Moe17):
            for name, value in (("eccentricity", eccentricity), ("mass_ratio", mass_ratio)):
                if value not in (None, "moe17"):
                    raise ValueError(f"{name} comes from the joint period='moe17' model: leave it unset, got {value!r}")
            if pairing != "ratio":
                raise ValueError(f"period='moe17' draws q itself: pairing must be 'ratio', got {pairing!r}")
            self.eccentricity = self.mass_ratio = None
        else:
            self.eccentricity = resolve(
                "thermal" if eccentricity is None else eccentricity, ECCENTRICITIES, "eccentricity"
            )
            self.mass_ratio = resolve("uniform" if mass_ratio is None else mass_ratio, MASS_RATIOS, "mass_ratio")
        self.m_sort = jnp.asarray(m_sort, dtype)
        self.fraction_width = None if fraction_width is None else jnp.asarray(fraction_width, dtype)
        self.contact_factor = jnp.asarray(contact_factor, dtype)
        self.pairing = pairing
        self.hard_soft_cap = bool(hard_soft_cap)

    @classmethod
    def moe17(cls, fraction: ArrayLike = 1.0, **kwargs) -> BinaryPopulation:
        """Moe & Di Stefano (2017): `BinaryPopulation(fraction, "moe17", **kwargs)`."""
        return cls(fraction, "moe17", **kwargs)

    @property
    def is_joint(self) -> bool:
        """Whether periods, mass ratios and eccentricities come from one joint model (`"moe17"`)."""
        return isinstance(self.period, Moe17)

    @property
    def needs_companion_masses(self) -> bool:
        """Whether the pairing draws companions from the IMF (all modes but `"ratio"`)."""
        return self.pairing != "ratio"


class Binaries(eqx.Module):
    """n systems drawn by `sample_binaries` (all arrays (n,) unless stated).

    - `primary_masses`, `secondary_masses`: $m_1 \\ge m_2$ (code mass units; the
      secondary's full mass, before its weight);
    - `weights`: companion weights in [0, 1] (exactly 0 or 1 in the hard mode);
    - `members`: the hard choice $u < f$ (bool);
    - `log_period`: $\\log_{10}(P/\\mathrm{day})$;
    - `elements`: the `OrbitalElements` (a in code length);
    - `relative_positions`, `relative_velocities`: (n, 3), secondary minus
      primary, for the full masses $m_1 + m_2$.
    """

    primary_masses: Array
    secondary_masses: Array
    weights: Array
    members: Array
    log_period: Array
    elements: OrbitalElements
    relative_positions: Array
    relative_velocities: Array

    @property
    def system_masses(self) -> Array:
        """$m_1 + w\\,m_2$: the mass each system contributes to the cluster."""
        return self.primary_masses + self.weights * self.secondary_masses


def _companions(key: Key, n: int, dtype, companion_masses, imf, units: Units) -> Array:
    if companion_masses is not None:
        return jnp.broadcast_to(jnp.asarray(companion_masses, dtype), (n,))
    if imf is None:
        raise ValueError("this pairing draws companions from the IMF: pass imf= or companion_masses=")
    return imf.sample(key, (n,)).astype(dtype) / units.mass_msun


def _pair_sorted(key: Key, a: Array, b: Array, m_sort: Array, ordered: bool) -> tuple[Array, Array]:
    """Pool 2n stars, order them (massive first: by mass or at random), pair neighbours.

    The gradient flows through the masses (sorted values), not the permutation.
    """
    k_order, k_shuffle = jax.random.split(key)
    stars = jnp.concatenate([a, b])
    r = jax.random.uniform(k_order, stars.shape, stars.dtype)
    above = stars > m_sort
    # Keys below 0 come first: -m (heaviest first) or r - 1 (at random) above m_sort.
    sort_key = jnp.where(above, -stars if ordered else r - 1.0, r)
    pooled = stars[float_order(sort_key)].reshape(-1, 2)
    pooled = pooled[jax.random.permutation(k_shuffle, pooled.shape[0])]
    return jnp.max(pooled, axis=1), jnp.min(pooled, axis=1)


def _masses(key: Key, m1: Array, population: BinaryPopulation, companion_masses, imf, units, m_min):
    """Primary and secondary masses (code units) by the pairing mode."""
    k_q, k_companion, k_pair = jax.random.split(key, 3)
    n, dtype = m1.shape[0], m1.dtype
    q_lo = population.mass_ratio.lower if m_min is None else m_min / m1
    q = population.mass_ratio.truncated_icdf(uniform_open(k_q, (n,), dtype), q_lo, population.mass_ratio.upper)
    if population.pairing == "ratio":
        return m1, q * m1
    b = _companions(k_companion, n, dtype, companion_masses, imf, units)
    m_sort = population.m_sort / units.mass_msun
    if population.pairing in ("ordered", "separate"):
        return _pair_sorted(k_pair, m1, b, m_sort, population.pairing == "ordered")
    heavy, light = jnp.maximum(m1, b), jnp.minimum(m1, b)
    if population.pairing == "random":
        return heavy, light
    by_ratio = m1 > m_sort  # "split"
    return jnp.where(by_ratio, m1, heavy), jnp.where(by_ratio, q * m1, light)


def _weights(key: Key, n: int, dtype, population: BinaryPopulation, scale=None) -> tuple[Array, Array]:
    """Membership with probability `fraction` (times `scale`, capped at 1, when given)."""
    fraction = error_if(
        population.fraction, (population.fraction < 0) | (population.fraction > 1), "fraction must be in [0, 1]"
    )
    if scale is not None:
        fraction = jnp.minimum(fraction * scale, 1.0)
    u = jax.random.uniform(key, (n,), dtype)
    members = u < fraction
    if population.fraction_width is None:
        return members.astype(dtype), members
    return jax.nn.sigmoid((fraction - u) / population.fraction_width), members


def _period_limits(m1, m2, a_contact, day, G, population, sigma, mean_mass):
    """log10(P/day) of the contact limit and of the hard/soft boundary (or +inf)."""
    total = m1 + m2
    tiny = jnp.finfo(total.dtype).tiny
    # The floor keeps log10 and its slope finite when the limit is off (a_contact = 0).
    lp_contact = jnp.log10(jnp.maximum(orbital_period(a_contact, total, G) / day, tiny))
    if not population.hard_soft_cap:
        return lp_contact, jnp.asarray(jnp.inf, lp_contact.dtype)  # a scalar: one CDF value for all
    a_hard_soft = G * m1 * m2 / (2.0 * mean_mass * sigma**2)
    return lp_contact, jnp.log10(orbital_period(a_hard_soft, total, G) / day)


def _hard_mass_ratio(m1, log_period, day, G, sigma, mean_mass):
    r"""Lowest q for which a pair of period P around m1 is hard ($G m_1 m_2/2a \ge \langle m\rangle\sigma^2$).

    With $a^3 = G m_1 (1+q) (P/2\pi)^2$ the condition is $q (1+q)^{-1/3} \ge K$;
    the root of $q^3 = s (1 + q)$, $s = K^3$, is Cardano's $c + s/(3c)$ with
    $c^3 = s/2 + \sqrt{s^2/4 - s^3/27}$ (one real root for $s < 27/4$; this form
    has no cancellation as $s \to 0$).
    """
    period = 10.0**log_period * day
    k = 2.0 * mean_mass * sigma**2 * jnp.cbrt(G * m1 * (period / (2.0 * jnp.pi)) ** 2) / (G * m1**2)
    s = k**3
    tiny = jnp.finfo(s.dtype).tiny
    c = jnp.cbrt(jnp.maximum(0.5 * s + jnp.sqrt(jnp.maximum(0.25 * s**2 - s**3 / 27.0, tiny)), tiny))
    return c + s / (3.0 * c)


def _contact_axis(m1, m2, population, units):
    """a_c = f_c (R_1 + R_2) in code length."""
    radii = main_sequence_radius(m1 * units.mass_msun) + main_sequence_radius(m2 * units.mass_msun)
    return population.contact_factor * radii * RSUN_PC / units.length_pc


def _joint_draws(keys, m1, population, units, sigma, mean_mass, m_min):
    """Membership, companion masses and periods from the joint model (`"moe17"`)."""
    k_q, k_member, k_period = keys
    model, n, dtype = population.period, m1.shape[0], m1.dtype
    m1_msun = m1 * units.mass_msun
    weights, members = _weights(k_member, n, dtype, population, model.binary_fraction(m1_msun))
    day = DAY_MYR / units.time_myr
    # An equal-mass pair has the longest contact period of all q <= 1 (and the widest hard orbit).
    lp_lo, lp_hi = _period_limits(
        m1, m1, _contact_axis(m1, m1, population, units), day, units.G, population, sigma, mean_mass
    )
    log_period = model.sample_log_period(uniform_open(k_period, (n,), dtype), m1_msun, lp_lo, lp_hi)
    q_lo = jnp.full_like(m1, Q_MIN) if m_min is None else m_min / m1
    if population.hard_soft_cap:
        q_lo = jnp.maximum(q_lo, _hard_mass_ratio(m1, log_period, day, units.G, sigma, mean_mass))
    q = model.sample_mass_ratio(uniform_open(k_q, (n,), dtype), m1_msun, log_period, q_lo)
    return q * m1, weights, members, log_period


def sample_binaries(
    key: Key,
    primary_masses: ArrayLike,
    population: BinaryPopulation,
    *,
    companion_masses: ArrayLike | None = None,
    imf=None,
    units: Units | None = None,
    sigma: ArrayLike | None = None,
    mean_mass: ArrayLike | None = None,
    m_min: ArrayLike | None = None,
) -> Binaries:
    r"""Companions and relative orbits for n systems (a pure function: jit, vmap, grad).

    **Arguments:**

    - `key`: PRNG key.
    - `primary_masses`: (n,) masses in code mass units. In the `"ratio"` pairing
      they are the primaries; in the others they are pooled with the companion
      draws and re-paired, so system i's masses need not contain the input m[i].
    - `population`: a `BinaryPopulation`.
    - `companion_masses` or `imf`: (n,) second draws (code mass units), or an IMF
      object with `sample(key, shape)` in Msun, for every pairing but `"ratio"`.
    - `units`: the code `Units` (default physical: pc, Msun, km/s). Periods are
      drawn in days and converted with `units.time_myr`; radii with
      `units.length_pc`.
    - `sigma`: local 1D velocity dispersion (scalar or (n,), code units) for the
      hard/soft cap, with `mean_mass` $\langle m\rangle$ (default: the mean of
      the $2n$ drawn masses, companions counted fully).
    - `m_min`: lowest companion mass (code units) in the ratio modes: $q$ is
      cut to $[\max(q_{\min}, m_{\min}/m_1), q_{\max}]$.

    **Returns:** a `Binaries`. A builder adds each system's offsets around its
    centre of mass with `place_binaries`.
    """
    units = physical_units() if units is None else units
    m1_in = jnp.asarray(primary_masses, jnp.result_type(primary_masses, float))
    if m1_in.ndim != 1:
        raise ValueError(f"primary_masses must be one-dimensional (n,), got shape {m1_in.shape}")
    if population.hard_soft_cap and sigma is None:
        raise ValueError("hard_soft_cap=True needs sigma= (the local 1D velocity dispersion)")
    if population.hard_soft_cap and population.is_joint and mean_mass is None:
        raise ValueError("period='moe17' with hard_soft_cap=True needs mean_mass= (q is drawn after the period)")
    n, dtype = m1_in.shape[0], m1_in.dtype
    k_mass, k_member, k_period, k_ecc, k_orient = jax.random.split(key, 5)
    G = units.G
    day = DAY_MYR / units.time_myr
    if population.is_joint:
        m1 = m1_in
        m2, weights, members, log_period = _joint_draws(
            (k_mass, k_member, k_period), m1, population, units, sigma, mean_mass, m_min
        )
        a_contact = _contact_axis(m1, m2, population, units)
    else:
        m1, m2 = _masses(k_mass, m1_in, population, companion_masses, imf, units, m_min)
        weights, members = _weights(k_member, n, dtype, population)
        a_contact = _contact_axis(m1, m2, population, units)
        if mean_mass is None:
            mean_mass = 0.5 * (jnp.mean(m1) + jnp.mean(m2))
        lp_lo, lp_hi = _period_limits(m1, m2, a_contact, day, G, population, sigma, mean_mass)
        log_period = population.period.truncated_icdf(uniform_open(k_period, (n,), dtype), lp_lo, lp_hi)
    a = semi_major_axis_of_log_period(log_period, day, m1 + m2, G)
    e_max = jnp.clip(1.0 - a_contact / a, 0.0, 1.0)
    u_e = uniform_open(k_ecc, (n,), dtype)
    if population.is_joint:
        e = population.period.sample_eccentricity(u_e, m1 * units.mass_msun, log_period, e_max)
    else:
        e = population.eccentricity.truncated_icdf(u_e, 0.0, e_max)

    orientations = draw_orientations(k_orient, (n,), dtype)
    elements = OrbitalElements(a, e, *orientations.angles())
    r, v = orbit_phase_space(a, e, orientations, m1 + m2, G, store=True)
    return Binaries(m1, m2, weights, members, log_period, elements, r, v)


def place_binaries(
    system_positions: ArrayLike, system_velocities: ArrayLike, binaries: Binaries
) -> tuple[Array, Array, Array, Array]:
    r"""Stars of the systems around their centres of mass.

    With the weighted companion mass $\tilde m_2 = w\,m_2$ and $\tilde M = m_1 +
    \tilde m_2$: $\mathbf x_1 = \mathbf X - (\tilde m_2/\tilde M)\,\mathbf r$,
    $\mathbf x_2 = \mathbf X + (m_1/\tilde M)\,\mathbf r$ (velocities alike), so the
    centre of mass and momentum of each system are kept exactly.

    **Returns:** `(positions, velocities, masses, pairs)`: (2n, 3), (2n, 3), (2n,)
    with star 2i the primary and 2i + 1 the secondary of system i (mass $w m_2$:
    0 for a single star in the hard mode), and `pairs` (n, 2) = (2i, 2i + 1).
    """
    X, V = jnp.asarray(system_positions), jnp.asarray(system_velocities)
    m1 = binaries.primary_masses
    m2 = binaries.weights * binaries.secondary_masses
    total = m1 + m2
    f1, f2 = (m2 / total)[:, None], (m1 / total)[:, None]
    r, v = binaries.relative_positions, binaries.relative_velocities
    positions = jnp.stack([X - f1 * r, X + f2 * r], axis=1).reshape(-1, 3)
    velocities = jnp.stack([V - f1 * v, V + f2 * v], axis=1).reshape(-1, 3)
    masses = jnp.stack([m1, m2], axis=1).reshape(-1)
    n = m1.shape[0]
    pairs = jnp.stack([2 * jnp.arange(n), 2 * jnp.arange(n) + 1], axis=1)
    return positions, velocities, masses, pairs


def systems_for_stars(n_stars: int, fraction: float) -> int:
    r"""The number of systems `n` that gives about `n_stars` stars at binary fraction `fraction`.

    Builders count systems (`n`); a cluster of $n$ systems has $n(1 + f)$ stars
    on average (exactly $2n$ at $f = 1$), so $n = \mathrm{round}(n_\star/(1 + f))$.
    For the moe17 population, whose fraction depends on the primary's mass, pass
    the mean binary fraction of the IMF instead.

    ```python
    n = progenax.binaries.systems_for_stars(100_000, 0.5)  # 66,667 systems, ~1e5 stars
    ```
    """
    if isinstance(n_stars, bool) or int(n_stars) != n_stars or n_stars < 1:
        raise ValueError(f"n_stars must be a positive int, got {n_stars!r}")
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    return max(1, round(int(n_stars) / (1.0 + float(fraction))))
