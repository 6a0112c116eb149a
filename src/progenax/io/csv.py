"""CSV tables of `InitialConditions` in physical units.

`write_csv(ic, path)` writes one header line and one line per star:

    x_pc,y_pc,z_pc,vx_kms,vy_kms,vz_kms,mass_msun,weight

positions in pc, velocities in km/s, masses in Msun (an `InitialConditions` in
Henon units is converted with `ic.to_physical()` first), and the soft
membership weight in [0, 1] as it is (masses are *not* multiplied by it).
Numbers are written with `'%.17g'`, so float64 values read back bit for bit.
Comma-separated, no index column, no quoting, newline line endings: pandas
(`pd.read_csv`), astropy (`Table.read(path, format="ascii.csv")`), TOPCAT and
spreadsheets read it as is. A table with a recipe (the command line's) has
one comment line first, `# progenax <version> recipe: {...}`: skip it with
`pd.read_csv(path, comment="#")` or `np.loadtxt(path, delimiter=",",
skiprows=2)` (`np.genfromtxt(path, delimiter=",", names=True,
skip_header=1)` keeps the column names).

`read_csv(path)` reads such a table back as an `InitialConditions` in physical
units (model "csv", no params); the columns may come in any order, but all
eight must be there.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np

from .._version import __version__
from ..state import InitialConditions, ParticleState
from ..units import physical_units
from ._paths import atomic_write, check_finite_arrays, check_stars_only, readable_file, writable_path

COLUMNS = ("x_pc", "y_pc", "z_pc", "vx_kms", "vy_kms", "vz_kms", "mass_msun", "weight")
HEADER = ",".join(COLUMNS)
RECIPE_PREFIX = "# progenax "
_FMT = "%.17g"


def write_csv(ic, path: str | os.PathLike, *, recipe: str | None = None) -> Path:
    """Write `ic` as a CSV table in pc, km/s, Msun with weights (module docstring).

    `recipe` (the build recipe as JSON text, `progenax.io.recipe`) goes on
    a first comment line, `# progenax <version> recipe: {...}`, which
    `read_csv` skips. Returns the path; raises `FileNotFoundError` if its directory is missing,
    `ValueError` if an array holds NaN or inf. The write is atomic
    (`progenax.io._paths.atomic_write`): a failed one leaves the old file.
    """
    path = writable_path(path)
    check_stars_only(ic, "csv")
    check_finite_arrays(ic)
    phys = ic.to_physical()
    s = phys.state
    table = np.column_stack(
        [
            np.asarray(s.positions, dtype=np.float64),
            np.asarray(s.velocities, dtype=np.float64),
            np.asarray(s.masses, dtype=np.float64),
            np.asarray(phys.weights, dtype=np.float64),
        ]
    )
    with atomic_write(path) as (temp,), open(temp, "w", newline="\n") as f:
        if recipe is not None:
            f.write(f"{RECIPE_PREFIX}{__version__} recipe: {recipe}\n")
        np.savetxt(f, table, fmt=_FMT, delimiter=",", header=HEADER, comments="")
    return path


def read_csv(path: str | os.PathLike, *, model: str = "csv"):
    """Read a CSV table written by `write_csv` as an `InitialConditions` (physical units).

    **Raises:** `ValueError` if a column of `COLUMNS` is missing or a value is
    not a number; `FileNotFoundError` if the file does not exist.
    """

    path = readable_file(path)
    try:
        return _read_table(path, model)
    except UnicodeDecodeError:
        raise ValueError(f"{str(path)!r} is not a text CSV table (it holds binary data)") from None


def _read_table(path: Path, model: str):
    with open(path) as f:
        line = f.readline()
        while line.startswith("#"):  # the recipe line of `write_csv`
            line = f.readline()
        header = [name.strip() for name in line.strip().split(",")]
        missing = [name for name in COLUMNS if name not in header]
        if missing:
            raise ValueError(f"{str(path)!r}: the header lacks the column(s) {', '.join(missing)} (expected {HEADER})")
        try:
            table = np.loadtxt(f, dtype=np.float64, delimiter=",", ndmin=2)
        except ValueError as err:
            raise ValueError(f"{str(path)!r} is not a numeric CSV table ({err})") from None
    if table.shape[1] != len(header):
        raise ValueError(f"{str(path)!r}: {table.shape[1]} columns of values for {len(header)} header names")
    col = {name: table[:, header.index(name)] for name in COLUMNS}
    state = ParticleState(
        positions=jax.device_put(np.column_stack([col["x_pc"], col["y_pc"], col["z_pc"]])),
        velocities=jax.device_put(np.column_stack([col["vx_kms"], col["vy_kms"], col["vz_kms"]])),
        masses=jax.device_put(col["mass_msun"]),
    )
    return InitialConditions.from_record(state, jax.device_put(col["weight"]), model, {}, physical_units())
