"""What every writer shares: the path check, atomic replacement, finite arrays.

**Atomic writes.** A writer never opens its target: `atomic_write(path, ...)`
gives it temporary files in the target's own directory (hidden names,
`.<name>.<random>.tmp`), and only once everything is written, flushed and
synced renames each over its target with `os.replace`, which is atomic on a
POSIX file system. A write that fails part-way (a full disk, `ulimit -f`, an
exception in the writer) removes its temporaries and leaves the old files as
they were; a process killed while writing leaves the old files intact too (and
at most its hidden temporaries, which nothing reads).

Several files (a table and its sidecar) are all written before the first is
renamed, then renamed in the order given: the main file first, its sidecar
last. Two renames are not one atomic step: a process killed between them leaves
the new table beside the old sidecar, which is why the NBODY6 sidecar records a
checksum of its table and the reader refuses a pair that does not match.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..validation import check_finite


def writable_path(path: str | os.PathLike) -> Path:
    """`path` as a Path, or FileNotFoundError if its directory does not exist."""
    path = Path(path)
    if not path.parent.exists():
        raise FileNotFoundError(f"directory {str(path.parent)!r} does not exist (writing {str(path)!r})")
    return path


def readable_file(path: str | os.PathLike) -> Path:
    """`path` as a Path, or FileNotFoundError if there is no file there (a
    directory is named as one, not as missing)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a directory, not a file")
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    return path


def _file_mode(target: Path) -> int:
    """The permission bits the target would get from a plain `open(target, "w")`:
    its own when it exists, else 0o666 less the umask (mkstemp's are 0o600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _sync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_write(*targets: str | os.PathLike) -> Iterator[tuple[Path, ...]]:
    """Temporary paths to write `targets` through, renamed over them on success.

    ```python
    with atomic_write(table, sidecar) as (tmp_table, tmp_sidecar):
        ...  # write both temporaries
    # here both are in place, the table renamed first
    ```

    A target that is a symbolic link is replaced where it points (as writing
    through the link would). On any exception (or interrupt) the temporaries
    are removed and the targets are untouched. See the module docstring.
    """
    finals = [Path(os.path.realpath(t)) if Path(t).is_symlink() else Path(t) for t in targets]
    temps: list[Path] = []
    try:
        for final in finals:
            writable_path(final)
            if final.is_dir():  # found before any rename: a pair is replaced whole or not at all
                raise IsADirectoryError(f"cannot write {str(final)!r}: it is a directory")
            fd, name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
            os.close(fd)
            temps.append(Path(name))
            os.chmod(name, _file_mode(final))
        yield tuple(temps)
        for temp in temps:
            _sync(temp)
    except BaseException:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise
    try:
        for temp, final in zip(temps, finals):
            os.replace(temp, final)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)  # only those a failed rename left behind
    directory = os.open(finals[0].parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


GAS_FORMATS = ("hdf5", "npz", "gadget", "swift", "amuse")
"""The formats that hold SPH gas (internal energies and smoothing lengths)."""


def check_finite_arrays(ic) -> None:
    """Refuse to write particles a reader would refuse or misread
    (`ValueError` naming the array): NaN or inf, shapes that disagree (each
    array one row per particle, positions and velocities (n, 3)), negative
    masses or weights.

    Checks positions, velocities, masses, weights and, for SPH gas, the
    internal energies and smoothing lengths, and the unit scales: a file that
    holds a non-finite value would pass the damage on to whatever reads it,
    and one with mismatched rows was written whole and then refused by `read`.
    """
    s = ic.state
    arrays = {"positions": s.positions, "velocities": s.velocities, "masses": s.masses, "weights": ic.weights}
    for name in ("internal_energy", "smoothing_length"):
        if getattr(ic, name, None) is not None:
            arrays[name] = getattr(ic, name)
    if np.ndim(s.masses) != 1:
        raise ValueError(f"masses must have shape (n,), got {np.shape(s.masses)}")
    n = np.shape(s.masses)[0]
    for name, value in arrays.items():
        want = (n, 3) if name in ("positions", "velocities") else (n,)
        if np.shape(value) != want:
            raise ValueError(f"{name} must have shape {want} (a row for each of the {n} masses), got {np.shape(value)}")
    for name in ("length_pc", "mass_msun", "velocity_kms"):
        arrays[f"the unit {name}"] = getattr(ic.units, name)
    for name, value in arrays.items():
        check_finite(name, value)
    for name in ("masses", "weights"):
        if np.any(np.asarray(arrays[name]) < 0):
            raise ValueError(f"{name} must be >= 0, got a smallest value of {float(np.min(arrays[name]))}")


def check_stars_only(ic, fmt: str) -> None:
    """Refuse SPH gas for a format that holds stars only (`GAS_FORMATS` hold gas)."""
    if all(getattr(ic, name, None) is not None for name in ("internal_energy", "smoothing_length")):
        raise ValueError(
            f"the {fmt} format cannot hold SPH gas (internal energy, smoothing length); "
            f"gas is written as {', '.join(GAS_FORMATS)}"
        )
