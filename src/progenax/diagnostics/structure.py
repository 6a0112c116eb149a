r"""Structure diagnostics: density profile, substructure Q, mass segregation.

**Cartwright & Whitworth (2004) Q.** On positions projected on the sky (the
observer looks along `los`, z by default), with $N$ stars, cluster radius $R$ (the
distance from the mean position to the furthest star) and area $A = \pi R^2$,

$$\bar m = \frac{\sum_{\rm MST} \ell_e}{N - 1} \Big/ \frac{\sqrt{N A}}{N - 1},
\qquad \bar s = \frac{\langle |x_i - x_j| \rangle_{i<j}}{R},
\qquad Q = \bar m / \bar s,$$

where the sum runs over the $N - 1$ edges of the minimum spanning tree (MST).
$Q \approx 0.79$ for a uniform sphere (CW04: 0.785), $Q > 0.8$ for centrally
concentrated clusters (0.87 for $n \propto r^{-2}$) and $Q < 0.8$ for fractal
substructure (about 0.45 for $D = 1.6$). `q_parameter` builds the exact MST from
the Delaunay triangulation (the Euclidean MST is one of its subgraphs) with
`scipy.sparse.csgraph`; it is a forward-only NumPy diagnostic.

`q_parameter_knn` is a differentiable JAX approximation: the mean MST edge is
replaced by the mean distance to the k nearest neighbours, rescaled by the ratio
the two have in a uniform (Poisson) field,
$\langle \ell_{\rm MST}\rangle \approx \beta\, \langle d_{1..k}\rangle / c_k$, with
$\beta = 0.633$ the 2D MST constant (Beardwood, Halton & Hammersley 1959; the MST
length is $\beta\sqrt{N A}$) and $c_k = k^{-1}\sum_{j\le k}\Gamma(j+\tfrac12)/
(\Gamma(j)\sqrt\pi)$ the mean j-th neighbour distance in units of
$\rho^{-1/2}$. **Partially differentiable:** which stars are neighbours (a top-k,
i.e. argmin, choice) and which star sets $R$ (a max) are piecewise constant in
the positions; the gradient flows through the distances of the chosen pairs only.
It misses the long MST edges that bridge clumps, so it reads somewhat lower than
the exact Q for substructured clusters; use it as a smooth surrogate, and the
exact `q_parameter` to report a value.

**Allison et al. (2009) mass-segregation ratio.**

$$\Lambda_{\rm MSR} = \frac{\langle \ell_{\rm random} \rangle}{\ell_{\rm massive}},$$

the MST length of the `n_massive` most massive stars compared with the mean MST
length of sets of as many random stars; $\Lambda \approx 1$ without segregation,
$> 1$ when the massive stars are more concentrated. The bounds are the 1/6 and 5/6
quantiles of the random lengths over $\ell_{\rm massive}$ (Allison et al. 2009).
`mass_segregation_ratio` is NumPy/SciPy; `mass_segregation_ratio_jax` computes the
same ratio in JAX with a fixed-iteration Prim's algorithm: partially
differentiable (the choice of MST edges is an argmin, piecewise constant), the
gradient flows through the lengths of the chosen edges.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._sort import float_order
from .._types import Array, ArrayLike, Key, Scalar
from ..validation import check_static_int

MST_CONSTANT_2D = 0.633
"""Beardwood-Halton-Hammersley constant of the 2D Euclidean MST (length / sqrt(N A))."""

EXACT_SEPARATION_MAX_N = 20_000
"""Largest n for which `q_parameter` averages over every pair exactly."""


# -- helpers --------------------------------------------------------------------
def _project(positions: ArrayLike, los: int) -> np.ndarray:
    if los not in (0, 1, 2):
        raise ValueError(f"los must be 0, 1 or 2 (the line-of-sight axis), got {los!r}")
    x = np.asarray(positions, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"positions must have shape (n, 3), got {x.shape}")
    return np.delete(x, los, axis=1)


def mst_edge_lengths(points: ArrayLike) -> np.ndarray:
    """Lengths of the n - 1 edges of the Euclidean minimum spanning tree.

    Works in any dimension. With more than 4 points (and more than dim + 1) it
    uses the Delaunay graph (which contains the MST); otherwise, or if the
    points are degenerate (all collinear), the complete graph. Coincident points give 0-length
    edges.
    """
    # scipy's graph and Qhull modules are imported here, not at module level:
    # they add a large part of `import progenax` and only this forward-only
    # diagnostic needs them.
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial import Delaunay, QhullError

    x = np.asarray(points, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        return np.zeros(0)
    edges = None
    if n > x.shape[1] + 1 and n > 4:
        try:
            tri = Delaunay(x)
            simplices = tri.simplices
            k = simplices.shape[1]
            i, j = np.triu_indices(k, 1)
            pairs = [simplices[:, [a, b]] for a, b in zip(i, j)]
            # Points Qhull left out (duplicates, or within rounding of a vertex)
            # join the graph through their nearest vertex.
            pairs.append(tri.coplanar[:, [0, 2]])
            edges = np.unique(np.sort(np.concatenate(pairs), axis=1), axis=0)
        except QhullError:
            edges = None
    if edges is None:
        i, j = np.triu_indices(n, 1)
        edges = np.stack([i, j], axis=1)
    length = np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1)
    # csgraph treats explicit zeros as missing edges: nudge them to the tiniest
    # positive value and report them as 0 below.
    tiny = np.finfo(np.float64).tiny
    graph = coo_matrix((np.maximum(length, tiny), (edges[:, 0], edges[:, 1])), shape=(n, n))
    tree = minimum_spanning_tree(graph.tocsr())
    out = np.asarray(tree.data)
    out[out <= tiny] = 0.0
    return out


def _mean_separation(x: np.ndarray, rng: np.random.Generator) -> float:
    n = x.shape[0]
    if n <= EXACT_SEPARATION_MAX_N:
        total = 0.0
        for start in range(0, n, 2048):
            block = x[start : start + 2048]
            d = np.sqrt(((block[:, None, :] - x[None, :, :]) ** 2).sum(-1))
            total += d.sum()
        return total / (n * (n - 1))  # each pair counted twice, diagonal is 0
    # Above that, 2e6 random pairs: relative error ~ 1e-3 (std/mean of the
    # separation is about 0.5, divided by sqrt(2e6)).
    i = rng.integers(0, n, 2_000_000)
    j = (i + rng.integers(1, n, i.size)) % n
    return float(np.linalg.norm(x[i] - x[j], axis=1).mean())


# -- Q parameter ----------------------------------------------------------------
def q_parameter(positions: ArrayLike, *, los: int = 2, seed: int = 0) -> float:
    """Cartwright & Whitworth (2004) Q of the stars projected along axis `los`.

    **Arguments:**

    - `positions`: (n, 3) positions (any length unit: Q is dimensionless), n >= 3.
    - `los`: line-of-sight axis dropped by the projection (0, 1 or 2).
    - `seed`: for the random pairs of the mean separation when n > 20,000.

    **Returns:** Q as a Python float (exact MST; forward-only).
    """
    x = _project(positions, los)
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"q_parameter needs at least 3 stars, got {n}")
    radius = np.sqrt(((x - x.mean(axis=0)) ** 2).sum(axis=1)).max()
    area = np.pi * radius**2
    m_bar = mst_edge_lengths(x).sum() / np.sqrt(n * area)
    s_bar = _mean_separation(x, np.random.default_rng(seed)) / radius
    return float(m_bar / s_bar)


def _knn_poisson_constant(k: int) -> float:
    """Mean of the 1st..k-th neighbour distance of a 2D Poisson field, x sqrt(rho)."""
    ratios = [math.exp(math.lgamma(j + 0.5) - math.lgamma(j)) for j in range(1, k + 1)]
    return float(np.mean(ratios) / math.sqrt(math.pi))


def q_parameter_knn(positions: Array, *, k: int = 1, los: int = 2) -> Scalar:
    r"""Differentiable k-nearest-neighbour approximation of the CW04 Q (JAX).

    See the module docstring for the estimator and what is (and is not)
    differentiable. Memory and time are O(n^2) (every pair): meant for n up to a
    few thousand.

    **Arguments:** `positions` (n, 3), n > k; `k`: neighbours per star (static,
    >= 1); `los`: line-of-sight axis.
    """
    check_static_int("k", k, 1)
    if los not in (0, 1, 2):
        raise ValueError(f"los must be 0, 1 or 2 (the line-of-sight axis), got {los!r}")
    positions = jnp.asarray(positions)
    n = positions.shape[0]
    if n <= k:
        raise ValueError(f"q_parameter_knn needs more than k = {k} stars, got {n}")
    keep = [a for a in range(3) if a != los]
    x = positions[:, keep]
    d2 = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    off = ~jnp.eye(n, dtype=bool)
    # Double where: sqrt is never evaluated at 0 (coincident stars, diagonal).
    pos = off & (d2 > 0)
    d = jnp.where(pos, jnp.sqrt(jnp.where(pos, d2, 1.0)), 0.0)
    big = jnp.max(d) + 1.0
    nearest = -jax.lax.top_k(-jnp.where(off, d, big), k)[0]  # (n, k) smallest
    mean_edge = MST_CONSTANT_2D * jnp.mean(nearest) / _knn_poisson_constant(k)
    c = x - jnp.mean(x, axis=0)
    r2 = jnp.sum(c**2, axis=-1)
    radius = jnp.sqrt(jnp.max(r2))
    area = jnp.pi * radius**2
    m_bar = mean_edge * (n - 1) / jnp.sqrt(n * area)
    s_bar = jnp.sum(d) / (n * (n - 1)) / radius
    return m_bar / s_bar


# -- density profile ------------------------------------------------------------
class DensityProfile(NamedTuple):
    """Radial density profile: shell edges (bins + 1,), mean radius and density (bins,)."""

    edges: np.ndarray
    radius: np.ndarray
    density: np.ndarray


def density_profile(
    positions: ArrayLike,
    masses: ArrayLike,
    *,
    bins: int = 20,
    centre: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> DensityProfile:
    """Mass density in spherical shells holding equal numbers of stars.

    The shell edges are the radius quantiles 0, 1/bins, ..., 1 (the outermost
    edge is the furthest star), so every shell has n / bins stars and the same
    relative Poisson error. Density = shell mass / shell volume, in mass per
    length^3 of the inputs; `radius` is the mass-weighted mean radius in the
    shell. `centre` defaults to the centre of mass; `weights` (e.g.
    `ic.weights`) multiply the masses. Forward-only NumPy.
    """
    x = np.asarray(positions, dtype=np.float64)
    m = np.asarray(masses, dtype=np.float64)
    if weights is not None:
        m = m * np.asarray(weights, dtype=np.float64)
    if not isinstance(bins, int) or bins < 1 or bins > x.shape[0]:
        raise ValueError(f"bins must be an int in [1, n = {x.shape[0]}], got {bins!r}")
    c = (m[:, None] * x).sum(0) / m.sum() if centre is None else np.asarray(centre, dtype=np.float64)
    r = np.sqrt(((x - c) ** 2).sum(axis=1))
    edges = np.quantile(r, np.linspace(0.0, 1.0, bins + 1))
    edges[0] = 0.0
    shell = np.clip(np.searchsorted(edges, r, side="right") - 1, 0, bins - 1)
    mass = np.bincount(shell, weights=m, minlength=bins)
    mr = np.bincount(shell, weights=m * r, minlength=bins)
    volume = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    with np.errstate(invalid="ignore", divide="ignore"):
        radius = np.where(mass > 0, mr / mass, 0.5 * (edges[1:] + edges[:-1]))
        density = np.where(volume > 0, mass / volume, 0.0)
    return DensityProfile(edges, radius, density)


# -- mass segregation ratio -----------------------------------------------------
class SegregationRatio(NamedTuple):
    """Lambda_MSR with its 1/6 and 5/6 quantile bounds (Allison et al. 2009)."""

    ratio: float
    lower: float
    upper: float


def _check_msr(n: int, n_massive: int, n_random: int) -> None:
    check_static_int("n_massive", n_massive, 2)
    if n_massive > n:
        raise ValueError(f"n_massive = {n_massive} exceeds the number of stars {n}")
    check_static_int("n_random", n_random, 1)


def mass_segregation_ratio(
    positions: ArrayLike,
    masses: ArrayLike,
    *,
    n_massive: int = 20,
    n_random: int = 200,
    projected: bool = False,
    los: int = 2,
    seed: int = 0,
) -> SegregationRatio:
    """Allison et al. (2009) Lambda_MSR of the `n_massive` most massive stars.

    `n_random` sets of `n_massive` stars drawn without replacement (NumPy
    generator seeded by `seed`) give the reference MST lengths. `projected=True`
    works on the sky plane (dropping axis `los`). Forward-only.
    """
    x = _project(positions, los) if projected else np.asarray(positions, dtype=np.float64)
    m = np.asarray(masses, dtype=np.float64)
    n = m.shape[0]
    _check_msr(n, n_massive, n_random)
    massive = np.argsort(-m, kind="stable")[:n_massive]
    l_massive = mst_edge_lengths(x[massive]).sum()
    rng = np.random.default_rng(seed)
    l_random = np.array([mst_edge_lengths(x[rng.choice(n, n_massive, replace=False)]).sum() for _ in range(n_random)])
    lo, hi = np.quantile(l_random, [1.0 / 6.0, 5.0 / 6.0])
    return SegregationRatio(float(l_random.mean() / l_massive), float(lo / l_massive), float(hi / l_massive))


def mst_length_jax(points: Array) -> Scalar:
    """Total MST length of a small point set by Prim's algorithm (JAX).

    k - 1 fixed steps for k points, O(k^2) each. The choice of edges is an
    argmin (piecewise constant, no gradient); the gradient flows through the
    lengths of the chosen edges. Coincident points are gradient-safe.
    """
    k = points.shape[0]
    d2 = jnp.sum((points[:, None, :] - points[None, :, :]) ** 2, axis=-1)
    pos = d2 > 0
    d = jnp.where(pos, jnp.sqrt(jnp.where(pos, d2, 1.0)), 0.0)
    in_tree = jnp.zeros(k, dtype=bool).at[0].set(True)
    best = d[0]

    def step(carry, _):
        in_tree, best, total = carry
        j = jnp.argmin(jnp.where(in_tree, jnp.inf, jax.lax.stop_gradient(best)))
        total = total + best[j]
        in_tree = in_tree.at[j].set(True)
        best = jnp.minimum(best, d[j])
        return (in_tree, best, total), None

    (_, _, total), _ = jax.lax.scan(step, (in_tree, best, jnp.zeros((), d.dtype)), None, length=k - 1)
    return total


def mass_segregation_ratio_jax(
    key: Key,
    positions: Array,
    masses: Array,
    *,
    n_massive: int = 20,
    n_random: int = 50,
    projected: bool = False,
    los: int = 2,
) -> Scalar:
    """Lambda_MSR in JAX: differentiable in the positions (partially, see module).

    The most massive stars are chosen by sorting the masses (no gradient through
    the choice); the `n_random` reference sets are drawn from `key`.
    """
    n = masses.shape[0]
    _check_msr(n, n_massive, n_random)
    if projected:
        positions = positions[:, [a for a in range(3) if a != los]]
    massive = float_order(-masses)[:n_massive]
    l_massive = mst_length_jax(positions[massive])
    keys = jax.random.split(key, n_random)
    sets = jax.vmap(lambda k: jax.random.permutation(k, n)[:n_massive])(keys)
    l_random = jax.vmap(lambda idx: mst_length_jax(positions[idx]))(sets)
    return jnp.mean(l_random) / l_massive
