"""Writes are atomic: a failed, limited or killed write leaves the old file.

Every writer goes through `progenax.io._paths.atomic_write` (a temporary file
beside the target, renamed over it). Checked here for every format: a writer
that raises part-way (in-process), a write past `ulimit -f` (RLIMIT_FSIZE, in a
subprocess), and a subprocess killed with SIGKILL at several moments of its
writes; afterwards each target is the old file or a complete new one.
"""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import h5py
import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

import progenax.io as pio  # noqa: E402
from progenax.io import _paths  # noqa: E402
from progenax.io.nbody import sidecar_path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _write_worker import N_OLD, TARGETS, version  # noqa: E402

WORKER = Path(__file__).with_name("_write_worker.py")
N_BIG = 20_000  # 3.4 MB of text, 1.3 MB of HDF5: each write takes a few hundredths of a second or more


def _temps(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


def _read(directory: Path, fmt: str):
    """The cluster at the format's target; an NBODY6 table left beside a stale
    sidecar (a kill between the two renames) is refused, then read on its own."""
    path = directory / TARGETS[fmt]
    try:
        return pio.read(path, format=fmt)
    except ValueError as err:
        if fmt != "nbody6" or "belongs to another table" not in str(err):
            raise
        return pio.read(path, format=fmt, length_pc=1.0, mass_msun=1.0)


def _which_version(ic, fmt: str) -> int:
    """0 (the old file), 1 or 2 (a complete new one); fails on anything else."""
    n = ic.n
    assert n in (N_OLD, N_BIG), f"{fmt}: {n} stars, neither the old file nor a complete new one"
    candidates = (0, 1, 2)
    for k in candidates:  # version 0 is the old file; 1 and 2 the new ones
        expected = version(k, n)
        expected = expected.to_physical() if ic.units.name == "physical" else expected
        if np.allclose(np.asarray(ic.state.positions), np.asarray(expected.state.positions), rtol=1e-12, atol=0):
            np.testing.assert_allclose(ic.state.velocities, expected.state.velocities, rtol=1e-12)
            np.testing.assert_allclose(ic.state.masses, expected.state.masses, rtol=1e-12)
            return k
    raise AssertionError(f"{fmt}: {n} stars whose positions are no version's")


# ---------------------------------------------------------------- in-process failures


def _fail_after_some_bytes(monkeypatch):
    """Make the writer of `fmt` raise OSError after it has written part of its file."""

    def savetxt(f, table, **kw):
        f.write("1 2 3\n" * 10)
        raise OSError(28, "No space left on device")

    def savez(f, **content):
        f.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    calls = []
    create = h5py.Group.create_dataset

    def create_dataset(self, name, *args, **kw):  # HDF5: the second dataset fails
        calls.append(name)
        if len(calls) > 1:
            raise RuntimeError("unable to extend file properly, errno = 27, error message = 'File too large'")
        return create(self, name, *args, **kw)

    monkeypatch.setattr(np, "savetxt", savetxt)
    monkeypatch.setattr(np, "savez", savez)  # the native .npz and the fake AMUSE file
    monkeypatch.setattr(h5py.Group, "create_dataset", create_dataset)


@pytest.mark.parametrize("fmt", list(TARGETS))
def test_a_write_failing_part_way_leaves_the_old_file(tmp_path, fake_amuse, fmt):
    pio.write(version(0, N_OLD), tmp_path / TARGETS[fmt], format=fmt)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.MonkeyPatch.context() as monkeypatch:
        _fail_after_some_bytes(monkeypatch)
        with pytest.raises((OSError, RuntimeError)):
            pio.write(version(1, 500), tmp_path / TARGETS[fmt], format=fmt)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # sidecar included, no temporaries
    assert _which_version(_read(tmp_path, fmt), fmt) == 0


def test_atomic_write_keeps_permissions_and_writes_through_links(tmp_path):
    target = tmp_path / "c.h5"
    pio.write(version(0, N_OLD), target)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # as open(path, "w"), not mkstemp's 0o600
    target.chmod(0o640)
    pio.write(version(1, N_OLD), target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    link = tmp_path / "link.h5"
    link.symlink_to(target)
    pio.write(version(2, N_OLD), link)
    assert link.is_symlink() and _which_version(pio.read(target), "hdf5") == 2
    assert _temps(tmp_path) == []


def test_atomic_write_renames_every_file_or_none(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("old a")
    with pytest.raises(KeyError), _paths.atomic_write(a, b) as (ta, tb):
        ta.write_text("new a")
        raise KeyError("interrupted")
    assert a.read_text() == "old a" and not b.exists() and _temps(tmp_path) == []
    with _paths.atomic_write(a, b) as (ta, tb):
        ta.write_text("new a")
        tb.write_text("new b")
    assert (a.read_text(), b.read_text()) == ("new a", "new b") and _temps(tmp_path) == []


def test_a_pair_whose_second_target_is_a_directory_keeps_the_first(tmp_path):
    # The table was renamed over the old one before the sidecar's rename failed
    # on a directory, and the command line said the old file was left as it was.
    table = tmp_path / "fort.10"
    pio.write(version(0, N_OLD), table, format="nbody6")
    before = table.read_bytes()
    sidecar_path(table).unlink()
    sidecar_path(table).mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        pio.write(version(1, N_OLD), table, format="nbody6")
    assert table.read_bytes() == before and _temps(tmp_path) == []


def test_a_linked_nbody6_table_has_its_sidecar_beside_the_table(tmp_path):
    # The sidecar went beside the link, so the table read by its own path had none.
    (tmp_path / "real").mkdir()
    link = tmp_path / "fort.10"
    link.symlink_to(tmp_path / "real" / "fort.10")
    pio.write(version(1, N_OLD), link, format="nbody6")
    assert (tmp_path / "real" / "fort.10.units.json").is_file() and not (tmp_path / "fort.10.units.json").exists()
    for path in (link, tmp_path / "real" / "fort.10"):
        assert _which_version(pio.read(path, format="nbody6"), "nbody6") == 1


def test_stale_nbody6_sidecar_is_refused(tmp_path):
    table = tmp_path / "fort.10"
    pio.write(version(1, N_OLD), table, format="nbody6")
    sidecar = sidecar_path(table)
    old_sidecar = sidecar.read_text()
    pio.write(version(2, N_OLD), table, format="nbody6")  # same n: only the checksum tells them apart
    sidecar.write_text(old_sidecar)  # as a kill between the two renames leaves them
    with pytest.raises(ValueError, match="belongs to another table"):
        pio.read(table, format="nbody6")
    ic = pio.read(table, format="nbody6", length_pc=3.0, mass_msun=1002.0)
    assert _which_version(ic, "nbody6") == 2
    assert json.loads(old_sidecar)["n"] == N_OLD


# --------------------------------------------------------------------- subprocesses


def _start(directory: Path, *args) -> subprocess.Popen:
    """A worker (`_write_worker.py`) writing into `directory`; `_ready` waits for it."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args[:1], str(directory), *map(str, args[1:])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def _ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(proc.stderr.read())


def test_write_past_the_file_size_limit_leaves_the_old_files(tmp_path, fake_amuse):
    # `ulimit -f 256` in the worker: Python ignores SIGXFSZ, so each big write
    # fails with EFBIG part-way through its temporary file.
    proc = _start(tmp_path, "fsize", 256 * 1024)
    try:
        _ready(proc)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    errors = json.loads(out.strip().splitlines()[-1])
    assert all(errors[fmt] for fmt in TARGETS), errors  # every write failed...
    assert _temps(tmp_path) == []  # ...removed its temporary...
    for fmt in TARGETS:  # ...and left the old file
        assert _which_version(_read(tmp_path, fmt), fmt) == 0


# Worker i writes formats i and i + 1 in turn (versions 1, 2, 1, ...) and is
# killed once the temporary file of format i has reached a fraction of the new
# file's size: at its start, in the middle or near the end of a write. So each
# format is killed mid-write once, and once at whatever moment the kill came.
FORMATS = list(TARGETS)
KILLS = [(fmt, FORMATS[(i + 1) % len(FORMATS)], (0.0, 0.5, 0.9)[i % 3]) for i, fmt in enumerate(FORMATS)]


def _kill_mid_write(proc, directory: Path, fmt: str, size: int, timeout: float = 60.0) -> bool:
    """SIGKILL `proc` while the temporary of `fmt` holds >= `size` bytes; False if never seen."""
    prefix = f".{TARGETS[fmt]}."
    deadline = time.monotonic() + timeout
    caught = False
    while time.monotonic() < deadline and not caught:
        for entry in os.scandir(directory):
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                try:
                    caught = entry.stat().st_size >= size
                except FileNotFoundError:
                    pass  # renamed in the meantime
        if not caught:
            time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return caught


def test_killed_writes_leave_old_or_complete_files(tmp_path, fake_amuse):
    sizes = {}
    for fmt in TARGETS:  # the size of each complete new file
        pio.write(version(1, N_BIG), tmp_path / TARGETS[fmt], format=fmt)
        sizes[fmt] = (tmp_path / TARGETS[fmt]).stat().st_size
    runs = []
    for i, (fmt, other, fraction) in enumerate(KILLS):
        directory = tmp_path / f"run{i}"
        directory.mkdir()
        runs.append((directory, fmt, fraction, _start(directory, "loop", N_BIG, fmt, other)))
    seen = {}
    try:
        for directory, fmt, fraction, proc in runs:
            _ready(proc)
            seen[fmt] = _kill_mid_write(proc, directory, fmt, max(1, int(fraction * sizes[fmt])))
            assert proc.returncode == -signal.SIGKILL
            assert len(_temps(directory)) <= 2  # only the files being written when killed (a table and its sidecar)
            for target in TARGETS:
                _which_version(_read(directory, target), target)
    finally:
        for *_, proc in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(seen.values()), f"no kill landed inside a write of {[f for f, c in seen.items() if not c]}"
