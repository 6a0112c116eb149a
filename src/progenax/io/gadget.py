r"""Gadget / SWIFT-style HDF5 snapshots of `InitialConditions`.

`write_gadget(ic, path)` writes a single-file snapshot that Gadget-2/3/4, AREPO,
SWIFT and their readers (yt, pynbody, swiftsimio) understand;
`read_gadget(path)` reads one back as an `InitialConditions` in physical units.

## Layout

Group `Header`, attributes:

| name                     | value                                               |
|--------------------------|-----------------------------------------------------|
| `NumPart_ThisFile`       | (6,) uint32: n in slot `particle_type`, 0 elsewhere |
| `NumPart_Total`          | (6,) uint32: the same (one file per snapshot)       |
| `NumPart_Total_HighWord` | (6,) uint32: n >> 32 in slot `particle_type`        |
| `MassTable`              | (6,) float64 zeros: masses are per particle         |
| `BoxSize`                | float64, 0 for open boundaries unless given         |
| `Time`                   | float64, 0.0                                        |
| `Redshift`               | float64, 0.0                                        |
| `NumFilesPerSnapshot`    | int32, 1                                            |
| `Omega0`, `OmegaLambda`, `HubbleParam` | 0, 0, 1 (not cosmological)            |
| `Flag_Sfr`, `Flag_Cooling`, `Flag_StellarAge`, `Flag_Metals`, `Flag_Feedback` | int32, 0 |
| `Flag_DoublePrecision`   | int32, 1 for float64 data, 0 for float32            |
| `Dimension`              | int32, 3 (SWIFT)                                    |

Group `PartType{k}` (k = 4, "stars", by default; `particle_type=1` for a
collisionless N-body run, where stars are Gadget's "halo" particles):

| dataset       | shape  | dtype                       |
|---------------|--------|-----------------------------|
| `Coordinates` | (n, 3) | the state's float dtype     |
| `Velocities`  | (n, 3) | the state's float dtype     |
| `Masses`      | (n,)   | the state's float dtype     |
| `ParticleIDs` | (n,)   | uint64, 1 ... n             |

Group `Units` (SWIFT's names, cgs): `Unit length in cgs (U_L)` = one pc,
`Unit mass in cgs (U_M)` = one Msun, `Unit velocity in cgs (U_V)` = 1 km/s,
`Unit time in cgs (U_t)` = U_L / U_V, `Unit current in cgs (U_I)` = 1,
`Unit temperature in cgs (U_T)` = 1.

**Gas** (`progenax.gravoturb.GasCloud`, anything with `internal_energy` and
`smoothing_length`) is written as `PartType0`, with two more datasets:

| dataset           | shape | meaning                                        |
|-------------------|-------|------------------------------------------------|
| `InternalEnergy`  | (n,)  | specific internal energy u, (km/s)^2           |
| `SmoothingLength` | (n,)  | SPH smoothing length h, pc                     |

`write_gadget(stars, path, gas=cloud)` writes both in one snapshot (gas IDs
1 ... n_gas, then the stars'); `read_gadget(path, particle_type=0)` reads the gas
back as a `GasCloud` (its `field` is None).

Group `progenax` (ignored by other codes): attributes `model` and
`progenax_version`, so that `read_gadget` gives back the model name.

## Units

Values are written **as they are in physical units**: positions in pc,
velocities in km/s, masses in Msun; the `Units` group says so. An
`InitialConditions` in Henon units is converted with `ic.to_physical()` first.
Gadget's own convention differs (default length kpc/h, velocity km/s, mass
1e10 Msun/h, and velocities in the file are $\sqrt{a}$ times peculiar at
redshift z; here a = 1, so nothing changes): set `UnitLength_in_cm =
3.0856775814913673e18`, `UnitMass_in_g = 1.98841e33`,
`UnitVelocity_in_cm_per_s = 1e5` in the Gadget parameter file (SWIFT reads the
`Units` group itself when `InitialConditions:cleanup_h_factors` is off).
In these units $G = 4.300917\times10^{-3}$.

## Soft weights

Gadget particles have no membership weight, so `write_gadget` **refuses** an
`InitialConditions` whose weights are not all exactly 1 (`ValueError`): silently
multiplying masses by weights would change the dynamics (zero-mass particles,
a different total mass). Drop or harden the weights first. `read_gadget` gives
weights of 1.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import jax
import numpy as np

from .._version import __version__
from ..gravoturb.cloud import GasCloud
from ..models import RecordedModel
from ..state import InitialConditions, ParticleState
from ..units import physical_units
from ._paths import atomic_write, check_finite_arrays, readable_file, writable_path

U_L_CGS = 3.0856775814913673e18
"""One parsec in cm."""
U_M_CGS = 1.98841e33
"""One solar mass in g."""
U_V_CGS = 1.0e5
"""One km/s in cm/s."""

PARTICLE_TYPES = (0, 1, 2, 3, 4, 5)
DEFAULT_PARTICLE_TYPE = 4


def _check_particle_type(particle_type: int) -> int:
    if (
        isinstance(particle_type, bool)
        or not isinstance(particle_type, (int, np.integer))
        or (int(particle_type) not in PARTICLE_TYPES)
    ):
        raise ValueError(
            f"particle_type must be an integer in {PARTICLE_TYPES} (4: stars, 1: collisionless), got {particle_type!r}"
        )
    return int(particle_type)


def check_unit_weights(ic, fmt: str) -> None:
    """Raise `ValueError` if any weight of `ic` differs from 1 (`fmt` names the format)."""
    w = np.asarray(ic.weights)
    bad = int(np.count_nonzero(w != 1))
    if bad:
        raise ValueError(
            f"the {fmt} format has no membership weights, and {bad} of {w.size} weights are not 1 "
            f"(min {w.min():.6g}); refusing to write them. Drop the low-weight stars or set "
            f"weights to 1 first (or use the native .h5/.npz or csv format, which keep weights)"
        )


def is_gas(obj) -> bool:
    """True for SPH gas particles (an object with `internal_energy` and `smoothing_length`)."""
    return hasattr(obj, "internal_energy") and hasattr(obj, "smoothing_length")


def _particle_arrays(ic) -> dict[str, np.ndarray]:
    """The datasets of one particle group, in physical units, as numpy arrays."""
    phys = ic.to_physical()
    s = phys.state
    arrays = {
        "Coordinates": np.asarray(s.positions),
        "Velocities": np.asarray(s.velocities),
        "Masses": np.asarray(s.masses),
    }
    if is_gas(ic):
        arrays["InternalEnergy"] = np.asarray(phys.internal_energy)
        arrays["SmoothingLength"] = np.asarray(phys.smoothing_length)
        n = arrays["Masses"].shape[0]
        for name in ("InternalEnergy", "SmoothingLength"):
            if arrays[name].shape != (n,):
                raise ValueError(f"gas {name} must have shape ({n},), got {arrays[name].shape}")
    return arrays


def write_gadget(
    ic,
    path: str | os.PathLike,
    *,
    particle_type: int | None = None,
    box_size: float = 0.0,
    gas=None,
    recipe: str | None = None,
) -> Path:
    """Write `ic` as a Gadget/SWIFT HDF5 snapshot (see the module docstring).

    **Arguments:**

    - `ic`: an `InitialConditions` (any units; converted to physical), or SPH
      gas (`progenax.gravoturb.GasCloud`), written as `PartType0`.
    - `path`: the file to write (overwritten); its directory must exist.
    - `particle_type`: the `PartType` group of `ic`; None (default) means 4
      (stars) for an `InitialConditions` and 0 for gas. 1 writes collisionless
      N-body particles; any of 0..5 is accepted for stars; gas must be 0.
    - `box_size`: `Header/BoxSize` in pc; 0 (default) means open boundaries.
    - `gas`: optional SPH gas written as `PartType0` next to the stars of `ic`.
    - `recipe`: the build recipe (JSON text, `progenax.io.recipe`), kept as
      the `progenax/recipe` attribute.

    **Returns:** the path.

    **Raises:** `ValueError` if a weight is not 1, an array holds NaN or inf,
    `particle_type` is not in 0..5 (or not 0 for gas, or 0 for stars written
    with `gas=`) or `box_size` is negative or not finite; `FileNotFoundError`
    if the directory is missing. The write is atomic
    (`progenax.io._paths.atomic_write`): a failed one leaves the old file.
    """

    ic_is_gas = is_gas(ic)
    if particle_type is None:
        ptype = 0 if ic_is_gas else DEFAULT_PARTICLE_TYPE
    else:
        ptype = _check_particle_type(particle_type)
    if ic_is_gas and ptype != 0:
        raise ValueError(
            f"gas particles are written as PartType0; particle_type must be 0 or None, got {particle_type!r}"
        )
    if gas is not None:
        if not is_gas(gas):
            raise ValueError("gas= must be SPH gas with internal_energy and smoothing_length (a GasCloud)")
        if ptype == 0:
            raise ValueError("with gas=, the particles of ic cannot also be PartType0; choose particle_type 1..5")
    box = float(box_size)
    if not (np.isfinite(box) and box >= 0.0):
        raise ValueError(f"box_size must be >= 0 and finite (0: open boundaries), got {box_size!r}")
    path = writable_path(path)
    groups: list[tuple[int, object]] = ([(0, gas)] if gas is not None else []) + [(ptype, ic)]
    for _, obj in groups:
        check_finite_arrays(obj)
        check_unit_weights(obj, "gadget")
    content = [(k, _particle_arrays(obj)) for k, obj in groups]

    counts = np.zeros(6, dtype=np.uint32)
    high = np.zeros(6, dtype=np.uint32)
    for k, arrays in content:
        n = arrays["Masses"].shape[0]
        counts[k] = n & 0xFFFFFFFF
        high[k] = n >> 32
    double = int(content[-1][1]["Coordinates"].dtype == np.float64)

    with atomic_write(path) as (temp,):
        _write_snapshot(temp, content, counts, high, double, box, ic, gas, recipe)
    return path


def _write_snapshot(path: Path, content, counts, high, double: int, box: float, ic, gas, recipe=None) -> None:
    """The snapshot's groups and datasets (see the module docstring), into `path`."""
    with h5py.File(path, "w") as f:
        h = f.create_group("Header")
        h.attrs["NumPart_ThisFile"] = counts
        h.attrs["NumPart_Total"] = counts
        h.attrs["NumPart_Total_HighWord"] = high
        h.attrs["MassTable"] = np.zeros(6, dtype=np.float64)
        h.attrs["BoxSize"] = np.float64(box)
        h.attrs["Time"] = np.float64(0.0)
        h.attrs["Redshift"] = np.float64(0.0)
        h.attrs["NumFilesPerSnapshot"] = np.int32(1)
        h.attrs["Omega0"] = np.float64(0.0)
        h.attrs["OmegaLambda"] = np.float64(0.0)
        h.attrs["HubbleParam"] = np.float64(1.0)
        for flag in ("Flag_Sfr", "Flag_Cooling", "Flag_StellarAge", "Flag_Metals", "Flag_Feedback"):
            h.attrs[flag] = np.int32(0)
        h.attrs["Flag_DoublePrecision"] = np.int32(double)
        h.attrs["Dimension"] = np.int32(3)

        u = f.create_group("Units")
        u.attrs["Unit length in cgs (U_L)"] = np.float64(U_L_CGS)
        u.attrs["Unit mass in cgs (U_M)"] = np.float64(U_M_CGS)
        u.attrs["Unit velocity in cgs (U_V)"] = np.float64(U_V_CGS)
        u.attrs["Unit time in cgs (U_t)"] = np.float64(U_L_CGS / U_V_CGS)
        u.attrs["Unit current in cgs (U_I)"] = np.float64(1.0)
        u.attrs["Unit temperature in cgs (U_T)"] = np.float64(1.0)

        first_id = 1
        for k, arrays in content:
            g = f.create_group(f"PartType{k}")
            for name, data in arrays.items():
                g.create_dataset(name, data=data)
            n = arrays["Masses"].shape[0]
            g.create_dataset("ParticleIDs", data=np.arange(first_id, first_id + n, dtype=np.uint64))
            first_id += n

        p = f.create_group("progenax")
        p.attrs["model"] = ic.model.name
        if gas is not None:
            p.attrs["gas_model"] = gas.model.name
        p.attrs["progenax_version"] = str(__version__)
        if recipe is not None:
            p.attrs["recipe"] = recipe


