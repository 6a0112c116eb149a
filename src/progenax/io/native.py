r"""progenax's own file format for `InitialConditions`: HDF5 or numpy `.npz`.

`write(ic, path)` and `read(path)` round-trip an `InitialConditions` bit for bit:
every array keeps its dtype (float32 stays float32, float64 stays float64) and
its exact values. Reading float64 data needs `jax_enable_x64`, as any float64
JAX array does; without it JAX narrows the arrays to float32 (with a warning).

The format is chosen from the extension: `.h5` / `.hdf5` (HDF5, via h5py) or
`.npz` (numpy archive, no pickles). `write(ic, path, format=...)` and
`read(path, format=...)` also route to the exchange formats of
`progenax.io.gadget` ("gadget"/"swift"), `progenax.io.nbody` ("nbody6"/"petar"),
`progenax.io.csv` ("csv") and `progenax.io.amuse` ("amuse", when AMUSE is
installed); see `FORMATS`.

The same functions write and read SPH gas (`progenax.gravoturb.GasCloud`):
its internal energies and smoothing lengths are two more datasets (below), and
a file that holds them reads back as a `GasCloud` (whose `field`, the turbulent
grid it was drawn from, is not stored: it reads back as None).

## HDF5 schema (`schema = "progenax-ic"`, `schema_version = 1`)

Datasets at the root, one row per particle, in the file's unit system:

| name         | shape  | meaning                                           |
|--------------|--------|---------------------------------------------------|
| `positions`  | (n, 3) | x, y, z (length unit)                             |
| `velocities` | (n, 3) | vx, vy, vz (velocity unit)                        |
| `masses`     | (n,)   | masses (mass unit)                                |
| `weights`    | (n,)   | soft membership in [0, 1]; weight each star by it |

Gas only (a `GasCloud`, always in physical units; both or neither):

| name               | shape | meaning                                         |
|--------------------|-------|-------------------------------------------------|
| `internal_energy`  | (n,)  | specific internal energy u, (km/s)^2            |
| `smoothing_length` | (n,)  | SPH smoothing length h, pc                      |

A reader of schema version 1 that predates these datasets ignores them and
reads the gas particles as stars.

Primordial binaries only (`InitialConditions.pairs`; absent without binaries):

| name    | shape       | meaning                                            |
|---------|-------------|----------------------------------------------------|
| `pairs` | (n_pairs, 2) | int64 row indices (primary, secondary) of binaries |

Root attributes:

| name               | meaning                                                    |
|--------------------|------------------------------------------------------------|
| `schema`           | the string `"progenax-ic"`                                 |
| `schema_version`   | integer, 1                                                 |
| `progenax_version` | version of progenax that wrote the file                    |
| `model`            | name of the model, e.g. `"plummer"` (`ic.model.name`)      |
| `n`                | number of particles                                        |
| `units`            | unit system name, `"physical"` or `"henon"`                |
| `length_pc`        | one length unit in pc (1 in physical units)                |
| `mass_msun`        | one mass unit in Msun                                      |
| `velocity_kms`     | one velocity unit in km/s                                  |
| `G`                | gravitational constant in the file's units (informative;   |
|                    | it follows from the three above)                           |

Group `summary` (optional; written by the command line): the figures that
`progenax info` prints, measured when the file was written
(`progenax.io.summary.summary_figures`), one attribute each: `n_eff`, `weighted`,
`mass`, `r_h`, `Q` (and with binaries `hard`, `median_log_binding`,
`systems_Q`), and `digest`, the SHA-256 of the arrays, units and method they
were measured from. `progenax info` uses them only when the digest matches the
file's contents, so a file edited by another program is measured again.

Group `parameters`: the builder's parameters (`ic.params`). A scalar is an
attribute of the group named after the parameter; a parameter that is an array
of any other shape is a dataset of the group. Dtypes are kept. A parameter whose
value is None (an optional one left unset, such as `r_t`) is not stored; a string
is stored as a string attribute.

Physical units are pc, Msun and km/s with $G = 4.300917270\times10^{-3}$
pc Msun$^{-1}$ (km/s)$^2$. To turn file values into physical ones multiply by
`length_pc`, `velocity_kms` and `mass_msun`.

## `.npz` layout

The same content as flat keys: `positions`, `velocities`, `masses`, `weights`
(and for gas `internal_energy`, `smoothing_length`);
the root attributes as 0-d arrays under the same names (strings as unicode
arrays); each parameter under `parameters/<name>`, each summary figure under
`summary/<name>`.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import h5py
import jax
import numpy as np

from .._version import __version__
from ..gravoturb.cloud import GasCloud
from ..models import RecordedModel
from ..state import InitialConditions, ParticleState
from ..units import UNIT_SYSTEMS, Units
from ._paths import atomic_write, check_finite_arrays, readable_file, writable_path
from .amuse import read_amuse, write_amuse
from .csv import read_csv, write_csv
from .gadget import read_gadget, write_gadget
from .nbody import read_nbody6, write_nbody6

SCHEMA = "progenax-ic"
SCHEMA_VERSION = 1
HDF5_EXTENSIONS = (".h5", ".hdf5")
NPZ_EXTENSIONS = (".npz",)
EXTENSIONS = HDF5_EXTENSIONS + NPZ_EXTENSIONS

_ARRAYS = ("positions", "velocities", "masses", "weights")
_GAS_ARRAYS = ("internal_energy", "smoothing_length")
_PAIRS = "pairs"
_UNIT_SCALES = ("length_pc", "mass_msun", "velocity_kms")
_PARAM_PREFIX = "parameters/"
_SUMMARY = "summary"


def file_format(path: str | os.PathLike) -> str:
    """The format of `path` from its extension: "hdf5" or "npz".

    Raises `ValueError` naming the allowed extensions for any other extension.
    """
    suffix = Path(path).suffix.lower()
    if suffix in HDF5_EXTENSIONS:
        return "hdf5"
    if suffix in NPZ_EXTENSIONS:
        return "npz"
    allowed = ", ".join(EXTENSIONS)
    raise ValueError(f"cannot tell the file format of {str(path)!r}: the extension must be one of {allowed}")


# --------------------------------------------------------------------------- write


def _as_numpy(x: Any) -> Any:
    """A JAX/numpy array or Python scalar as a numpy array (dtype kept); strings as is."""
    if isinstance(x, str):
        return x
    return np.asarray(x)


def _is_gas(ic) -> bool:
    """True for SPH gas (a `GasCloud`: `internal_energy` and `smoothing_length`)."""
    return all(hasattr(ic, name) for name in _GAS_ARRAYS)


def _content(ic) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
    """The arrays, root attributes and parameters of `ic`, as numpy values."""

    s = ic.state
    arrays = {
        "positions": np.asarray(s.positions),
        "velocities": np.asarray(s.velocities),
        "masses": np.asarray(s.masses),
        "weights": np.asarray(ic.weights),
    }
    if _is_gas(ic):
        n = arrays["masses"].shape[0]
        for name in _GAS_ARRAYS:
            arrays[name] = np.asarray(getattr(ic, name))
            if arrays[name].shape != (n,):
                raise ValueError(f"gas {name} must have shape ({n},), got {arrays[name].shape}")
    if getattr(ic, "pairs", None) is not None:
        arrays[_PAIRS] = _checked_pairs(np.asarray(ic.pairs), arrays["masses"].shape[0], "pairs")
    u = ic.units
    attrs: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": np.int64(SCHEMA_VERSION),
        "progenax_version": str(__version__),
        "model": ic.model.name,
        "n": np.int64(arrays["masses"].shape[0]),
        "units": str(u.name),
        "length_pc": np.asarray(u.length_pc)[()],
        "mass_msun": np.asarray(u.mass_msun)[()],
        "velocity_kms": np.asarray(u.velocity_kms)[()],
        "G": np.float64(np.asarray(u.G)),
    }
    params: dict[str, Any] = {}
    for name, value in dict(ic.params).items():
        if value is None:
            continue
        value = _as_numpy(value)
        # What both formats store and read back as written: `np.savez` pickled
        # an object array (a dict, a list with None), which `read` then refused,
        # and read a list of strings back as one string.
        if not isinstance(value, str) and value.dtype.kind not in "biufc":
            raise ValueError(
                f"parameter {name!r} must be a string or numbers (a scalar or an array) to be written, "
                f"got {type(dict(ic.params)[name]).__name__} of dtype {value.dtype}"
            )
        params[str(name)] = value
    return arrays, attrs, params


FORMATS = ("hdf5", "npz", "gadget", "swift", "nbody6", "petar", "csv", "amuse")
"""Values of `format=` for `write` / `read` ("swift" is "gadget", "petar" is "nbody6")."""


def _check_format(format: str | None, path: Path) -> str:
    """The format to use: `format` validated, or the native one from the extension."""
    if format is None:
        return file_format(path)
    if not isinstance(format, str) or format.lower() not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} (or None: by extension), got {format!r}")
    return {"swift": "gadget", "petar": "nbody6"}.get(format.lower(), format.lower())


def write(ic, path: str | os.PathLike, format: str | None = None, *, recipe=None, summary=None, **options) -> Path:
    """Write `ic` (an `InitialConditions`) to `path`.

    With `format=None` (default) the extension picks progenax's own format:
    `.h5`/`.hdf5` (HDF5) or `.npz`; see the module docstring for the schema.
    An explicit `format` is one of `FORMATS`:

    - "hdf5", "npz": progenax's own schema, whatever the extension;
    - "gadget" (alias "swift"): Gadget/SWIFT HDF5 snapshot in pc, km/s, Msun,
      `progenax.io.gadget.write_gadget` (options `particle_type=`, `box_size=`);
    - "nbody6" (alias "petar"): NBODY6 `fort.10` table in Henon units plus a
      `<path>.units.json` sidecar, `progenax.io.nbody.write_nbody6` (option
      `sidecar=`);
    - "csv": CSV table in pc, km/s, Msun with weights, `progenax.io.csv.write_csv`;
    - "amuse": AMUSE particle set in AMUSE's HDF5 file, in MSun/parsec/kms (or
      AMUSE's N-body units for a Henon cluster), `progenax.io.amuse.write_amuse`
      (option `units=`); needs AMUSE installed (`ImportError` otherwise).

    `recipe` (a mapping, `progenax.io.recipe`): how `ic` was built, stored in
    the file as JSON (the `recipe` attribute of our own schema and of a Gadget
    file's `progenax` group, the NBODY6 sidecar's `recipe` entry, a first
    comment line of a CSV; not in AMUSE files); `progenax.io.recipe.recipe_of`
    reads it back.

    `summary` (a dict from `progenax.io.summary.summary_figures(ic)`, or None):
    the figures `progenax info` prints, stored with our own schema ("hdf5",
    "npz"; the exchange formats do not keep them) so that reading the summary
    of a large clumpy cluster back skips measuring its potential energy again;
    `stored_summary` reads them back.

    `ic` may also be SPH gas (a `GasCloud`): the own schema keeps its internal
    energies and smoothing lengths, as do "gadget" (`PartType0`) and "amuse".

    An existing file is overwritten, atomically: every format is written to a
    temporary file beside it and renamed over it once complete (the NBODY6
    sidecar too), so a failed or killed write leaves the old file
    (`progenax.io._paths.atomic_write`). The parent directory must exist.
    Particles with NaN or inf (positions, velocities, masses, weights, gas
    arrays) are refused with a `ValueError` naming the array. Returns the path.
    """
    path = Path(path)
    fmt = _check_format(format, path)
    text = None if recipe is None else json.dumps(dict(recipe))
    if fmt == "amuse":
        return write_amuse(ic, path, **options)
    if text is not None:
        options["recipe"] = text
    if fmt == "gadget":
        return write_gadget(ic, path, **options)
    if fmt == "nbody6":
        return write_nbody6(ic, path, **options)
    options.pop("recipe", None)
    if options:
        raise TypeError(f"the {fmt} format takes no options, got {sorted(options)}")
    if fmt == "csv":
        return write_csv(ic, path, recipe=text)
    writable_path(path)
    check_finite_arrays(ic)
    arrays, attrs, params = _content(ic)
    if text is not None:
        attrs["recipe"] = text
    figures = {} if summary is None else _summary_values(summary)
    with atomic_write(path) as (temp,):
        if fmt == "hdf5":
            _write_hdf5(temp, arrays, attrs, params, figures)
        else:
            _write_npz(temp, arrays, attrs, params, figures)
    return path


def _summary_values(summary) -> dict[str, Any]:
    """The summary figures as storable values (str, bool or float), or a `ValueError`."""
    values = {}
    for name, value in dict(summary).items():
        if isinstance(value, (str, bool, np.bool_)):
            values[str(name)] = value if isinstance(value, str) else bool(value)
        elif np.ndim(value) == 0:
            values[str(name)] = float(value)
        else:
            raise ValueError(f"summary figures are scalars or strings, got {name!r} of shape {np.shape(value)}")
    return values


def _write_hdf5(path: Path, arrays, attrs, params, figures) -> None:

    with h5py.File(path, "w") as f:
        for name, value in attrs.items():
            f.attrs[name] = value
        for name, value in arrays.items():
            f.create_dataset(name, data=value)
        group = f.create_group("parameters", track_order=True)
        for name, value in params.items():
            if isinstance(value, str) or value.ndim == 0:
                group.attrs[name] = value if isinstance(value, str) else value[()]
            else:
                group.create_dataset(name, data=value)
        if figures:
            f.create_group(_SUMMARY, track_order=True).attrs.update(figures)


def _write_npz(path: Path, arrays, attrs, params, figures) -> None:
    content = dict(arrays)
    for name, value in attrs.items():
        content[name] = np.asarray(value)
    for name, value in params.items():
        content[_PARAM_PREFIX + name] = np.asarray(value)
    for name, value in figures.items():
        content[f"{_SUMMARY}/{name}"] = np.asarray(value)
    # Write through a file object so numpy never appends its own ".npz".
    with open(path, "wb") as f:
        np.savez(f, **content)


# ---------------------------------------------------------------------------- read


def read(path: str | os.PathLike, format: str | None = None, **options):
    """Read an `InitialConditions` written by `write`.

    `format` as for `write`: None (default) picks progenax's own format from the
    extension; "gadget"/"swift", "nbody6"/"petar", "csv" and "amuse" call
    `read_gadget`, `read_nbody6`, `read_csv` and `read_amuse` (with `options`).

    A file of the own schema that holds `internal_energy` and `smoothing_length`
    reads back as a `progenax.gravoturb.GasCloud` (its `field` is None).

    **Raises:**

    - `ValueError` if the extension is not one of `.h5`, `.hdf5`, `.npz` (with
      `format=None`), `format` is not one of `FORMATS`, or the file is not a
      progenax initial-conditions file (another HDF5 schema, a newer schema
      version, missing datasets, not HDF5 at all).
    - `FileNotFoundError` (naming the path) if the file does not exist.
    """
    path = Path(path)
    fmt = _check_format(format, path)
    if fmt == "gadget":
        return read_gadget(path, **options)
    if fmt == "nbody6":
        return read_nbody6(path, **options)
    if fmt == "amuse":
        return read_amuse(path, **options)
    if options:
        raise TypeError(f"the {fmt} format takes no options, got {sorted(options)}")
    if fmt == "csv":
        return read_csv(path)
    readable_file(path)
    if fmt == "hdf5":
        arrays, attrs, params = _read_hdf5(path)
    else:
        arrays, attrs, params = _read_npz(path)
    return _build(path, arrays, attrs, params)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        value = value[()]
        if isinstance(value, bytes):
            return value.decode()
    return str(value)


def _check_schema(path: Path, attrs: dict[str, Any], arrays: dict[str, Any]) -> None:
    schema = attrs.get("schema")
    if schema is None or _text(schema) != SCHEMA:
        found = "no 'schema' attribute" if schema is None else f"schema {_text(schema)!r}"
        raise ValueError(
            f"{str(path)!r} is not a progenax initial-conditions file (expected schema {SCHEMA!r}, found {found})"
        )
    version = int(np.asarray(attrs.get("schema_version", -1)))
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"{str(path)!r} has {SCHEMA} schema_version {version}; this progenax reads version {SCHEMA_VERSION}"
        )
    missing = [name for name in _ARRAYS if name not in arrays]
    missing += [name for name in ("model", "units", *_UNIT_SCALES) if name not in attrs]
    if missing:
        raise ValueError(f"{str(path)!r} is missing {', '.join(missing)} required by the {SCHEMA} schema")


def _checked_pairs(pairs: np.ndarray, n: int, where: str) -> np.ndarray:
    """`pairs` as int64 (n_pairs, 2) row indices in [0, n), or a `ValueError` naming `where`."""
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
        raise ValueError(f"{where} must be an integer array of shape (n_pairs, 2), got {pairs.dtype} {pairs.shape}")
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"{where} must index the {n} particles, got indices in [{pairs.min()}, {pairs.max()}]")
    return pairs.astype(np.int64)


def _read_hdf5(path: Path):

    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ValueError(f"{str(path)!r} is not a readable HDF5 file ({err})") from None
    with f:
        attrs = {name: f.attrs[name] for name in f.attrs}
        arrays = {}
        for name in (*_ARRAYS, *_GAS_ARRAYS, _PAIRS):
            if isinstance(f.get(name), h5py.Dataset):
                arrays[name] = f[name][()]
        params: dict[str, Any] = {}
        if "schema" in attrs and isinstance(f.get("parameters"), h5py.Group):
            group = f["parameters"]
            for name in group.attrs:
                params[name] = group.attrs[name]
            for name, item in group.items():
                if isinstance(item, h5py.Dataset):
                    params[name] = item[()]
    _check_schema(path, attrs, arrays)
    return arrays, attrs, params


def _read_npz(path: Path):

    with open(path, "rb") as f:
        if f.read(8) == b"\x89HDF\r\n\x1a\n":  # numpy would say "pickled data"
            raise ValueError(f"{str(path)!r} is an HDF5 file, not .npz: name it .h5 or pass format='hdf5'")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise ValueError(f"{str(path)!r} is not a readable .npz file ({err})") from None
    with data:
        arrays, attrs, params = {}, {}, {}
        for key in data.files:
            value = data[key]
            if key in _ARRAYS or key in _GAS_ARRAYS or key == _PAIRS:
                arrays[key] = value
            elif key.startswith(_PARAM_PREFIX):
                params[key[len(_PARAM_PREFIX) :]] = value
            elif not key.startswith(_SUMMARY + "/"):
                attrs[key] = value
    _check_schema(path, attrs, arrays)
    return arrays, attrs, params


def stored_summary(path: str | os.PathLike, format: str | None = None) -> dict[str, Any] | None:
    """The summary figures stored in a file of our own schema by
    `write(..., summary=)`, or None (none stored, or an exchange format).

    They are what was measured when the file was written; pass them to
    `progenax.io.format_summary(ic, figures)`, which uses them only if their
    `digest` matches the cluster read from the same file.
    """
    path = Path(path)
    fmt = _check_format(format, path)
    if fmt == "hdf5":
        with h5py.File(path, "r") as f:
            group = f.get(_SUMMARY)
            stored = dict(group.attrs) if isinstance(group, h5py.Group) else {}
    elif fmt == "npz":
        prefix = _SUMMARY + "/"
        with np.load(path, allow_pickle=False) as data:
            stored = {key[len(prefix) :]: data[key][()] for key in data.files if key.startswith(prefix)}
    else:
        return None
    return {name: _figure(value) for name, value in stored.items()} or None


def _figure(value: Any) -> Any:
    """A stored summary figure as a Python str, bool or float."""
    value = np.asarray(value)[()] if isinstance(value, np.ndarray) else value
    if isinstance(value, (str, bytes, np.str_)):
        return _text(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return float(value)


def _param_value(value: Any) -> Any:

    if isinstance(value, (str, bytes)):
        return _text(value)
    value = np.asarray(value)
    if value.dtype.kind in "USO":
        return _text(value)
    return jax.device_put(value)


def _build(path: Path, arrays, attrs, params):

    units_name = _text(attrs["units"])
    if units_name not in UNIT_SYSTEMS:
        raise ValueError(f"{str(path)!r}: units must be one of {UNIT_SYSTEMS}, found {units_name!r}")
    n = arrays["masses"].shape
    if (
        len(n) != 1
        or arrays["positions"].shape != (n[0], 3)
        or arrays["velocities"].shape != (n[0], 3)
        or arrays["weights"].shape != n
    ):
        shapes = {name: arrays[name].shape for name in _ARRAYS}
        raise ValueError(f"{str(path)!r}: inconsistent array shapes {shapes}")
    # jax.device_put, not jnp.asarray: in JAX 0.10 the latter compiles a one-op
    # program for each new shape and dtype it is given (7 of them, 0.15 s of `info`).
    units = Units(units_name, *(jax.device_put(np.asarray(attrs[name])) for name in _UNIT_SCALES))
    state = ParticleState(
        positions=jax.device_put(arrays["positions"]),
        velocities=jax.device_put(arrays["velocities"]),
        masses=jax.device_put(arrays["masses"]),
    )
    weights = jax.device_put(arrays["weights"])
    model = _text(attrs["model"])
    params = {name: _param_value(value) for name, value in params.items()}
    gas = [name for name in _GAS_ARRAYS if name in arrays]
    if not gas:
        pairs = arrays.get(_PAIRS)
        if pairs is not None:
            pairs = _checked_pairs(pairs, n[0], f"{str(path)!r}: pairs")
        return InitialConditions.from_record(state, weights, model, params, units, pairs)
    if len(gas) != len(_GAS_ARRAYS) or any(arrays[name].shape != n for name in gas):
        shapes = {name: arrays[name].shape for name in gas}
        raise ValueError(f"{str(path)!r}: gas needs both {' and '.join(_GAS_ARRAYS)} of shape {n}, found {shapes}")

    return GasCloud(
        state,
        weights,
        jax.device_put(arrays["internal_energy"]),
        jax.device_put(arrays["smoothing_length"]),
        RecordedModel(model, dict(params)),
        params,
        units,
    )
