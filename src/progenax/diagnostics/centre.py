"""Cluster centres: centre of mass and the density centre.

The centre of mass of a cluster with a heavy-tailed profile (an untruncated EFF
model with gamma <= 5 has no finite second moment) or a broad IMF wanders far from
the core with a few outlying or heavy stars. The density centre does not: it is
found by shrinking spheres (Power et al. 2003), starting from the centroid of all
stars and shrinking the sphere by 2.5% a step, re-centring on the stars inside,
until fewer than max(50, n/100) remain.

`density_centre` is a forward-only diagnostic (its steps are hard decisions on the
data), computed in NumPy.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike, Masses, Positions


def centre_of_mass(positions: Positions, masses: Masses) -> Array:
    return jnp.sum(masses[:, None] * positions, axis=0) / jnp.sum(masses)


def density_centre(positions: ArrayLike, weights: ArrayLike | None = None) -> np.ndarray:
    """Shrinking-sphere centre, stars weighted by `weights` (number by default)."""
    x = np.asarray(positions, dtype=np.float64)
    w = np.ones(x.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    centre = (w[:, None] * x).sum(axis=0) / w.sum()
    if x.shape[0] < 100:
        return centre
    radius = np.sqrt(((x - centre) ** 2).sum(axis=1)).max()
    keep_min = max(50, x.shape[0] // 100)
    for _ in range(5000):  # 0.975^5000 ~ 1e-55: always enough steps
        radius *= 0.975
        inside = ((x - centre) ** 2).sum(axis=1) < radius**2
        if np.count_nonzero(inside) < keep_min:
            break
        centre = (w[inside, None] * x[inside]).sum(axis=0) / w[inside].sum()
    return centre
