r"""AMUSE particle sets of `InitialConditions` (only when AMUSE is installed).

[AMUSE](https://amuse.readthedocs.io) is not a dependency of progenax. Install it
next to progenax with `pip install amuse-framework` (it compiles a small library
and needs C and Fortran compilers, e.g. `gcc` and `gfortran`; see AMUSE's
installation guide). Every function here imports AMUSE first and raises an
`ImportError` saying so, before doing any work, when it is missing.

- `to_amuse(ic)` returns an `amuse.datamodel.Particles` set, in memory;
- `write_amuse(ic, path)` (`progenax.io.write(ic, path, format="amuse")`,
  `progenax build ... --format amuse`) writes it with
  `amuse.io.write_set_to_file(particles, path, "amuse")`, AMUSE's own HDF5 file;
- `read_amuse(path)` reads such a file back as an `InitialConditions` (or gas).

## Attributes and units

Each particle gets `mass`, `position` (`x`, `y`, `z`) and `velocity` (`vx`,
`vy`, `vz`), as AMUSE quantities, in the unit system of the cluster:

| cluster units | `mass` | `position` | `velocity` |
|---------------|--------|------------|------------|
| physical (default) | `units.MSun` | `units.parsec` | `units.kms` |
| Henon | `nbody_system.mass` | `nbody_system.length` | `nbody_system.speed` |

Henon units are AMUSE's N-body units: $G = 1$, total mass 1 and virial radius
1, so $E = -1/4$ at virial ratio $Q = 1/2$ — the convention of AMUSE's own
`new_plummer_model(n)`. Use such a set with a gravity code started without a
converter, or give the code the converter of the cluster's scales,
`nbody_system.nbody_to_si(float(ic.units.mass_msun) | units.MSun,
float(ic.units.length_pc) | units.parsec)`. `units="physical"` or `units="henon"`
converts first (`ic.to_physical()`, `ic.to_henon()`).

AMUSE's constants differ slightly from progenax's: its $G$ is
$4.30201\times10^{-3}$ pc Msun$^{-1}$ (km/s)$^2$ against progenax's
$4.300917\times10^{-3}$ (0.025% apart). Values are written as they are, so a
cluster built at $Q = 1/2$ in physical units has $Q$ 0.025% lower under AMUSE's
$G$; in N-body units both have $G = 1$ and nothing changes.

**Gas** (`progenax.gravoturb.GasCloud`, always in physical units) gets two more
attributes, the names AMUSE's SPH codes (Fi, Gadget2, Phantom) read:
`u`, the specific internal energy, in `units.kms**2`, and `h_smooth`, the
smoothing length, in `units.parsec`.

The set's `collection_attributes` record where it came from (AMUSE stores
them in the file): `progenax_model` (the builder), `progenax_version`,
`progenax_units` ("physical" or "henon") and `length_pc`, `mass_msun`,
`velocity_kms` (one unit of the set in pc, Msun and km/s: 1 for physical
units, the Henon scales otherwise), so `read_amuse` can give a Henon cluster
its physical scales back.

AMUSE keeps attributes in float64: a float32 cluster is widened, and
`read_amuse` returns float64 arrays (float32 when `jax_enable_x64` is off).

## Soft weights

AMUSE's gravity codes have no membership weights, so `to_amuse` **refuses**
weights that are not all 1 (`ValueError`), as the Gadget and NBODY6 writers do.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from .._version import __version__
from ..gravoturb.cloud import GasCloud
from ..models import RecordedModel
from ..state import InitialConditions, ParticleState
from ..units import Units, physical_units
from ._paths import atomic_write, check_finite_arrays, readable_file, writable_path
from .gadget import check_unit_weights, is_gas

INSTALL_HINT = (
    "the AMUSE format needs AMUSE, which is not installed (or does not import). "
    "Install it next to progenax with `pip install amuse-framework` (it compiles a small "
    "library: it needs C and Fortran compilers such as gcc and gfortran); see "
    "https://amuse.readthedocs.io for other ways. Or write another format: "
    "format='gadget', 'nbody6', 'csv', or progenax's own .h5"
)

AMUSE_FORMAT = "amuse"
"""The format name AMUSE's `write_set_to_file` / `read_set_from_file` use for its HDF5 files."""

UNITS_CHOICES = (None, "physical", "henon")


