r"""Primordial mass segregation by energy-ordered orbit assignment.

Baumgardt, De Marchi & Kroupa (2008), as used by McLuster (Kuepper et al.
2011): the orbits of an unsegregated cluster are kept, and only which star
(mass) sits on which orbit changes, heavier stars going to more bound orbits.
S = 0 gives a random assignment (no segregation); S -> 1 gives a strict order
(the heaviest star on the most bound orbit).

**Assignment used here.** The orbits are ranked by specific energy
$E_j = \tfrac12 |v_j|^2 + \Phi(r_j)$ (most bound first), with $\Phi$ the
spherical shell estimate of equal-mass stars about `centre`
(`-G m̄ [N(<r)/r + \sum_{r_l > r} 1/r_l]`). Each star gets a key

$$\kappa_i = S\, q_i + (1 - S)\, U_i,$$

with $q_i \in (0, 1)$ its mass rank (0 the heaviest) and $U_i \sim U(0,1)$, and
the star with the k-th smallest key takes the orbit of energy rank k. This has
the same limits as BDK08's sequential draw (uniform at S = 0, strict at S = 1)
and the same monotone strengthening with S, but it is one sort, O(n log n),
instead of n picks from a shrinking list; intermediate S are not numerically the
same as McLuster's. The forward output is an exact permutation of the orbits:
the sampled set of positions and velocities is unchanged, and any gradient with
respect to parameters that shaped the orbits (r_h, Q, ...) or masses (alpha)
flows through the values (the order only decides who gets which orbit).

**Gradient with respect to S: a smooth relaxation of the ranking.** The
permutation is piecewise constant in S. The relaxed rank of star i is

$$\tilde k_i = \sum_{l \ne i} \sigma\!\left(\frac{\kappa_i - \kappa_l}{\tau/n}\right),$$

(`temperature` $\tau$ is the sigmoid's width in units of the mean key spacing
$1/n$; evaluated over the 64 neighbours on each side in key order, which
misses terms below $\sigma(-64/\tau) \le e^{-8}$ for the allowed $\tau \le 8$).
A star's radius and speed then follow the trends $\ln \bar r(t)$ and
$\ln \bar v(t)$ of the orbits with energy quantile $t = (k + 1/2)/n$: least-squares
fits of $\ln r$ and $\ln |v|$ of the energy-ordered orbits on the smooth basis
$\{1, \ln t, \ln(1 - t), t, t^2\}$ (which holds the power laws of a core,
$r \propto t^{1/3}$, and of a halo at $t \to 1$). A fit, not a running mean:
the radii at neighbouring energies scatter by tens of per cent, and the slope of
a running mean is mostly that noise. In value, each star keeps its exact orbit;
in tangent,

$$\frac{\partial x_i}{\partial S} = x_i\, \frac{d\ln \bar r}{dt}\Big|_{\tilde t_i}
\frac{\partial \tilde t_i}{\partial S},\qquad \tilde t_i = (\tilde k_i + 1/2)/n,$$

(likewise for $v_i$ with $\bar v$), a straight-through estimator. Averaged over
keys it follows the slope of the expected response (checked in
`tests/test_segregation.py` against finite differences of the key-averaged
mass-segregation ratio). At fixed key the output jumps when two keys swap, so
S is **partially differentiable**: a finite-difference check with a tiny step
at fixed key does not see this gradient.

**The half-mass radius is kept.** Moving the heavy stars onto the bound orbits
shrinks the mass-weighted half-mass radius (a Plummer sphere of 10,000 Kroupa
stars: 0.99 pc unsegregated, 0.65 at S = 0.5, 0.46 at S = 0.9), while the
half-number radius stays. So that a builder's `r_h` is the half-mass radius of
the cluster it returns at every S, the reassigned positions are scaled by
$f = r_h^{\rm before} / r_h^{\rm after}$ (both mass-weighted 3D half-mass radii,
each about its own centre of mass, `progenax.diagnostics.half_mass_radius`:
the builders centre their output there) and the velocities by
$f^{-1/2}$, which keeps $T/|W|$. The half-number radius then grows with S (1.00
pc at S = 0, 1.51 at S = 0.5, 2.15 at S = 0.9 for that sphere). The factor is
differentiable (sorted values, as everywhere here); `keep_half_mass_radius=False`
returns the plain reassignment.

Cost: four sorts (radii, energies, masses, keys; and the half-mass radius's
two, before and after), each of one packed integer
key (`progenax._sort.float_order`: 35 ms at n = 1e6 against 230 ms for
`jnp.argsort` of float64), and the rank as the keys' inverse permutation (a
scatter, not a second sort). The relaxed rank and the two trend fits exist
only in tangent (a `jax.custom_jvp` whose value is the exact 0): a
differentiated build adds an (n, 128) array of neighbour sigmoids, about
100 MB in float64 at n = 1e5 (and as much again for its gradient); a plain
build computes none of it. A Plummer build of 1e6 stars at S = 0.5 takes
0.41 s after compile, against 0.19 s unsegregated (2.56 s with `jnp.argsort`
and the relaxation in value; AMD EPYC, 2 cores).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._sort import float_order, inverse_permutation
from .._types import Array, ArrayLike, Key, Masses, Positions, Velocities
from ..diagnostics.radii import half_mass_radius
from ..units import G_PHYSICAL
from ..validation import ParameterChecks, check_scalar

SOFT_RANK_WINDOW = 64
"""Neighbours on each side (in key order) that enter a star's relaxed rank."""