def read_gadget(path: str | os.PathLike, *, particle_type: int | None = None):
    """Read a Gadget/SWIFT HDF5 snapshot as an `InitialConditions` or gas (physical units).

    **Arguments:**

    - `path`: the snapshot (one file).
    - `particle_type`: the `PartType` group to read; None (default) reads the
      one group that holds particles (an error if several do).

    The values are taken to be in pc, km/s and Msun, which is what
    `write_gadget` writes; a file whose `Units` group says otherwise is converted
    from its cgs units. Masses come from `Masses` or, when that dataset is
    absent, from `Header/MassTable`. Weights are 1; the model is the one
    `write_gadget` recorded, else "gadget"; `params` is empty.

    A `PartType0` group with `InternalEnergy` and `SmoothingLength` is read as
    SPH gas: a `progenax.gravoturb.GasCloud` (its `field` is None).
    """

    path = readable_file(path)
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ValueError(f"{str(path)!r} is not a readable HDF5 file ({err})") from None
    with f:
        if not isinstance(f.get("Header"), h5py.Group):
            raise ValueError(f"{str(path)!r} is not a Gadget/SWIFT snapshot (no Header group)")
        groups = [k for k in PARTICLE_TYPES if isinstance(f.get(f"PartType{k}"), h5py.Group)]
        if particle_type is None:
            filled = [k for k in groups if "Coordinates" in f[f"PartType{k}"]]
            if not filled:
                raise ValueError(f"{str(path)!r} holds no particles (no PartType group with Coordinates)")
            if len(filled) != 1:
                raise ValueError(
                    f"{str(path)!r} holds particles of types {filled}; pass particle_type= to choose one "
                    "(progenax info and plot: --particle-type)"
                )
            ptype = filled[0]
        else:
            ptype = _check_particle_type(particle_type)
            if ptype not in groups:
                raise ValueError(f"{str(path)!r} has no PartType{ptype} group (it has {groups})")
        g = f[f"PartType{ptype}"]
        missing = [name for name in ("Coordinates", "Velocities") if name not in g]
        if missing:
            raise ValueError(f"{str(path)!r}: PartType{ptype} lacks {', '.join(missing)}")
        pos = g["Coordinates"][()]
        vel = g["Velocities"][()]
        if "Masses" in g:
            mass = g["Masses"][()]
        else:
            table = np.asarray(f["Header"].attrs.get("MassTable", np.zeros(6)))
            mass = np.full(pos.shape[0], table[ptype], dtype=pos.dtype)
        scale_l, scale_m, scale_v = 1.0, 1.0, 1.0
        if isinstance(f.get("Units"), h5py.Group):
            ua = f["Units"].attrs
            scale_l = float(ua.get("Unit length in cgs (U_L)", U_L_CGS)) / U_L_CGS
            scale_m = float(ua.get("Unit mass in cgs (U_M)", U_M_CGS)) / U_M_CGS
            scale_v = float(ua.get("Unit velocity in cgs (U_V)", U_V_CGS)) / U_V_CGS
        gas_arrays = None
        if ptype == 0 and "InternalEnergy" in g and "SmoothingLength" in g:
            gas_arrays = (g["InternalEnergy"][()], g["SmoothingLength"][()])
        model = "gadget"
        model_key = "gas_model" if ptype == 0 else "model"
        if isinstance(f.get("progenax"), h5py.Group) and model_key in f["progenax"].attrs:
            value = f["progenax"].attrs[model_key]
            model = value.decode() if isinstance(value, bytes) else str(value)
        elif isinstance(f.get("progenax"), h5py.Group) and "model" in f["progenax"].attrs and len(groups) == 1:
            value = f["progenax"].attrs["model"]
            model = value.decode() if isinstance(value, bytes) else str(value)
    n = mass.shape[0]
    if pos.shape != (n, 3) or vel.shape != (n, 3):
        raise ValueError(
            f"{str(path)!r}: inconsistent shapes Coordinates {pos.shape}, Velocities {vel.shape}, Masses {mass.shape}"
        )
    # Scale only when the file's units are not ours, so a progenax file reads back bit for bit.
    if scale_l != 1.0:
        pos = pos * scale_l
    if scale_v != 1.0:
        vel = vel * scale_v
    if scale_m != 1.0:
        mass = mass * scale_m
    state = ParticleState(jax.device_put(pos), jax.device_put(vel), jax.device_put(mass))
    weights = jax.device_put(np.ones(n, dtype=state.masses.dtype))
    if gas_arrays is not None:
        energy, h = gas_arrays
        if energy.shape != (n,) or h.shape != (n,):
            raise ValueError(
                f"{str(path)!r}: InternalEnergy {energy.shape} / SmoothingLength {h.shape} do not match n = {n}"
            )
        if scale_v != 1.0:
            energy = energy * scale_v**2
        if scale_l != 1.0:
            h = h * scale_l
        return GasCloud(
            state, weights, jax.device_put(energy), jax.device_put(h), RecordedModel(model, {}), {}, physical_units()
        )
    return InitialConditions.from_record(state, weights, model, {}, physical_units())
