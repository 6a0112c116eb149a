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
    - `velocities`: (n, 3) velocities in km/s in the cluster's rest frame, or
      (n,) line-of-sight velocities (the z component, the axis that projection
      drops), or None.
    - `masses`: (n,) stellar masses in Msun, or None.
    - `velocity_errors`: None (exact velocities) or the 1-sigma Gaussian error
      of each star's line-of-sight velocity in km/s, (n,) or a scalar, all > 0.
      Only line-of-sight velocities may carry errors.
    - `projected`: True when `positions` are projected (static; set from the
      shape of `positions`).

    Construction from concrete arrays checks them (finite, consistent shapes,
    n >= 1, masses > 0, errors > 0) and raises `ValueError` naming the field.
    """

    positions: Array
    velocities: Array | None
    masses: Array | None
    velocity_errors: Array | None = None
    projected: bool = eqx.field(static=True, default=False)

    def __init__(self, positions, velocities=None, masses=None, velocity_errors=None):
        dtype = jnp.result_type(float)
        self.positions = jnp.asarray(positions, dtype=dtype)
        self.velocities = None if velocities is None else jnp.asarray(velocities, dtype=dtype)
        self.masses = None if masses is None else jnp.asarray(masses, dtype=dtype)
        errors = None if velocity_errors is None else jnp.asarray(velocity_errors, dtype=dtype)
        if errors is not None and errors.ndim == 0 and self.positions.ndim == 2:
            errors = jnp.full((self.positions.shape[0],), errors)
        self.velocity_errors = errors
        self.projected = self.positions.ndim == 2 and self.positions.shape[-1] == 2
        _check(self)

    @property
    def n(self) -> int:
        """Number of stars (static)."""
        return self.positions.shape[0]

    @property
    def line_of_sight(self) -> bool:
        """True when the velocities are line-of-sight components, shape (n,) (static)."""
        return self.velocities is not None and self.velocities.ndim == self.positions.ndim - 1


def _check(data: ObservedCluster) -> None:
    pos = data.positions
    if pos.ndim != 2 or pos.shape[1] not in (2, 3):
        raise ValueError(f"positions must have shape (n, 3) or (n, 2) (projected), got {pos.shape}")
    n = pos.shape[0]
    if n < 1:
        raise ValueError("the data hold no stars (n = 0): positions must have at least one row")
    if data.velocities is not None and data.velocities.shape not in ((n, 3), (n,)):
        raise ValueError(
            f"velocities must have shape ({n}, 3) (3D) or ({n},) (line of sight) to match positions, "
            f"got {data.velocities.shape}"
        )
    if data.masses is not None and data.masses.shape != (n,):
        raise ValueError(f"masses must have shape ({n},) to match positions, got {data.masses.shape}")
    if data.velocity_errors is not None:
        if data.velocities is None or data.velocities.shape != (n,):
            raise ValueError("velocity_errors need line-of-sight velocities of shape (n,) (3D velocities are exact)")
        if data.velocity_errors.shape != (n,):
            raise ValueError(f"velocity_errors must be a scalar or have shape ({n},), got {data.velocity_errors.shape}")
    for name in ("positions", "velocities", "masses", "velocity_errors"):
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
    if _concrete(data.velocity_errors):
        e = np.asarray(data.velocity_errors)
        if (e <= 0).any():
            i = int(np.nonzero(e <= 0)[0][0])
            raise ValueError(
                f"velocity_errors must be > 0 km/s: {(e <= 0).sum()} are not (first at row {i}: {e[i]}); "
                "pass velocity_errors=None for exact velocities"
            )


def observe(
    ic: InitialConditions,
    *,
    projected: bool = False,
    velocities: bool | str = True,
    masses: bool = True,
    velocity_error: float | None = None,
    key=None,
) -> ObservedCluster:
    """What an observer with perfect measurements sees of a built cluster.

    The cluster is converted to physical units (pc, km/s, Msun). Positions are
    taken about the origin of the build (the centre of mass for `plummer_builder`).

    **Arguments:**

    - `ic`: the `InitialConditions`.
    - `projected`: keep only (x, y), the sky plane seen along z.
    - `velocities`: True (3D velocities), "los" (the line-of-sight, z,
      component only) or False; `masses`: whether masses are observed.
    - `velocity_error`: with `velocities="los"`, a Gaussian error of this
      1-sigma size (km/s) is added to each line-of-sight velocity, drawn with
      `key`, and recorded as the stars' `velocity_errors`.

    **Returns:** an `ObservedCluster`. Stars with membership weight below 1/2 (a
    truncated cluster) are dropped, which is a host-side selection: call
    `observe` outside `jit`.
    """
    phys = ic.to_physical()
    s = phys.state
    keep = np.asarray(phys.weights) >= 0.5
    pos = np.asarray(s.positions)[keep]
    vel = np.asarray(s.velocities)[keep]
    errors = None
    if velocities == "los":
        vel = vel[:, 2]
        if velocity_error is not None:
            if key is None:
                raise ValueError("observe(..., velocity_error=e) needs a key for the error draws")
            vel = vel + velocity_error * np.asarray(jax.random.normal(key, vel.shape, dtype=vel.dtype))
            errors = np.full(vel.shape, velocity_error)
    elif velocities not in (True, False):
        raise ValueError(f"velocities must be True, False or 'los', got {velocities!r}")
    elif velocity_error is not None:
        raise ValueError("velocity_error needs velocities='los' (3D velocities are exact)")
    return ObservedCluster(
        pos[:, :2] if projected else pos,
        vel if velocities else None,
        np.asarray(s.masses)[keep] if masses else None,
        errors,
    )
