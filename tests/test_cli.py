"""The `progenax` command line, run in-process through `progenax.cli.main`."""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py when present

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax.io as pio  # noqa: E402
from progenax.cli import main  # noqa: E402

N = 500  # small clusters keep the whole module to a few seconds per build


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_usage_error(code, err, *words):
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no usage block
    assert lines[0].startswith("progenax")
    assert "error" in lines[0]
    for word in words:
        assert word in lines[0], lines[0]


# ----------------------------------------------------------------------- build / info


def test_build_plummer_then_info(tmp_path, capsys):
    path = tmp_path / "cluster.h5"
    code, out, err = _run(
        capsys, "build", "plummer", "--n", N, "--r-h", 1.5, "--alpha", 2.7, "--Q", 0.4, "--seed", 3, "-o", path
    )
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1
    assert f"N = {N}" in out and str(path) in out
    ic = pio.read(path)
    assert ic.n == N and ic.model.name == "plummer" and ic.units.name == "physical"
    assert ic.state.positions.dtype == np.float64  # the CLI builds in float64
    np.testing.assert_allclose(float(ic.params["r_h"]), 1.5)
    np.testing.assert_allclose(float(ic.params["alpha"]), 2.7)
    np.testing.assert_allclose(float(ic.params["Q"]), 0.4)

    code, out, err = _run(capsys, "info", path)
    assert code == 0, err
    for word in ("plummer", f"{N}", "Msun", "half-mass radius", "virial ratio Q", "physical", "alpha = 2.7"):
        assert word in out
    # Q is rescaled exactly by the builder; info measures it with the exact sum at this n.
    assert "virial ratio Q    0.4000" in out


def test_build_is_reproducible_with_seed(tmp_path, capsys):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert _run(capsys, "build", "plummer", "--n", 50, "--seed", 7, "-o", a)[0] == 0
    assert _run(capsys, "build", "plummer", "--n", 50, "--seed", 7, "-o", b)[0] == 0
    ia, ib = pio.read(a), pio.read(b)
    assert np.array_equal(np.asarray(ia.state.positions), np.asarray(ib.state.positions))


def test_build_henon_equal_masses_npz(tmp_path, capsys):
    path = tmp_path / "sub" / "cluster.npz"  # parent directories are created
    code, out, err = _run(capsys, "build", "plummer", "--n", N, "--imf", "equal", "--units", "henon", "-o", path)
    assert code == 0, err
    ic = pio.read(path)
    assert ic.units.name == "henon"
    m = np.asarray(ic.state.masses)
    assert np.all(m == m[0])
    np.testing.assert_allclose(m.sum(), 1.0, rtol=1e-12)  # M = 1 in Henon units
    code, out, err = _run(capsys, "info", path)
    assert code == 0 and "henon" in out and "Msun" in out


def test_build_eff_then_info_and_plot(tmp_path, capsys):
    # One eff build only: compiling the EFF builder takes most of this module's time.
    path = tmp_path / "eff.hdf5"
    code, out, err = _run(
        capsys, "build", "eff", "--n", 200, "--gamma", 2.5, "--r-t", 20.0, "--imf", "salpeter", "-o", path
    )
    assert code == 0, err
    ic = pio.read(path)
    assert ic.n == 200 and ic.model.name == "eff"
    np.testing.assert_allclose(float(ic.params["gamma"]), 2.5)
    np.testing.assert_allclose(float(ic.params["r_t"]), 20.0)
    # Salpeter (0.1-100 Msun) never draws a star below 0.1 Msun.
    assert float(np.min(ic.state.masses)) >= 0.1 * (1 - 1e-12)
    code, out, err = _run(capsys, "info", path)
    assert code == 0 and "eff" in out and "gamma = 2.5" in out and "r_t = 20" in out
    code, out, err = _run(capsys, "plot", path)
    assert code == 0, err
    assert _is_png(path.with_suffix(".png"))


def _spy_builder(monkeypatch):
    """Put a spy in place of the command line's `model_builder`: it records the
    model and keyword arguments the command line passes and returns a small
    Plummer cluster labelled with that model, so a test checks the defaults
    without compiling the real builder."""
    import progenax.builders as builders
    import progenax.cli as cli
    from progenax.models import RecordedModel
    from progenax.state import InitialConditions

    calls = []

    def spy(key, model, **kwargs):
        calls.append((model.NAME, kwargs))
        ic = builders.plummer_builder(key, n=kwargs["n"])
        return InitialConditions(ic.state, ic.weights, RecordedModel(model.NAME, {}), ic.params, ic.units)

    monkeypatch.setattr(cli, "model_builder", spy)
    return calls


def test_build_passes_defaults_to_eff_builder(tmp_path, capsys, monkeypatch):
    # Model parameters not given on the command line take the model's defaults.
    calls = _spy_builder(monkeypatch)
    assert _run(capsys, "build", "eff", "--n", 50, "-o", tmp_path / "e.npz")[0] == 0
    assert calls == [("eff", dict(n=50, alpha=2.3, Q=0.5, imf="kroupa", units="physical", binaries=None))]