def require_amuse():
    """AMUSE's `Particles`, `units`, `nbody_system` and `io` modules.

    **Raises:** `ImportError` saying how to install AMUSE when it does not import.
    """
    try:
        import amuse.io as amuse_io
        from amuse.datamodel import Particles
        from amuse.units import nbody_system, units
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from err
    return Particles, units, nbody_system, amuse_io


def _is_gas(ic) -> bool:

    return is_gas(ic)


def _in_units(ic, units: str | None):
    """`ic` in the unit system asked for (None: its own), after checking `units`."""
    if units not in UNITS_CHOICES:
        raise ValueError(f"units must be one of {UNITS_CHOICES} (None: the cluster's own), got {units!r}")
    if units == "physical":
        return ic.to_physical()
    if units == "henon":
        if _is_gas(ic):
            raise ValueError("gas (a GasCloud) is only written in physical units; use units=None or 'physical'")
        return ic.to_henon()
    return ic


def to_amuse(ic, *, units: str | None = None):
    """An AMUSE `Particles` set holding `ic` (see the module docstring for units).

    **Arguments:**

    - `ic`: an `InitialConditions` (physical or Henon units), or SPH gas
      (`progenax.gravoturb.GasCloud`), which also gets `u` and `h_smooth`.
    - `units`: None (default) keeps the cluster's own unit system: physical
      gives `MSun`, `parsec`, `kms`; Henon gives AMUSE's `nbody_system` mass,
      length and speed. "physical" or "henon" converts first.

    **Returns:** an `amuse.datamodel.Particles` of `ic.n` particles with
    `mass`, `position`, `velocity` (and for gas `u` in kms**2, `h_smooth` in
    parsec), float64.

    **Raises:** `ImportError` (with install instructions) when AMUSE is
    missing; `ValueError` if a weight is not 1, an array holds NaN or inf, or
    `units` is not one of None, "physical", "henon".
    """
    particles_cls, amuse_units, nbody_system, _ = require_amuse()

    check_finite_arrays(ic)
    ic = _in_units(ic, units)
    check_unit_weights(ic, "amuse")
    check_finite_arrays(ic)  # the conversion too (coincident stars have no virial radius)
    if ic.units.name == "henon":
        mass_unit, length_unit, speed_unit = nbody_system.mass, nbody_system.length, nbody_system.speed
    else:
        mass_unit, length_unit, speed_unit = amuse_units.MSun, amuse_units.parsec, amuse_units.kms

    s = ic.state
    n = int(s.masses.shape[0])
    particles = particles_cls(n)
    particles.mass = np.asarray(s.masses, dtype=np.float64) | mass_unit
    particles.position = np.asarray(s.positions, dtype=np.float64) | length_unit
    particles.velocity = np.asarray(s.velocities, dtype=np.float64) | speed_unit
    if _is_gas(ic):
        u = np.asarray(ic.internal_energy, dtype=np.float64)
        h = np.asarray(ic.smoothing_length, dtype=np.float64)
        if u.shape != (n,) or h.shape != (n,):
            raise ValueError(f"gas internal_energy {u.shape} / smoothing_length {h.shape} must have shape ({n},)")
        particles.u = u | amuse_units.kms**2
        particles.h_smooth = h | amuse_units.parsec

    info = particles.collection_attributes
    info.progenax_model = ic.model.name
    info.progenax_version = str(__version__)
    info.progenax_units = str(ic.units.name)
    info.length_pc = float(np.asarray(ic.units.length_pc))
    info.mass_msun = float(np.asarray(ic.units.mass_msun))
    info.velocity_kms = float(np.asarray(ic.units.velocity_kms))
    return particles


def write_amuse(ic, path: str | os.PathLike, *, units: str | None = None) -> Path:
    """Write `ic` as an AMUSE HDF5 particle file (`write_set_to_file(..., "amuse")`).

    **Arguments:**

    - `ic`: an `InitialConditions` or a `GasCloud`, as for `to_amuse`.
    - `path`: the file to write (overwritten); its directory must exist. AMUSE
      users name it `*.amuse` or `*.h5`; read it with
      `amuse.io.read_set_from_file(path, "amuse")`.
    - `units`: as for `to_amuse`.

    **Returns:** the path.

    **Raises:** `ImportError` (before anything else) when AMUSE is missing;
    `ValueError` as `to_amuse`; `FileNotFoundError` if the directory is missing.
    The write is atomic (`progenax.io._paths.atomic_write`): AMUSE writes a
    temporary file beside `path`, renamed over it once complete.
    """
    _, _, _, amuse_io = require_amuse()
    path = writable_path(path)
    particles = to_amuse(ic, units=units)
    with atomic_write(path) as (temp,):
        amuse_io.write_set_to_file(particles, str(temp), AMUSE_FORMAT, overwrite_file=True)
    return path


