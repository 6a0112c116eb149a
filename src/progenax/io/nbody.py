r"""NBODY6 / NBODY6++ / PeTar input tables of `InitialConditions`.

`write_nbody6(ic, path)` writes the plain ASCII table that NBODY6 reads from
`fort.10`, one line per star:

    mass  x  y  z  vx  vy  vz

in **Henon (N-body) units**, $G = M = 1$, length unit the virial radius
$r_v = G M^2 / (2|W|)$ (`ic.to_henon()`), so that a cluster in virial
equilibrium ($Q = 1/2$) has $E = T + W = -1/4$. Numbers are written with
`'%.17g'`, enough digits for every float64 to read back bit for bit. There is
no header line: NBODY6 reads the file with Fortran list-directed input,
`READ (10,*) BODY(I), (X(K,I),K=1,3), (XDOT(K,I),K=1,3)` for I = 1..N, and a
comment line would stop it. The physical scales therefore go to a **sidecar**
JSON file `<path>.units.json` (e.g. `fort.10.units.json`):

    {"format": "progenax-nbody6", "units": "henon", "n": ..., "model": ...,
     "length_pc": ..., "mass_msun": ..., "velocity_kms": ..., "time_myr": ...,
     "G": 1.0, "nbody6": {"N": ..., "RBAR": ..., "ZMBAR": ...},
     "table_sha256": ...}

`read_nbody6(path)` reads the table back as an `InitialConditions` in Henon
units, with the scales from the sidecar (or given as arguments).

## Writing the pair

Both files are written to temporaries beside them, then renamed over the old
ones, the table first and the sidecar second (`progenax.io._paths.atomic_write`):
a failed write leaves the old pair as it was. `table_sha256`, the SHA-256 of
the table's bytes, ties the sidecar to its table: a process killed between the
two renames leaves the new table beside the old sidecar, and `read_nbody6`
refuses a sidecar whose checksum (or `n`) does not match the table rather than
give it the wrong scales.

## Running NBODY6 on it

Copy the table to `fort.10` in the run directory and in the NBODY6 input file:

- `N` (second line) = the number of stars (`n` in the sidecar); no primordial
  binaries (`NBIN0 = 0`), since the table holds single stars.
- `KZ(22) = 4` (read `fort.10` as it is, the mcluster convention; any
  `KZ(22) > 2` skips NBODY6's rescaling) — the file already is in N-body
  units. With `KZ(22) = 2` NBODY6 rescales to its own N-body units and to the
  virial ratio `Q` of the input file: then set `Q` to the cluster's virial
  ratio, or the velocities are changed.
- `RBAR` = `length_pc` (the virial radius in pc) and `ZMBAR` = `mass_msun / N`
  (the mean mass in Msun), both in the sidecar's `nbody6` entry, so that
  NBODY6's physical output and stellar evolution (`KZ(19)`) use the cluster's
  scales.
- The IMF options (`KZ(20)`, `ALPHAS`, `BODY1`, `BODYN`) do not apply: masses
  come from the table.

PeTar: its `petar.init` tool converts a 7-column table of this layout (mass,
x, y, z, vx, vy, vz) into PeTar's input; tell it the data are in N-body units
and give it the scales from the sidecar (see `petar.init -h` for the flags of
the installed version; not checked against PeTar here).

## Binaries

A cluster with primordial binaries (`ic.pairs`) is written binaries first, as
NBODY6 and PeTar expect of `NBIN0` primordial binaries: rows 2k and 2k + 1 are
the primary and secondary of binary k, then the single stars. The sidecar holds
`n_binaries` (and `nbody6.NBIN0`), and `read_nbody6` rebuilds `pairs` from it.
Values are written with 17 significant digits, the round trip of a float64,
so a 1-day binary in a 10 pc cluster keeps its orbit.

## Soft weights

The format has no membership weights, so `write_nbody6` **refuses** weights that
are not all 1 (`ValueError`), as the Gadget writer does.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import jax
import numpy as np

from .._version import __version__
from ..state import InitialConditions, ParticleState
from ..units import henon_units
from ._paths import atomic_write, check_finite_arrays, check_stars_only, readable_file, writable_path
from .gadget import check_unit_weights

SIDECAR_SUFFIX = ".units.json"
FORMAT_TAG = "progenax-nbody6"
_FMT = "%.17g"


def sidecar_path(path: str | os.PathLike) -> Path:
    """The sidecar file that holds the scales of the table at `path`: beside
    the table itself, where a symbolic link `path` points (as the table is
    written there, `atomic_write`)."""
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def table_checksum(path: str | os.PathLike) -> str:
    """The SHA-256 (hex) of the bytes of the table at `path` (the sidecar's `table_sha256`)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_nbody6(ic, path: str | os.PathLike, *, sidecar: bool = True, recipe: str | None = None) -> Path:
    """Write `ic` as an NBODY6 `fort.10` table in Henon units (see the module docstring).

    **Arguments:**

    - `ic`: an `InitialConditions` (any units; converted with `ic.to_henon()`).
    - `path`: the table to write (overwritten); its directory must exist.
    - `sidecar`: also write the scales to `<path>.units.json` (default True).
    - `recipe`: the build recipe (JSON text, `progenax.io.recipe`), kept in
      the sidecar's `recipe` entry.

    **Returns:** the path of the table.

    **Raises:** `ValueError` if a weight is not 1 or an array holds NaN or inf;
    `FileNotFoundError` if the directory is missing. The pair is written
    atomically (the module docstring's "Writing the pair").
    """

    path = writable_path(path)
    check_stars_only(ic, "nbody6")
    check_finite_arrays(ic)
    check_unit_weights(ic, "nbody6")
    h = ic.to_henon()
    check_finite_arrays(h)  # the conversion too (coincident stars have no virial radius)
    s = h.state
    table = np.column_stack(
        [
            np.asarray(s.masses, dtype=np.float64),
            np.asarray(s.positions, dtype=np.float64),
            np.asarray(s.velocities, dtype=np.float64),
        ]
    )
    n_binaries = 0
    if h.pairs is not None:
        pairs = np.asarray(h.pairs)
        n_binaries = pairs.shape[0]
        single = np.ones(table.shape[0], bool)
        single[pairs.ravel()] = False
        table = table[np.concatenate([pairs.ravel(), np.flatnonzero(single)])]
    targets = (path, sidecar_path(path)) if sidecar else (path,)
    with atomic_write(*targets) as temps:
        with open(temps[0], "w") as f:
            np.savetxt(f, table, fmt=_FMT, delimiter=" ")
        if sidecar:
            meta = _sidecar(h, int(table.shape[0]), table_checksum(temps[0]), n_binaries)
            if recipe is not None:
                meta["recipe"] = json.loads(recipe)
            temps[1].write_text(json.dumps(meta, indent=2) + "\n")
    return path


def _sidecar(h, n: int, checksum: str, n_binaries: int = 0) -> dict:
    """The sidecar's content for the Henon-unit cluster `h` of `n` stars, the
    first `2 n_binaries` of them in pairs."""
    u = h.units
    length = float(np.asarray(u.length_pc))
    mass = float(np.asarray(u.mass_msun))
    return {
        "format": FORMAT_TAG,
        "progenax_version": str(__version__),
        "columns": ["mass", "x", "y", "z", "vx", "vy", "vz"],
        "units": "henon",
        "n": n,
        "model": h.model.name,
        "length_pc": length,
        "mass_msun": mass,
        "velocity_kms": float(np.asarray(u.velocity_kms)),
        "time_myr": float(np.asarray(u.time_myr)),
        "G": 1.0,
        "n_binaries": n_binaries,
        "nbody6": {"N": n, "RBAR": length, "ZMBAR": mass / n, "KZ22": 4, "NBIN0": n_binaries},
        "table_sha256": checksum,
    }


def _sidecar_matches(path: Path, table: np.ndarray, meta: dict) -> bool:
    """Whether the sidecar `meta` describes the table at `path` (sidecars of
    0.1.0 have no checksum: their `n` is compared)."""
    if "n" in meta and int(meta["n"]) != table.shape[0]:
        return False
    return "table_sha256" not in meta or meta["table_sha256"] == table_checksum(path)


def read_nbody6(
    path: str | os.PathLike,
    *,
    length_pc: float | None = None,
    mass_msun: float | None = None,
    model: str | None = None,
):
    """Read an NBODY6 7-column table (Henon units) as an `InitialConditions`.

    **Arguments:**

    - `path`: the table (mass, x, y, z, vx, vy, vz per line; lines starting
      with `#` are skipped).
    - `length_pc`, `mass_msun`: the length and mass units in pc and Msun. Taken
      from the sidecar `<path>.units.json` when it exists and these are None;
      the velocity unit follows from $G = 1$.
    - `model`: the model name (default: the sidecar's, else "nbody6").

    **Returns:** an `InitialConditions` in Henon units, weights 1, no params.

    **Raises:** `ValueError` if the table is not 7 numeric columns, if the
    scales are neither in a sidecar nor given, or if the sidecar is not the
    table's (its `n` or `table_sha256` differs) and the scales are not given;
    `FileNotFoundError` if the table does not exist.
    """

    path = readable_file(path)
    try:
        table = np.loadtxt(path, dtype=np.float64, comments="#", ndmin=2)
    except ValueError as err:
        raise ValueError(f"{str(path)!r} is not a numeric NBODY6 table ({err})") from None
    if table.shape[1] != 7:
        raise ValueError(f"{str(path)!r}: expected 7 columns (mass x y z vx vy vz), found {table.shape[1]}")
    meta: dict = {}
    side = sidecar_path(path)
    if side.is_file():
        meta = json.loads(side.read_text())
        if meta.get("format") != FORMAT_TAG:
            raise ValueError(f"{str(side)!r} is not a progenax nbody6 sidecar (format {meta.get('format')!r})")
        if not _sidecar_matches(path, table, meta):
            if length_pc is None or mass_msun is None:
                raise ValueError(
                    f"{str(side)!r} belongs to another table than {str(path)!r} (its n or checksum differs: "
                    "the table was replaced without it, by an interrupted write or by hand); write the pair "
                    "again, or pass length_pc= and mass_msun= to read the table without it"
                )
            meta = {}  # the scales given, the stale sidecar is not used
    if length_pc is None:
        length_pc = meta.get("length_pc")
    if mass_msun is None:
        mass_msun = meta.get("mass_msun")
    if length_pc is None or mass_msun is None:
        raise ValueError(
            f"the physical scales of {str(path)!r} are unknown: no sidecar {str(side)!r}; "
            "pass length_pc= and mass_msun= (the virial radius in pc and the total mass in Msun)"
        )
    units = henon_units(float(mass_msun), float(length_pc))
    if "velocity_kms" in meta and meta.get("length_pc") == length_pc and meta.get("mass_msun") == mass_msun:
        # Keep the velocity unit exactly as written (sqrt may differ in the last bit).
        units = type(units)("henon", units.length_pc, units.mass_msun, jax.device_put(float(meta["velocity_kms"])))
    if model is None:
        model = str(meta.get("model", "nbody6"))
    state = ParticleState(
        positions=jax.device_put(table[:, 1:4]),
        velocities=jax.device_put(table[:, 4:7]),
        masses=jax.device_put(table[:, 0]),
    )
    n_binaries = int(meta.get("n_binaries", 0))
    pairs = np.arange(2 * n_binaries).reshape(-1, 2) if n_binaries else None
    weights = jax.device_put(np.ones(table.shape[0], dtype=state.masses.dtype))
    return InitialConditions.from_record(state, weights, model, {}, units, pairs)