TEMPERATURE_MAX = 8.0


def _is_static_zero(x: ArrayLike) -> bool:
    """Whether `x` is a value known when tracing (not a tracer) and zero.

    NumPy, not jnp: under an outer `jit` every jnp operation is staged, so
    `jnp.asarray(0.0)` is a tracer there and a static 0 would look traced."""
    if isinstance(x, jax.core.Tracer):
        return False
    try:
        return bool(np.all(np.asarray(x) == 0))
    except (TypeError, ValueError):
        return False


def check_segregation_arguments(checks: ParameterChecks, segregation, temperature):
    """Validate S in [0, 1) and the temperature in (0, 8].

    Returns `(S, temperature)` as arrays, or `(None, temperature)` when S is a
    concrete 0 (the builder then skips segregation and its output is exactly
    what it was without the option).
    """
    check_scalar("segregation", segregation)
    check_scalar("segregation_temperature", temperature)
    temperature = checks.range(
        "segregation_temperature", temperature, lower=0.0, upper=TEMPERATURE_MAX, upper_inclusive=True
    )
    # Decided on the argument itself: the checked S is a tracer under an outer
    # jit, and segregating at S = 0 re-pairs masses with orbits by their energy
    # rank, which jumps as a parameter (the King W0) reorders the energies.
    static_zero = _is_static_zero(segregation)
    S = checks.range("segregation", segregation, lower=0.0, upper=1.0, lower_inclusive=True)
    return (None if static_zero else S), temperature


def specific_energies(positions: Positions, velocities: Velocities, total_mass, G, centre) -> Array:
    """E = |v|^2/2 + Phi(r), Phi from spherical shells of n equal masses."""
    n = positions.shape[0]
    r2 = jnp.sum((positions - centre) ** 2, axis=-1)
    r = jnp.sqrt(jnp.where(r2 > 0, r2, 1.0))
    r = jnp.where(r2 > 0, r, jnp.finfo(r.dtype).tiny ** 0.25)
    order = float_order(r)
    r_sorted = r[order]
    inv = 1.0 / r_sorted
    outside = jnp.cumsum(inv[::-1])[::-1] - inv  # sum over stars further out
    inside = jnp.arange(n, dtype=r.dtype)  # stars closer in
    phi_sorted = -G * (total_mass / n) * (inside * inv + outside)
    phi = jnp.zeros_like(phi_sorted).at[order].set(phi_sorted)
    return 0.5 * jnp.sum(velocities**2, axis=-1) + phi


def soft_rank(keys: Array, width: Array, order: Array | None = None) -> Array:
    """Relaxed rank sum_{l != i} sigmoid((k_i - k_l) / width), over 64 neighbours a side.

    Neighbours are taken in sorted key order; the pairs further apart differ by
    more than 64 key spacings and contribute their hard value (0 or 1), which is
    what the sorted position already counts. `order`: the order that sorts the
    keys, when the caller has it (default: `float_order` of the keys).
    """
    n = keys.shape[0]
    order = float_order(keys) if order is None else order
    ks = keys[order]
    w = min(SOFT_RANK_WINDOW, n - 1)
    offsets = jnp.concatenate([jnp.arange(-w, 0), jnp.arange(1, w + 1)])
    idx = jnp.arange(n)[:, None] + offsets[None, :]
    valid = (idx >= 0) & (idx < n)
    other = ks[jnp.clip(idx, 0, n - 1)]
    soft = jax.nn.sigmoid((ks[:, None] - other) / width)
    # Below in key order the hard count is 1, above it is 0: add the difference.
    hard = (offsets < 0).astype(keys.dtype)[None, :]
    total = jnp.arange(n, dtype=keys.dtype) + jnp.sum(jnp.where(valid, soft - hard, 0.0), axis=1)
    return jnp.zeros_like(total).at[order].set(total)


def _basis(t: Array) -> Array:
    """Smooth basis in the energy quantile t: 1, ln t, ln(1 - t), t, t^2."""
    return jnp.stack([jnp.ones_like(t), jnp.log(t), jnp.log1p(-t), t, t**2], axis=-1)


def _log_trend(values: Array) -> Array:
    """Least-squares coefficients of ln(values) (ordered by energy) on `_basis`."""
    n = values.shape[0]
    t = (jnp.arange(n, dtype=values.dtype) + 0.5) / n
    y = jnp.log(jnp.maximum(values, jnp.finfo(values.dtype).tiny))
    coef, *_ = jnp.linalg.lstsq(_basis(t), y)
    return jax.lax.stop_gradient(coef)


