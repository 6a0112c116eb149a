"""Cluster centres: centre of mass and the density centre.

The centre of mass of a cluster with a heavy-tailed profile (an untruncated EFF
model with gamma <= 5 has no finite second moment) or a broad IMF wanders far from
the core with a few outlying or heavy stars. The density centre does not: it is
found by shrinking spheres (Power et al. 2003), starting from the centroid of all
stars and shrinking the sphere by 2.5% a step, re-centring on the stars inside,
until fewer than max(50, n/100) remain.

`density_centre` is a forward-only diagnostic (its steps are hard decisions on the
data), computed in NumPy in O(N log N) work, not O(N) per step: see
`_DistanceOrder`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike, Masses, Positions

SHRINK = 0.975
RESORT_DRIFT = 0.125
"""Re-sort the distances once the centre has drifted this fraction of the radius
from the reference point: the band of stars checked one by one stays thin."""


def centre_of_mass(positions: Positions, masses: Masses) -> Array:
    return jnp.sum(masses[:, None] * positions, axis=0) / jnp.sum(masses)


class _DistanceOrder:
    r"""The stars sorted by distance $d_i$ from a reference point $c_0$, with prefix
    sums of their weights and weighted positions.

    For a sphere of radius $R$ about $c$ with $\delta = |c - c_0|$, the triangle
    inequality splits the stars: $d_i < R - \delta$ are inside, $d_i \ge R + \delta$
    outside, and only the band between is tested one by one. The inside set's
    weight and weighted position sum are a prefix sum plus the band's share, so a
    step costs O(log N + band) instead of O(N).

    Only the stars closer than `reach` are sorted: `density_centre` sorts
    again before its centre drifts more than `RESORT_DRIFT` R from $c_0$, and
    its radius only shrinks, so until then every sphere lies within
    $(1 + \text{RESORT\_DRIFT}) R_0$ of $c_0$ (a clumpy cluster's centre
    drifts for many steps: this halves the cost of its sorts).
    """

    def __init__(self, x: np.ndarray, w: np.ndarray, reference: np.ndarray, reach: float = np.inf):
        offset = x - reference
        distance = np.sqrt(np.einsum("ij,ij->i", offset, offset))
        near = np.flatnonzero(distance < reach)
        self.order = near[np.argsort(distance[near])]
        self.distance = distance[self.order]
        self.reference = reference
        w_sorted = w[self.order]
        # np.take, not x[order]: 4x faster for the rows of an (N, 3) array (20 against 76 ms at 1e6).
        wx = w_sorted[:, None] * np.take(x, self.order, axis=0)
        zero = np.zeros((1, x.shape[1]))
        self.weight_sum = np.concatenate([[0.0], np.cumsum(w_sorted)])
        self.weighted_sum = np.concatenate([zero, np.cumsum(wx, axis=0)])

    def inside(self, x: np.ndarray, w: np.ndarray, centre: np.ndarray, radius: float):
        """(count, weight, weighted position sum) of the stars with |x - centre| < radius."""
        delta = float(np.sqrt(((centre - self.reference) ** 2).sum()))
        margin = 1e-12 * radius  # rounding of the distances must not move a star across
        lo = int(np.searchsorted(self.distance, radius - delta - margin, side="left"))
        hi = int(np.searchsorted(self.distance, radius + delta + margin, side="left"))
        band = self.order[lo:hi]
        hit = band[((x[band] - centre) ** 2).sum(axis=1) < radius**2]
        weight = self.weight_sum[lo] + w[hit].sum()
        weighted = self.weighted_sum[lo] + (w[hit, None] * x[hit]).sum(axis=0)
        return lo + hit.size, weight, weighted


def density_centre(positions: ArrayLike, weights: ArrayLike | None = None) -> np.ndarray:
    """Shrinking-sphere centre, stars weighted by `weights` (number by default).

    Every step tests all stars against the new sphere (a star the sphere left
    behind may re-enter it once the centre moves), as a plain loop would; the
    distance order (`_DistanceOrder`) only spares the work of testing stars far
    from the sphere's surface. N = 1e6 takes 0.24 s for a Plummer sphere and
    1.25 s for a D = 1.6 fractal, whose centre drifts from clump to clump (25
    sorts; 2 cores).
    """
    x = np.asarray(positions, dtype=np.float64)
    w = np.ones(x.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    if not w.sum() > 0:
        raise ValueError("density_centre needs a star of weight > 0 (every weight is 0)")
    centre = (w[:, None] * x).sum(axis=0) / w.sum()
    if x.shape[0] < 100:
        return centre
    order = _DistanceOrder(x, w, centre)
    radius = order.distance[-1]
    keep_min = max(50, x.shape[0] // 100)
    for _ in range(5000):  # 0.975^5000 ~ 1e-55: always enough steps
        radius *= SHRINK
        if np.sqrt(((centre - order.reference) ** 2).sum()) > RESORT_DRIFT * radius:
            # Every sphere until the next sort: within (1 + drift) radius of this centre.
            order = _DistanceOrder(x, w, centre, reach=(1.0 + RESORT_DRIFT) * radius * (1.0 + 1e-9))
        count, weight, weighted = order.inside(x, w, centre, radius)
        if count < keep_min:
            break
        centre = weighted / weight
    return centre
