"""Observed-cluster data for the likelihoods, and `observe` to make it from a build.

Checks run when the container is built from concrete arrays, so that bad data
(NaN, negative masses, wrong shapes, no stars) raises `ValueError` before any
sampling starts; numpyro later passes the same container through `jit`, where the
arrays are traced and the checks are skipped (they already ran).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..state import InitialConditions


def _concrete(x) -> bool:
    return x is not None and not isinstance(x, jax.core.Tracer)


class ObservedCluster(eqx.Module):
    """Positions, velocities and masses of observed stars, in pc, km/s and Msun.

    **Fields:**

    - `positions`: (n, 3) 3D positions, or (n, 2) sky-projected (x, y) positions,
      in pc about the cluster centre.
    - `velocities`: (n, 3) velocities in km/s in the cluster's rest frame, or None.
    - `masses`: (n,) stellar masses in Msun, or None.
    - `projected`: True when `positions` are projected (static; set from the
      shape of `positions`).

    Construction from concrete arrays checks them (finite, consistent shapes,
    n >= 1, masses > 0) and raises `ValueError` naming the field.
    """

    positions: Array
    velocities: Array | None
    masses: Array | None
    projected: bool = eqx.field(static=True)

    def __init__(self, positions, velocities=None, masses=None):
        self.positions = jnp.asarray(positions, dtype=jnp.result_type(float))
        self.velocities = None if velocities is None else jnp.asarray(velocities, dtype=jnp.result_type(float))
        self.masses = None if masses is None else jnp.asarray(masses, dtype=jnp.result_type(float))
        self.projected = self.positions.ndim == 2 and self.positions.shape[-1] == 2
        _check(self)

    @property
    def n(self) -> int:
        """Number of stars (static)."""
        return self.positions.shape[0]


def _check(data: ObservedCluster) -> None:
    pos = data.positions
    if pos.ndim != 2 or pos.shape[1] not in (2, 3):
        raise ValueError(f"positions must have shape (n, 3) or (n, 2) (projected), got {pos.shape}")
    n = pos.shape[0]
    if n < 1:
        raise ValueError("the data hold no stars (n = 0): positions must have at least one row")
    if data.velocities is not None and data.velocities.shape != (n, 3):
        raise ValueError(f"velocities must have shape ({n}, 3) to match positions, got {data.velocities.shape}")
    if data.masses is not None and data.masses.shape != (n,):
        raise ValueError(f"masses must have shape ({n},) to match positions, got {data.masses.shape}")
    for name in ("positions", "velocities", "masses"):
        x = getattr(data, name)
        if _concrete(x):
            bad = ~np.isfinite(np.asarray(x))
            if bad.any():
                rows = np.unique(np.nonzero(bad)[0])
                raise ValueError(f"{name} must be finite: {rows.size} star(s) have NaN or inf (first at row {rows[0]})")
    if _concrete(data.masses):
        m = np.asarray(data.masses)
        if (m <= 0).any():
            i = int(np.nonzero(m <= 0)[0][0])
            raise ValueError(f"masses must be > 0 Msun: {(m <= 0).sum()} are not (first at row {i}: {m[i]})")


def observe(
    ic: InitialConditions,
    *,
    projected: bool = False,
    velocities: bool = True,
    masses: bool = True,
) -> ObservedCluster:
    """What an observer with perfect measurements sees of a built cluster.

    The cluster is converted to physical units (pc, km/s, Msun). Positions are
    taken about the origin of the build (the centre of mass for `plummer_builder`).

    **Arguments:**

    - `ic`: the `InitialConditions`.
    - `projected`: keep only (x, y), the sky plane seen along z.
    - `velocities`, `masses`: whether the stars' 3D velocities / masses are observed.

    **Returns:** an `ObservedCluster`. Stars with membership weight below 1/2 (a
    truncated cluster) are dropped, which is a host-side selection: call
    `observe` outside `jit`.
    """
    phys = ic.to_physical()
    s = phys.state
    keep = np.asarray(phys.weights) >= 0.5
    pos = np.asarray(s.positions)[keep]
    return ObservedCluster(
        pos[:, :2] if projected else pos,
        np.asarray(s.velocities)[keep] if velocities else None,
        np.asarray(s.masses)[keep] if masses else None,
    )
