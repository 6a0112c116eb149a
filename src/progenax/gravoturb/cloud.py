r"""Containers of the gravoturbulent builders: the field on the grid and the gas particles.

*Experimental.* `TurbulentField` holds the log-density $s$ and velocity grids a
builder drew its particles from; `GasCloud` holds SPH gas particles (positions,
velocities, masses, internal energies, smoothing lengths) in the same shape as
`progenax.InitialConditions` (`state`, `weights`, `model`, `params`, `units`),
so `progenax.io.write(cloud, path, format="gadget")` writes them as `PartType0`
and SPH code (`progenax.sph`, relaxation) reads `cloud.state.positions`,
`cloud.state.masses` and `cloud.smoothing_length`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike, Masses, Scalar, Weights
from ..models import RecordedModel, as_model
from ..state import ParticleState
from ..units import Units
from ..validation import check_range

GEOMETRIES = ("sphere", "box")


class TurbulentField(eqx.Module):
    r"""The grid a gravoturbulent builder sampled: $s = \ln(\rho/\rho_0)$ and $\mathbf v$.

    **Fields:**

    - `log_density`: (g, g, g) $s$ per cell; its volume average of $e^s$ is 1 up
      to the grid's quadrature of the model PDF (`progenax.gravoturb.pdf`).
    - `velocity`: (g, g, g, 3) in km/s; grid rms $\mathcal M c_s$.
    - `threshold`: the transition $s_t$ of the PDF.
    - `box_size`: side L of the periodic cube in pc, centred on the origin.
    - `geometry`: "sphere" (the cloud is the ball of radius L/2) or "box" (static).
    """

    log_density: Array
    velocity: Array
    threshold: Scalar
    box_size: Scalar
    geometry: str = eqx.field(static=True)

    @property
    def grid(self) -> int:
        return self.log_density.shape[0]

    @property
    def cell_size(self) -> Scalar:
        return self.box_size / self.grid

    def cell_centres(self) -> Array:
        """(g, g, g, 3) cell centres in pc."""
        g = self.grid
        centre = (jnp.arange(g, dtype=self.log_density.dtype) + 0.5) * self.cell_size - 0.5 * self.box_size
        return jnp.stack(jnp.meshgrid(centre, centre, centre, indexing="ij"), axis=-1)

    def inside(self) -> Array:
        """(g, g, g) 1 for cells of the cloud (centre inside the sphere), else 0 (static geometry)."""
        if self.geometry == "box":
            return jnp.ones_like(self.log_density)
        r2 = jnp.sum(jax.lax.stop_gradient(self.cell_centres()) ** 2, axis=-1)
        return (r2 <= (0.5 * jax.lax.stop_gradient(self.box_size)) ** 2).astype(self.log_density.dtype)

    def cell_mass_weights(self) -> Array:
        r"""(g, g, g) $e^{s}$ inside the cloud, 0 outside: the gas mass per cell up to a constant."""
        return jnp.exp(self.log_density) * self.inside()

    def cell_index(self, positions: ArrayLike) -> Array:
        """Flat (C-order) index of the cell holding each position (no gradient)."""
        x = jax.lax.stop_gradient(jnp.asarray(positions))
        g = self.grid
        idx = jnp.floor((x + 0.5 * self.box_size) / self.cell_size).astype(jnp.int32)
        idx = jnp.clip(idx, 0, g - 1)
        return (idx[..., 0] * g + idx[..., 1]) * g + idx[..., 2]

    def sample_velocity(self, positions: ArrayLike) -> Array:
        """Trilinear (periodic) interpolation of the velocity grid at `positions`, (n, 3) km/s.

        Continuous in the positions, so gradients flow through them as well.
        """
        x = jnp.asarray(positions)
        g = self.grid
        coords = (x + 0.5 * self.box_size) / self.cell_size - 0.5
        base = jnp.floor(jax.lax.stop_gradient(coords))
        frac = coords - base
        base = base.astype(jnp.int32)
        # The eight corners' cells in one gather (and so one scatter in the
        # gradient): a gather per corner made about a sixth of a gas cloud's
        # gradient program. The corners are then summed in order, as before.
        bits = np.array([[(corner >> d) & 1 for d in range(3)] for corner in range(8)])  # (8, 3)
        cell = (base[..., None, :] + bits) % g  # (..., 8, 3)
        flat = (cell[..., 0] * g + cell[..., 1]) * g + cell[..., 2]
        values = self.velocity.reshape(-1, 3)[flat]  # (..., 8, 3)
        out = jnp.zeros(x.shape[:-1] + (3,), self.velocity.dtype)
        for corner in range(8):
            w = 1.0
            for d in range(3):
                w = w * (frac[..., d] if bits[corner, d] else 1.0 - frac[..., d])
            out = out + w[..., None] * values[..., corner, :]
        return out


class GasCloud(eqx.Module):
    """SPH gas particles of a turbulent cloud (experimental).

    **Fields:**

    - `state`: `ParticleState` (positions in pc, velocities in km/s, masses in Msun).
    - `weights`: (n,) all 1 (same meaning as `InitialConditions.weights`).
    - `internal_energy`: (n,) specific internal energy in (km/s)^2.
    - `smoothing_length`: (n,) SPH smoothing length h in pc.
    - `model`: a `progenax.models.RecordedModel` named "gravoturb_gas".
    - `params`: the parameters used (differentiable leaves).
    - `units`: physical units (pc, Msun, km/s).
    - `field`: the `TurbulentField` the particles were drawn from (None when read from a file).
    """

    state: ParticleState
    weights: Weights
    internal_energy: Array
    smoothing_length: Array
    model: RecordedModel = eqx.field(converter=as_model)
    params: dict[str, Scalar]
    units: Units
    field: TurbulentField | None = None

    @property
    def n(self) -> int:
        return self.state.n

    @property
    def positions(self) -> Array:
        return self.state.positions

    @property
    def masses(self) -> Masses:
        return self.state.masses

    @property
    def pairs(self) -> None:
        """Gas has no binaries (the `InitialConditions.pairs` of a cluster)."""
        return None

    @property
    def energy_method(self) -> str:
        """The `potential_energy` method for the gas: "auto" (exact up to
        `EXACT_MAX_N` particles, the mesh above: a turbulent cloud is not spherical)."""
        return "auto"

    def to_physical(self) -> GasCloud:
        """Gas clouds are always in physical units (pc, Msun, km/s)."""
        if self.units.name != "physical":
            raise ValueError("a GasCloud must be in physical units (pc, Msun, km/s)")
        return self


def dense_gas_fraction(field: TurbulentField, *, kappa: ArrayLike = 10.0, hard: bool = False) -> Scalar:
    r"""Fraction of the cloud's gas mass above the transition $s_t$, from the grid.

    $$f = \frac{\sum_c e^{s_c} w_c\,\sigma(\kappa(s_c - s_t))}{\sum_c e^{s_c} w_c}$$

    over cells $c$ ($w_c$ = 1 inside the cloud), with the logistic $\sigma$ of
    width $1/\kappa$; `hard=True` uses the step $[s_c > s_t]$ instead (no
    gradient). Computed from the transformed cell values, not from a count of
    particles, so it is a smooth function of the Mach number, $b$ and $\alpha$.
    """
    m = field.cell_mass_weights()
    if not hard:
        kappa = check_range("kappa", kappa, lower=0.0)
    excess = field.log_density - field.threshold
    above = (excess > 0).astype(m.dtype) if hard else jax.nn.sigmoid(jnp.asarray(kappa, m.dtype) * excess)
    return jnp.sum(m * above) / jnp.sum(m)