def _value_in(quantity, unit) -> np.ndarray:
    """The numbers of an AMUSE `quantity` in `unit`, exact for a file written in `unit`.

    AMUSE's file stores each attribute's unit as text with 12 significant
    digits: `parsec` comes back as `3.08567758128e+16 * m`, 5e-13 away from
    AMUSE's own `units.parsec`. A unit that close to `unit` is taken to be it,
    so the stored numbers come back bit for bit.
    """
    ratio = float((1.0 | quantity.unit).value_in(unit))
    if abs(ratio - 1.0) < 1e-11:
        return np.asarray(quantity.number, dtype=np.float64)
    return np.asarray(quantity.value_in(unit), dtype=np.float64)


def _info(particles, name: str, default):
    value = getattr(particles.collection_attributes, name, None)
    return default if value is None else value


def read_amuse(path: str | os.PathLike):
    """Read an AMUSE HDF5 particle file as an `InitialConditions` (or `GasCloud`).

    **Arguments:**

    - `path`: a file written by `write_amuse`, or any AMUSE `"amuse"` file of a
      particle set with `mass`, `x`, `y`, `z`, `vx`, `vy`, `vz`.

    Physical quantities (any AMUSE units: kg, m, m/s, ...) are converted to
    Msun, pc and km/s. A set in N-body units becomes a cluster in Henon units;
    its physical scales are the `length_pc`, `mass_msun`, `velocity_kms`
    collection attributes `write_amuse` stores (a set without them cannot be
    placed in physical units: `ValueError`). A set with `u` and `h_smooth` in
    physical units is read as a `progenax.gravoturb.GasCloud` (its `field` is
    None). Weights are 1; the model is `progenax_model` when recorded, else
    "amuse"; `params` is empty.

    **Raises:** `ImportError` when AMUSE is missing; `FileNotFoundError` if the
    file does not exist; `ValueError` for a set that lacks those attributes.
    """
    _, amuse_units, nbody_system, amuse_io = require_amuse()

    path = readable_file(path)
    particles = amuse_io.read_set_from_file(str(path), AMUSE_FORMAT, close_file=True)
    names = set(particles.get_attribute_names_defined_in_store())
    missing = [name for name in ("mass", "x", "y", "z", "vx", "vy", "vz") if name not in names]
    if missing:
        raise ValueError(f"{str(path)!r}: the particle set lacks {', '.join(missing)}")

    nbody = nbody_system.is_nbody_unit(particles.mass.unit)
    if nbody:
        scales = [_info(particles, name, None) for name in ("length_pc", "mass_msun", "velocity_kms")]
        if any(value is None for value in scales):
            raise ValueError(
                f"{str(path)!r} is in N-body units without the physical scales progenax records "
                "(length_pc, mass_msun, velocity_kms); convert it to physical units in AMUSE first"
            )
        mass = _value_in(particles.mass, nbody_system.mass)
        pos = _value_in(particles.position, nbody_system.length)
        vel = _value_in(particles.velocity, nbody_system.speed)
        units = Units("henon", *(jnp.asarray(float(value)) for value in scales))
    else:
        mass = _value_in(particles.mass, amuse_units.MSun)
        pos = _value_in(particles.position, amuse_units.parsec)
        vel = _value_in(particles.velocity, amuse_units.kms)
        units = physical_units()
    model = str(_info(particles, "progenax_model", "amuse"))
    state = ParticleState(jnp.asarray(pos), jnp.asarray(vel), jnp.asarray(mass))
    weights = jnp.ones(state.n, dtype=state.masses.dtype)
    if {"u", "h_smooth"} <= names and not nbody:
        u = jnp.asarray(_value_in(particles.u, amuse_units.kms**2))
        h = jnp.asarray(_value_in(particles.h_smooth, amuse_units.parsec))
        return GasCloud(state, weights, u, h, RecordedModel(model, {}), {}, units)
    return InitialConditions.from_record(state, weights, model, {}, units)