def test_build_king_passes_its_defaults(tmp_path, capsys, monkeypatch):
    # King keeps its equilibrium velocities unless --Q is given.
    calls = _spy_builder(monkeypatch)
    assert _run(capsys, "build", "king", "--n", 50, "-o", tmp_path / "k.npz")[0] == 0
    assert _run(capsys, "build", "king", "--n", 50, "--W0", 9, "--Q", 0.4, "-o", tmp_path / "k.npz")[0] == 0
    common = dict(n=50, alpha=2.3, imf="kroupa", units="physical", binaries=None)
    assert calls == [("king", dict(Q=None, **common)), ("king", dict(W0=9.0, Q=0.4, **common))]
    code, out, err = _run(capsys, "build", "plummer", "--n", 10, "--W0", 6, "-o", tmp_path / "p.npz")
    _assert_usage_error(code, err, "--W0", "king")


def test_eff_builder_errors_are_one_line(tmp_path, capsys):
    # r_h must be below 2^(-1/3) r_t; the builder's ValueError becomes exit 2.
    code, out, err = _run(capsys, "build", "eff", "--n", 10, "--r-t", 1.0, "--r-h", 1.0, "-o", tmp_path / "e.h5")
    _assert_usage_error(code, err, "r_h", "r_t")
    assert not (tmp_path / "e.h5").exists()


# --------------------------------------------------------------------- plot / demo


def _is_png(path):
    data = path.read_bytes()
    return len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_writes_cluster_and_png(tmp_path, capsys):
    out_dir = tmp_path / "demo_output"
    code, out, err = _run(capsys, "demo", "--output-dir", out_dir, "--n", 2000)
    assert code == 0, err
    cluster, figure = out_dir / "cluster.h5", out_dir / "quicklook.png"
    assert _is_png(figure)
    ic = pio.read(cluster)
    assert ic.n == 2000 and ic.model.name == "plummer"
    assert str(cluster) in out and str(figure) in out
    assert "virial ratio Q" in out


def test_plot_command(tmp_path, capsys):
    path = tmp_path / "c.npz"
    assert _run(capsys, "build", "plummer", "--n", N, "-o", path)[0] == 0
    code, out, err = _run(capsys, "plot", path, "-o", tmp_path / "figs" / "q.png")
    assert code == 0, err
    assert _is_png(tmp_path / "figs" / "q.png")