@jax.custom_jvp
def _straight_through_growth(keys, width, key_order, positions, velocities, by_energy) -> tuple[Array, Array]:
    """The straight-through relaxation (module docstring): the relative growth
    of each star's radius and speed, exactly 0 in value (nothing is computed);
    in tangent, the slopes of the trends ln r(t) and ln v(t) of the orbits in
    energy order (`positions`, `velocities`, `by_energy`; no gradient flows into
    the fits) at the relaxed quantile t of the `keys` (sorted by `key_order`),
    times the tangent of t. Forward builds skip the soft rank's (n, 128)
    sigmoids and the two fits."""
    zero = jnp.zeros_like(keys)
    return zero, zero


@_straight_through_growth.defjvp
def _straight_through_growth_jvp(primals, tangents):
    keys, width, key_order, positions, velocities, by_energy = primals
    n = keys.shape[0]
    radii = jnp.sqrt(jnp.sum(jax.lax.stop_gradient(positions[by_energy]) ** 2, axis=-1))
    speeds = jnp.sqrt(jnp.sum(jax.lax.stop_gradient(velocities[by_energy]) ** 2, axis=-1))
    coef_r, coef_v = _log_trend(radii), _log_trend(speeds)

    def trends(keys, width):
        relaxed = soft_rank(keys, width, key_order)
        basis = _basis(jnp.clip((relaxed + 0.5) / n, 0.5 / n, 1.0 - 0.5 / n))
        return basis @ coef_r, basis @ coef_v

    _, slopes = jax.jvp(trends, (keys, width), tuple(tangents[:2]))
    return _straight_through_growth(*primals), slopes


def apply_segregation(
    key: Key,
    positions: Positions,
    velocities: Velocities,
    masses: Masses,
    segregation: ArrayLike,
    *,
    temperature: ArrayLike = 1.0,
    G: ArrayLike = G_PHYSICAL,
    centre: ArrayLike | None = None,
    keep_half_mass_radius: bool = True,
) -> tuple[Positions, Velocities]:
    r"""Reassign orbits to stars so that heavier stars are more bound.

    **Arguments:**

    - `key`: `jax.random` key for the random part $U_i$ of the keys.
    - `positions`, `velocities` (n, 3): orbits of an unsegregated cluster, about
      `centre` (default the origin) and in units matching `G`.
    - `masses` (n,): the stars; star i keeps its mass and gets a new orbit.
    - `segregation`: S in [0, 1) (not checked here; builders check it).
    - `temperature`: width of the relaxed ranking in units of the mean key
      spacing (smaller: closer to the hard ranking, noisier gradient).
    - `keep_half_mass_radius` (static): scale the result so its mass-weighted
      half-mass radius about its centre of mass is the input's about its own
      (velocities by the inverse square root, keeping T/|W|); see the module
      docstring.

    **Returns:** `(positions, velocities)` of star i on its assigned orbit.
    See the module docstring for the assignment and its gradient.
    """
    n = masses.shape[0]
    if n < 2:
        return positions, velocities
    dtype = positions.dtype
    S = jnp.asarray(segregation, dtype)
    centre = jnp.zeros(3, dtype) if centre is None else jnp.asarray(centre, dtype)
    x = positions - centre
    m = jax.lax.stop_gradient(masses)
    energy = jax.lax.stop_gradient(specific_energies(x, velocities, jnp.sum(m), G, jnp.zeros(3, dtype)))
    by_energy = float_order(energy)  # most bound orbit first
    mass_order = float_order(-m)
    q = jnp.zeros(n, dtype).at[mass_order].set((jnp.arange(n, dtype=dtype) + 0.5) / n)
    u = jax.random.uniform(key, (n,), dtype)
    keys = S * q + (1.0 - S) * u
    key_order = float_order(keys)
    hard = inverse_permutation(key_order)
    orbit = by_energy[hard]
    x_new = x[orbit]
    v_new = velocities[orbit]
    width = jnp.asarray(temperature, dtype) / n
    grow_r, grow_v = _straight_through_growth(keys, width, key_order, x, velocities, by_energy)
    x_out, v_out = x_new * (1.0 + grow_r)[:, None], v_new * (1.0 + grow_v)[:, None]
    if keep_half_mass_radius:
        # Each about its own centre of mass, where builders centre their output: the
        # heavy stars' new orbits move it (a remapped fractal's bound orbits lie
        # on one side: 0.4-0.7 pc off at S = 0.5), and a ratio about `centre`
        # left the recentred cluster's r_h 30-60% short.
        f = half_mass_radius(x, masses) / half_mass_radius(x_out, masses)
        x_out, v_out = x_out * f, v_out / jnp.sqrt(f)
    return centre + x_out, v_out