# ------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "argv, words",
    [
        (["build", "plummer", "--n", "0"], ["--n", ">= 1"]),
        (["build", "plummer", "--n", "ten"], ["--n"]),
        (["build", "plummer", "--seed", "-3"], ["--seed"]),
        (["demo", "--n", "-5"], ["--n"]),
        (["build", "plummer", "--r-h", "-1"], ["r_h"]),
        (["build", "plummer", "--Q", "nan"], ["Q"]),
        (["build", "plummer", "--Q", "inf"], ["Q", "finite"]),
        (["build", "plummer", "--r-h", "inf"], ["r_h", "finite"]),
        (["build", "plummer", "--n", "1", "--units", "henon"], ["n must be >= 2", "henon"]),
        (["build", "plummer", "-o", "cluster.txt"], [".h5", ".npz"]),
        (["build", "plummer", "--gamma", "2.0"], ["--gamma", "eff"]),
        (["build", "plummer", "--r-t", "10"], ["--r-t", "eff"]),
        (["build", "plummer", "--imf", "salpeter", "--alpha", "2.7"], ["--alpha", "salpeter"]),
        (["build", "plummer", "--imf", "chabrier"], ["chabrier"]),
        (["build", "hernquist"], ["hernquist"]),
        (["build", "plummer", "--units", "cgs"], ["cgs"]),
        (["frobnicate"], ["frobnicate"]),
        ([], ["COMMAND"]),
        (["info"], ["path"]),
        (["plot", "c.h5", "-o", "q.jpg"], [".png"]),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.chdir(tmp_path)  # nothing may be written, but never into the repo
    code, out, err = _run(capsys, *argv)
    _assert_usage_error(code, err, *words)
    assert list(tmp_path.iterdir()) == []


def test_info_missing_and_foreign_files(tmp_path, capsys):
    code, out, err = _run(capsys, "info", tmp_path / "missing.h5")
    _assert_usage_error(code, err, "missing.h5")

    foreign = tmp_path / "snap.h5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("Coordinates", data=np.zeros((4, 3)))
    code, out, err = _run(capsys, "info", foreign)
    _assert_usage_error(code, err, "not a progenax")

    code, out, err = _run(capsys, "info", tmp_path / "cluster.csv")
    _assert_usage_error(code, err, ".h5, .hdf5, .npz")


def test_help_exits_0(capsys):
    code, out, err = _run(capsys, "--help")
    assert code == 0 and "build" in out and "demo" in out
    code, out, err = _run(capsys, "build", "--help")
    assert code == 0 and "--r-h" in out


# -------------------------------------------------------------------------- audit


def _fake_rows(fail):
    from progenax.audit import AuditRow

    rows = [
        AuditRow("plummer_builder", "r_h", 1.0, 1.0, 0.0, True, "full", ""),
        AuditRow("plummer_builder", "alpha", 2.0, 2.0, 1e-9, True, "partial", "sorted masses"),
    ]
    if fail:
        rows.append(AuditRow("plummer_builder", "Q", 1.0, 2.0, 0.5, True, "full", ""))
    return rows


@pytest.mark.parametrize("fail", [False, True])
def test_audit_exit_code_follows_rows(monkeypatch, capsys, fail):
    # The real audit runs in tests/test_audit.py; here only the CLI's reading of
    # the rows is checked, with rows of the real type and the real table.
    import progenax.audit

    monkeypatch.setattr(progenax.audit, "run_audit", lambda *a, **k: _fake_rows(fail))
    code, out, err = _run(capsys, "audit")
    assert code == (1 if fail else 0)
    assert "plummer_builder" in out and "alpha" in out
    assert ("FAIL" in out) == fail
    if fail:
        assert "1 of 3" in err


@pytest.mark.parametrize("fmt,name", [("gadget", "snap.hdf5"), ("nbody6", "fort.10"), ("csv", "stars.csv")])
def test_build_and_info_in_other_formats(tmp_path, capsys, fmt, name):
    path = tmp_path / name
    # n = N: the Plummer builder compiled for test_build_plummer_then_info serves these.
    code, _, err = _run(capsys, "build", "plummer", "--n", N, "--format", fmt, "-o", str(path))
    assert code == 0, err
    assert path.exists() and path.stat().st_size > 0
    code, out, err = _run(capsys, "info", str(path), "--format", fmt)
    assert code == 0, err
    assert str(N) in out


def test_unknown_extension_without_format_is_a_usage_error(tmp_path, capsys):
    code, _, err = _run(capsys, "build", "plummer", "--n", "50", "-o", str(tmp_path / "x.txt"))
    assert code == 2 and "--format" in err


# ------------------------------------------------------------ failed writes, NaN input


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device"),
        RuntimeError("Can't decrement id ref count (unable to extend file properly, errno = 27)"),
    ],
)
def test_a_failed_write_is_one_line_and_keeps_the_old_file(tmp_path, capsys, monkeypatch, error):
    path = tmp_path / "cluster.h5"
    assert _run(capsys, "build", "plummer", "--n", N, "--seed", 1, "-o", path)[0] == 0
    before = path.read_bytes()

    def fail(temp):  # as a full disk or `ulimit -f` would, after the data went to the temporary file
        raise error

    monkeypatch.setattr("progenax.io._paths._sync", fail)
    code, out, err = _run(capsys, "build", "plummer", "--n", N, "--seed", 2, "-o", path)
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines() == [f"progenax build: error: {error}"]
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["cluster.h5"]


def test_relax_refuses_a_nan_input_in_one_line(tmp_path, capsys):
    path = tmp_path / "nan.h5"
    assert _run(capsys, "build", "plummer", "--n", N, "-o", path)[0] == 0
    with h5py.File(path, "r+") as f:
        f["positions"][3, 1] = np.nan
    code, out, err = _run(capsys, "relax", path, "-o", tmp_path / "r.h5", "--steps", 2)
    _assert_usage_error(code, err, "nan.h5", "positions must be finite", "row 3")
    assert not (tmp_path / "r.h5").exists()


# ----------------------------------------------------------------------- binaries


def test_build_with_binaries_then_info(tmp_path, capsys):
    path = tmp_path / "binaries.h5"
    code, out, err = _run(capsys, "build", "plummer", "--n", N, "--binary-fraction", 1.0, "-o", path)
    assert code == 0, err
    ic = pio.read(path)
    assert ic.n == 2 * N and ic.pairs.shape == (N, 2)
    code, out, err = _run(capsys, "info", path)
    assert code == 0, err
    assert f"{N} of {N} systems" in out and "systems' Q = 0.5000" in out


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--binary-period", "dm91"], ["--binary-period", "--binary-fraction"]),
        (["--binary-fraction", "1.5"], ["--binary-fraction", "[0, 1]"]),
        (["--binary-fraction", "0.5", "--binary-period", "moe17", "--binary-eccentricity", "thermal"], ["moe17"]),
    ],
)
def test_binary_flags_are_checked(tmp_path, capsys, flags, words):
    code, _, err = _run(capsys, "build", "plummer", "--n", N, *flags, "-o", tmp_path / "x.h5")
    _assert_usage_error(code, err, *words)
