"""The `progenax` command line, run in-process through `progenax.cli.main`."""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py when present

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax  # noqa: E402
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


def test_info_reuses_the_figures_build_stored_unless_the_file_changed(tmp_path, capsys, monkeypatch):
    import progenax.io.summary as summary

    path = tmp_path / "cluster.h5"
    assert _run(capsys, "build", "plummer", "--n", N, "--Q", 0.4, "-o", path)[0] == 0
    measure = summary._measures

    def refuse(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(summary, "_measures", refuse)
    code, out, err = _run(capsys, "info", path)
    assert code == 0, err
    assert "virial ratio Q    0.4000" in out
    # Another program doubles the velocities: the stored figures no longer fit, Q is measured (4 x 0.4).
    with h5py.File(path, "r+") as f:
        f["velocities"][...] *= 2.0
    monkeypatch.setattr(summary, "_measures", measure)
    code, out, err = _run(capsys, "info", path)
    assert code == 0, err
    assert "virial ratio Q    1.6000" in out


def test_build_is_reproducible_with_seed(tmp_path, capsys):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    # n = N: the compile of test_build_plummer_then_info serves (a new n would compile again).
    assert _run(capsys, "build", "plummer", "--n", N, "--seed", 7, "-o", a)[0] == 0
    assert _run(capsys, "build", "plummer", "--n", N, "--seed", 7, "-o", b)[0] == 0
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


@pytest.fixture(scope="module")
def small_cluster():
    """One real Plummer cluster (n = N, seed 0: the compile the other tests share)
    that the spies hand back, so a test checks what the command line passes to
    a builder without compiling that builder."""
    from progenax.builders import plummer_builder

    return plummer_builder(jax.random.PRNGKey(0), n=N)


def _spy_builders(monkeypatch, small_cluster):
    """Put spies in place of the builders the recipe calls; each call is recorded
    as (builder or model name, keyword arguments) and returns `small_cluster`
    labelled with that model."""
    import progenax.io.recipe as recipe
    from progenax.models import RecordedModel
    from progenax.state import InitialConditions

    calls = []

    def labelled(name):
        ic = small_cluster
        return InitialConditions(ic.state, ic.weights, RecordedModel(name, {}), ic.params, ic.units)

    def spherical(key, model, **kwargs):
        calls.append((model.NAME, kwargs))
        return labelled(model.NAME)

    monkeypatch.setattr(recipe, "model_builder", spherical)
    for name in ("fractal_builder", "king_builder", "limepy_builder", "star_builder"):

        def named(key, _name=name, **kwargs):
            calls.append((_name, kwargs))
            return labelled(_name.removesuffix("_builder"))

        monkeypatch.setattr(recipe, name, named)
    return calls


COMMON = dict(alpha=2.3, imf="kroupa", units="physical", binaries=None)


def test_build_passes_defaults_to_eff_builder(tmp_path, capsys, monkeypatch, small_cluster):
    # Model parameters not given on the command line take the model's defaults.
    calls = _spy_builders(monkeypatch, small_cluster)
    assert _run(capsys, "build", "eff", "--n", 50, "-o", tmp_path / "e.npz")[0] == 0
    assert calls == [("eff", dict(n=50, Q=0.5, **COMMON))]


def test_build_king_passes_its_defaults(tmp_path, capsys, monkeypatch, small_cluster):
    # King keeps its equilibrium velocities unless --Q is given.
    calls = _spy_builders(monkeypatch, small_cluster)
    assert _run(capsys, "build", "king", "--n", 50, "-o", tmp_path / "k.npz")[0] == 0
    assert _run(capsys, "build", "king", "--n", 50, "--W0", 9, "--Q", 0.4, "-o", tmp_path / "k.npz")[0] == 0
    assert calls == [("king", dict(n=50, Q=None, **COMMON)), ("king", dict(n=50, W0=9.0, Q=0.4, **COMMON))]
    code, out, err = _run(capsys, "build", "plummer", "--n", 10, "--W0", 6, "-o", tmp_path / "p.npz")
    _assert_usage_error(code, err, "--W0", "king")


# One row per McLuster flag of docs/cli.md: the progenax flags, and the builder
# call they must make (a subset of its keyword arguments).
MCLUSTER_FLAGS = {
    "-N": (["plummer", "--n", "64"], "plummer", dict(n=64)),
    "-P 0": (["plummer"], "plummer", dict(Q=0.5)),
    "-P 1": (["king"], "king", dict(Q=None)),
    "-P 3": (["eff", "--gamma", "3.5"], "eff", dict(gamma=3.5)),
    "-P -1": (["fractal", "--profile", "box"], "fractal_builder", dict(profile="box", Q=0.5)),
    "-W": (["king", "--W0", "7.5"], "king", dict(W0=7.5)),
    "-R": (["plummer", "--r-h", "2.5"], "plummer", dict(r_h=2.5)),
    "-D": (["fractal", "--D", "2.2"], "fractal_builder", dict(D=2.2)),
    "-S": (["plummer", "--segregation", "0.4"], "plummer", dict(segregation=0.4)),
    "-Q": (["plummer", "--Q", "0.3"], "plummer", dict(Q=0.3)),
    "-Q none": (["plummer", "--Q", "none"], "plummer", dict(Q=None)),
    "-f 0": (["plummer", "--imf", "equal"], "plummer", dict(imf="equal")),
    "-f 1": (["plummer", "--imf", "kroupa", "--alpha", "2.7"], "plummer", dict(imf="kroupa", alpha=2.7)),
    "-s": (["plummer", "--seed", "9"], "plummer", dict(n=10_000)),
    "-u 0": (["plummer", "--units", "henon"], "plummer", dict(units="henon")),
    "multi-mass": (["limepy", "--mass-bins", "6", "--delta", "0.4"], "limepy_builder", dict(mass_bins=6, delta=0.4)),
    "limepy": (["limepy", "--g", "1.5", "--ra", "8"], "limepy", dict(g=1.5, ra=8.0)),
    "dehnen": (["dehnen", "--gamma", "1"], "dehnen", dict(gamma=1.0)),
}


@pytest.mark.parametrize("mcluster", list(MCLUSTER_FLAGS))
def test_mcluster_flags_reach_the_builder(tmp_path, capsys, monkeypatch, small_cluster, mcluster):
    calls = _spy_builders(monkeypatch, small_cluster)
    argv, builder, expected = MCLUSTER_FLAGS[mcluster]
    from progenax.io.recipe import recipe_of

    path = tmp_path / "c.npz"
    code, _, err = _run(capsys, "build", *argv, "-o", path)
    assert code == 0, err
    [(name, kwargs)] = calls
    assert name == builder
    assert {k: kwargs[k] for k in expected} == expected
    # The file's recipe holds every flag given, as its keyword and value.
    recipe, version = recipe_of(path)
    assert recipe["model"] == argv[0] and version == progenax.__version__
    for flag, text in zip(argv[1::2], argv[2::2]):
        value = recipe[flag.lstrip("-").replace("-", "_")]
        assert str(value) == text or float(value) == float(text)


ROTATION_FLAGS = [
    (["plummer", "--rotation", "0.5", "--rotation-scale", "2"], "plummer", dict(rotation=0.5, rotation_scale=2.0)),
    (["dehnen", "--gamma", "1", "--rotation", "-1"], "dehnen", dict(rotation=-1.0)),
    (["king", "--mass-bins", "3", "--rotation", "1"], "king_builder", dict(mass_bins=3, rotation=1.0)),
]


@pytest.mark.parametrize("argv, builder, expected", ROTATION_FLAGS)
def test_rotation_flags_reach_the_spherical_builders(
    tmp_path, capsys, monkeypatch, small_cluster, argv, builder, expected
):
    # Every spherical builder takes rotation= and rotation_scale=; the command
    # line had no flag for them.
    calls = _spy_builders(monkeypatch, small_cluster)
    code, _, err = _run(capsys, "build", *argv, "-o", tmp_path / "c.npz")
    assert code == 0, err
    [(name, kwargs)] = calls
    assert name == builder and {k: kwargs[k] for k in expected} == expected
    code, _, err = _run(capsys, "build", "fractal", "--rotation", 0.5, "-o", tmp_path / "f.npz")
    _assert_usage_error(code, err, "--rotation", "fractal", "--D")


def test_mcluster_imf_flags_make_the_imf(tmp_path, capsys, monkeypatch, small_cluster):
    # -f 2 -a -m: a user multi-power law; and the Chabrier (2003) log-normal.
    from progenax.imf import ChabrierIMF, PowerLawIMF

    calls = _spy_builders(monkeypatch, small_cluster)
    slopes, breaks = "1.3,2.3,2.7", "0.08,0.5,1,100"
    argv = ["--imf", "power-law", "--imf-slopes", slopes, "--imf-breaks", breaks]
    assert _run(capsys, "build", "plummer", *argv, "-o", tmp_path / "p.npz")[0] == 0
    argv = ["--imf", "chabrier", "--m-c", "0.2", "--sigma", "0.55", "--m-max", "50"]
    assert _run(capsys, "build", "plummer", *argv, "-o", tmp_path / "c.npz")[0] == 0
    argv = ["--imf", "kroupa", "--m-min", "0.1"]
    assert _run(capsys, "build", "plummer", *argv, "-o", tmp_path / "k.npz")[0] == 0
    (_, power), (_, lognormal), (_, kroupa) = calls
    assert isinstance(power["imf"], PowerLawIMF)
    np.testing.assert_array_equal(power["imf"].slopes, [1.3, 2.3, 2.7])
    np.testing.assert_array_equal(power["imf"].breaks, [0.08, 0.5, 1.0, 100.0])
    imf = lognormal["imf"]
    assert isinstance(imf, ChabrierIMF)
    assert (float(imf.m_c), float(imf.sigma), float(imf.m_max)) == (0.2, 0.55, 50.0)
    np.testing.assert_array_equal(kroupa["imf"].breaks, [0.1, 0.5, 100.0])


def test_mcluster_tidal_flags_truncate_at_the_jacobi_radius(tmp_path, capsys, monkeypatch, small_cluster):
    # -t 2 (point-mass galaxy) with the galactocentric radius; hard and soft.
    from progenax.structure.tidal import jacobi_radius_point_mass

    _spy_builders(monkeypatch, small_cluster)
    r_t = float(jacobi_radius_point_mass(jnp_sum(small_cluster.state.masses), 1e6, 100.0))
    r = np.linalg.norm(np.asarray(small_cluster.state.positions), axis=1)
    for mode in ("hard", "sigmoid"):
        path = tmp_path / f"{mode}.h5"
        argv = ["--host-mass", "1e6", "--R", "100", "--tidal-mode", mode]
        assert _run(capsys, "build", "plummer", *argv, "-o", path)[0] == 0
        ic = pio.read(path)
        np.testing.assert_allclose(float(ic.params["r_t_tidal"]), r_t, rtol=1e-12)
        w = np.asarray(ic.weights)
        if mode == "hard":
            # The cluster's centre of mass is at the origin to rounding: r about it is r.
            np.testing.assert_array_equal(w, (r <= r_t).astype(float))
        else:
            assert np.all((w > 0) & (w < 1)) and w[np.argmax(r)] < 0.5 < w[np.argmin(r)]
    code, _, err = _run(capsys, "build", "plummer", "--V-c", "220", "-o", tmp_path / "x.h5")
    _assert_usage_error(code, err, "--V-c", "--R")


def jnp_sum(x):
    return float(np.sum(np.asarray(x)))


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


def test_plot_refuses_to_overwrite_its_input(tmp_path, capsys):
    # A catalogue named stars.png was replaced by its own figure, exit 0.
    path = tmp_path / "stars.png"
    assert _run(capsys, "build", "plummer", "--n", N, "--format", "csv", "-o", tmp_path / "stars.csv")[0] == 0
    (tmp_path / "stars.csv").rename(path)
    before = path.read_bytes()
    code, out, err = _run(capsys, "plot", path, "--format", "csv")
    _assert_usage_error(code, err, "would overwrite its input", "--output")
    assert path.read_bytes() == before


def test_unreadable_inputs_are_named_for_what_they_are(tmp_path, capsys):
    # A folder was "no such file", a binary file read as CSV a bare "'utf-8'
    # codec can't decode byte 0x89", HDF5 named .npz "pickled (object) data",
    # and a demo folder that is a file "[Errno 17] File exists" (exit 1).
    path = tmp_path / "c.h5"
    assert _run(capsys, "build", "plummer", "--n", N, "-o", path)[0] == 0
    (tmp_path / "folder.h5").mkdir()
    (tmp_path / "c.npz").write_bytes(path.read_bytes())
    (tmp_path / "afile").write_text("")
    for argv, words in [
        (["info", tmp_path / "folder.h5"], ["folder.h5", "is a directory"]),
        (["info", path, "--format", "csv"], ["c.h5", "not a text CSV table"]),
        (["info", tmp_path / "c.npz"], ["c.npz", "is an HDF5 file", "format='hdf5'"]),
        (["demo", "--output-dir", tmp_path / "afile", "--n", N], ["--output-dir", "is a file"]),
    ]:
        code, out, err = _run(capsys, *argv)
        _assert_usage_error(code, err, *words)


def test_relax_output_extension_error_names_the_own_format(tmp_path, capsys):
    # It said "or give --format", but --format names the input's format only.
    path = tmp_path / "c.h5"
    assert _run(capsys, "build", "plummer", "--n", N, "-o", path)[0] == 0
    code, out, err = _run(capsys, "relax", path, "-o", tmp_path / "relaxed.10", "--steps", 1)
    _assert_usage_error(code, err, "relaxed.10", "relax writes progenax's own format")
    assert "give --format" not in err


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
        (["build", "plummer", "--imf", "lognormal"], ["lognormal", "chabrier"]),
        (["build", "plummer", "--format", "csv", "-o", "a.h5"], ["--format csv", "a.h5"]),
        (["build", "plummer", "--format", "nbody6", "-o", "a.npz"], ["--format nbody6", "a.npz"]),
        (["build", "plummer", "--mass-bins", "4"], ["--mass-bins", "king, limepy"]),
        (["build", "king", "--delta", "0.3"], ["--delta", "--mass-bins"]),
        (["build", "fractal", "--W0", "3"], ["--W0", "fractal", "--D"]),
        (["build", "plummer", "--D", "2"], ["--D", "fractal"]),
        (["build", "plummer", "--imf", "chabrier", "--imf-slopes", "1,2"], ["--imf-slopes", "power-law"]),
        (["build", "plummer", "--imf", "power-law"], ["--imf-slopes", "--imf-breaks"]),
        (["build", "plummer", "--imf", "salpeter", "--m-c", "0.2"], ["--m-c", "chabrier"]),
        (["build", "plummer", "--R", "10"], ["--R", "--host-mass"]),
        (["build", "plummer", "--host-mass", "1e9", "--V-c", "200", "--R", "5"], ["alternatives"]),
        (["build", "plummer", "--kappa", "5"], ["--kappa", "tidal radius"]),
        # Every weight 0: density_centre raised IndexError (a traceback, exit 1).
        (["build", "plummer", "--n", "100", "--r-t-tidal", "1e-4", "--tidal-mode", "hard"], ["no star"]),
        (["build", "dehnen", "--gamma", "2.6"], ["gamma", "2.5"]),
        (["build"], ["MODEL"]),
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
    (tmp_path / "fort.10").write_text("")
    for command in ("info", "plot"):  # reading, too, names the flag
        code, _, err = _run(capsys, command, str(tmp_path / "fort.10"))
        _assert_usage_error(code, err, "--format")


@pytest.mark.parametrize("fmt, name", [("gadget", "g.hdf5"), ("csv", "c.csv")])
def test_henon_units_with_a_physical_format_are_a_usage_error(tmp_path, capsys, fmt, name):
    # The Gadget and CSV writers convert to pc, Msun, km/s: --units henon was
    # silently dropped while the summary line said "(Henon units)".
    code, _, err = _run(capsys, "build", "plummer", "--units", "henon", "--format", fmt, "-o", tmp_path / name)
    _assert_usage_error(code, err, f"--format {fmt}", "physical units", "--units henon")


def test_an_output_under_a_file_is_refused_before_building(tmp_path, capsys, monkeypatch, small_cluster):
    calls = _spy_builders(monkeypatch, small_cluster)
    (tmp_path / "cluster.h5").write_text("")
    code, _, err = _run(capsys, "build", "plummer", "-o", tmp_path / "cluster.h5" / "c.h5")
    _assert_usage_error(code, err, "is a file, not a folder")
    assert calls == []


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


@pytest.mark.parametrize("command", ["build", "relax", "demo"])
def test_a_write_to_a_folder_that_cannot_hold_it_exits_1_naming_the_target(command, tmp_path, capsys, monkeypatch):
    # /proc, say: the writer's temporary file cannot be made. A failed write
    # (exit 1, as docs/cli.md says), not a bad argument, and the message
    # names the target, not the hidden temporary file (relax and demo exited
    # 2 naming it).
    source = tmp_path / "in.h5"
    if command == "relax":
        assert _run(capsys, "build", "plummer", "--n", N, "-o", source)[0] == 0
    target = tmp_path / ("cluster.h5" if command == "demo" else "c.h5")

    def fail(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", str(tmp_path / f".{target.name}.tmp"))

    monkeypatch.setattr("progenax.io.write", fail)
    arguments = {
        "build": ("plummer", "--n", N, "-o", target),
        "relax": (source, "-o", target, "--steps", 1),
        "demo": ("--n", N, "--output-dir", tmp_path),
    }[command]
    code, _, err = _run(capsys, command, *arguments)
    assert code == 1 and "Traceback" not in err
    # The last line: relax's progress bar goes to stderr before it.
    assert err.strip().splitlines()[-1] == (
        f"progenax {command}: error: cannot write {str(target)!r}: No such file or directory"
    )


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


# ------------------------------------------------------------------------ recipes


def _rebuild_argv(out):
    """The argv of the `rebuild with` line that `progenax info` printed."""
    import shlex

    [line] = [line for line in out.splitlines() if line.startswith("rebuild with")]
    argv = shlex.split(line.removeprefix("rebuild with"))
    assert argv[:2] == ["progenax", "build"]
    return argv[2:]


def _same_arrays(a, b):
    for name in ("positions", "velocities", "masses"):
        assert np.array_equal(np.asarray(getattr(a.state, name)), np.asarray(getattr(b.state, name))), name
    assert np.array_equal(np.asarray(a.weights), np.asarray(b.weights))


def test_recipe_round_trip_rebuilds_identical_arrays(tmp_path, capsys):
    # Flags -> file -> `info` prints the command -> rerun it -> the same arrays.
    # n = N and the Kroupa IMF: the Plummer builder's compile is shared.
    first = tmp_path / "first.h5"
    flags = ["--n", N, "--r-h", 1.5, "--alpha", 2.7, "--Q", 0.4, "--seed", 3, "--host-mass", 1e6, "--R", 50.0]
    assert _run(capsys, "build", "plummer", *flags, "-o", first)[0] == 0
    code, out, err = _run(capsys, "info", first)
    assert code == 0, err
    assert f"progenax {progenax.__version__}" in out
    argv = _rebuild_argv(out)
    assert argv[argv.index("-o") + 1] == str(first)
    argv[argv.index("-o") + 1] = str(tmp_path / "again.h5")
    assert _run(capsys, "build", *argv)[0] == 0
    _same_arrays(pio.read(first), pio.read(tmp_path / "again.h5"))


def test_gravoturb_flags_reach_star_builder(tmp_path, capsys, monkeypatch, small_cluster):
    calls = _spy_builders(monkeypatch, small_cluster)
    flags = ["--mach", 3.0, "--b", 0.6, "--threshold-kappa", 5.0, "--threshold-mode", "hard", "--grid", 16]
    assert _run(capsys, "build", "gravoturb", *flags, "--geometry", "box", "-o", tmp_path / "g.npz")[0] == 0
    ((name, kwargs),) = calls
    assert name == "star_builder" and kwargs["Q"] is None  # the turbulent velocities as drawn
    expected = dict(mach=3.0, b=0.6, kappa=5.0, threshold_mode="hard", grid=16, geometry="box")
    assert {k: kwargs[k] for k in expected} == expected
    code, _, err = _run(capsys, "build", "gravoturb", "--segregation", 0.3, "-o", tmp_path / "h.npz")
    _assert_usage_error(code, err, "--segregation", "gravoturb", "--mach")


def test_gravoturb_recipe_round_trip(tmp_path, capsys):
    first = tmp_path / "first.h5"
    flags = ["--n", 200, "--grid", 16, "--mach", 4.0, "--alpha", 2.7, "--seed", 2]
    assert _run(capsys, "build", "gravoturb", *flags, "-o", first)[0] == 0
    argv = _rebuild_argv(_run(capsys, "info", first)[1])
    argv[argv.index("-o") + 1] = str(tmp_path / "again.h5")
    assert _run(capsys, "build", *argv)[0] == 0
    _same_arrays(pio.read(first), pio.read(tmp_path / "again.h5"))


def test_cloud_builds_sph_gas_and_rebuilds_it_from_its_recipe(tmp_path, capsys, small_cluster):
    # The cloud model is gravoturb.cloud_builder's SPH gas: its flags reach the builder,
    # the file keeps the gas arrays, and `info` prints the command that rebuilds it.
    first = tmp_path / "gas.h5"
    flags = ["--n", 300, "--grid", 16, "--mach", 4.0, "--m-cloud", 500.0, "--eta", 1.4, "--gamma", 1.4, "--seed", 2]
    code, out, err = _run(capsys, "build", "cloud", *flags, "-o", first)
    assert code == 0, err
    gas = pio.read(first)
    assert gas.n == 300 and hasattr(gas, "smoothing_length")
    np.testing.assert_allclose(float(np.sum(gas.state.masses)), 500.0)
    c_s2 = 0.2**2  # the default sound speed, km/s: u = c_s^2 / (gamma - 1)
    np.testing.assert_allclose(np.asarray(gas.internal_energy), c_s2 / 0.4)
    code, out, err = _run(capsys, "info", first)
    assert code == 0, err
    assert "SPH gas" in out and "rms Mach" in out  # our schema keeps gamma, so the summary has c_s
    argv = _rebuild_argv(out)
    argv[argv.index("-o") + 1] = str(tmp_path / "again.h5")
    assert _run(capsys, "build", *argv)[0] == 0
    again = pio.read(tmp_path / "again.h5")
    _same_arrays(gas, again)
    for name in ("internal_energy", "smoothing_length"):
        assert np.array_equal(np.asarray(getattr(gas, name)), np.asarray(getattr(again, name))), name
    # Stars and gas in one Gadget file (docs/gravoturb.md): info and plot read one
    # PartType, chosen with --particle-type (the reader's error names the flag).
    both = tmp_path / "both.hdf5"
    pio.write(small_cluster, both, format="gadget", gas=gas)
    code, _, err = _run(capsys, "info", both, "--format", "gadget")
    assert code != 0 and "--particle-type" in err
    code, out, err = _run(capsys, "info", both, "--format", "gadget", "--particle-type", 4)
    assert code == 0, err
    assert f"{small_cluster.n:,}" in out or str(small_cluster.n) in out
    code, _, err = _run(capsys, "info", first, "--particle-type", 0)
    _assert_usage_error(code, err, "--particle-type", "gadget")


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--Q", 0.5], ["--Q", "star clusters", "--m-cloud"]),
        (["--imf", "salpeter"], ["--imf", "star clusters"]),
        (["--units", "henon"], ["physical units"]),
        (["--dispersion", 1.0], ["--dispersion", "gravoturb", "--eta"]),
        (["--format", "csv", "-o", "gas.csv"], ["--format csv", "gas"]),
    ],
)
def test_cloud_refuses_what_gas_does_not_take(tmp_path, capsys, argv, words):
    if "-o" not in argv:
        argv = [*argv, "-o", "gas.h5"]
    argv = [tmp_path / a if a in ("gas.h5", "gas.csv") else a for a in argv]
    code, _, err = _run(capsys, "build", "cloud", "--n", 100, "--grid", 8, *argv)
    _assert_usage_error(code, err, *words)


def test_relax_refuses_gas(tmp_path, capsys):
    path = tmp_path / "gas.h5"
    assert _run(capsys, "build", "cloud", "--n", 200, "--grid", 8, "-o", path)[0] == 0
    code, _, err = _run(capsys, "relax", path, "-o", tmp_path / "r.h5", "--steps", 1)
    _assert_usage_error(code, err, "SPH gas", "star cluster")


def test_config_file_with_flags_overriding(tmp_path, capsys):
    config = tmp_path / "cluster.toml"
    config.write_text(f'model = "plummer"\nn = {N}\nr-h = 1.5\nalpha = 2.7\nQ = 0.4\nseed = 5\n')
    from_config = tmp_path / "c.npz"
    assert _run(capsys, "build", "--config", config, "--seed", 3, "-o", from_config)[0] == 0
    from_flags = tmp_path / "f.npz"
    flags = ["--n", N, "--r-h", 1.5, "--alpha", 2.7, "--Q", 0.4, "--seed", 3]
    assert _run(capsys, "build", "plummer", *flags, "-o", from_flags)[0] == 0
    _same_arrays(pio.read(from_config), pio.read(from_flags))  # the flag's seed 3 won over the file's 5
    config.write_text('model = "plummer"\nradius = 2.0\n')
    code, _, err = _run(capsys, "build", "--config", config, "-o", tmp_path / "x.npz")
    _assert_usage_error(code, err, "radius")


@pytest.mark.parametrize(
    "line,words",
    [("seed = -1", ("seed", "-1")), ("binary-fraction = true", ("binary_fraction", "True")), ('imf = "x"', ("imf",))],
)
def test_config_values_are_checked_as_the_flags_are(tmp_path, capsys, line, words):
    """A TOML value went to the builder unchecked: `seed = -1` built, and the
    rebuild command `info` printed (`--seed -1`) then exited 2."""
    config = tmp_path / "cluster.toml"
    config.write_text(f'model = "plummer"\nn = {N}\n{line}\n')
    code, _, err = _run(capsys, "build", "--config", config, "-o", tmp_path / "x.npz")
    _assert_usage_error(code, err, *words)
    assert not (tmp_path / "x.npz").exists()


def test_config_lists_are_the_flags_comma_separated_text(tmp_path, capsys):
    config = tmp_path / "cluster.toml"
    config.write_text(
        f'model = "plummer"\nn = {N}\nimf = "power-law"\nimf-slopes = [1.3, 2.7]\nimf-breaks = [0.1, 1, 50]\n'
    )
    assert _run(capsys, "build", "--config", config, "-o", tmp_path / "c.npz")[0] == 0
    flags = ["--n", N, "--imf", "power-law", "--imf-slopes", "1.3,2.7", "--imf-breaks", "0.1,1,50"]
    assert _run(capsys, "build", "plummer", *flags, "-o", tmp_path / "f.npz")[0] == 0
    _same_arrays(pio.read(tmp_path / "c.npz"), pio.read(tmp_path / "f.npz"))


@pytest.mark.parametrize("fmt,name", [("gadget", "snap.hdf5"), ("nbody6", "fort.10"), ("csv", "stars.csv")])
def test_every_format_stores_the_recipe(tmp_path, capsys, fmt, name):
    from progenax.io.recipe import recipe_of

    path = tmp_path / name
    assert _run(capsys, "build", "plummer", "--n", N, "--seed", 4, "--format", fmt, "-o", path)[0] == 0
    recipe, version = recipe_of(path, format=fmt)
    assert recipe["seed"] == 4 and recipe["n"] == N and recipe["format"] == fmt
    assert version == progenax.__version__
    code, out, _ = _run(capsys, "info", path, "--format", fmt)
    argv = _rebuild_argv(out)
    assert code == 0 and argv[argv.index("--format") + 1] == fmt and argv[argv.index("-o") + 1] == str(path)


@pytest.mark.parametrize("command", ["build", "info", "plot", "relax", "fit", "audit", "demo"])
def test_every_subcommand_help_shows_an_example(capsys, command):
    code, out, _ = _run(capsys, command, "--help")
    assert code == 0
    assert "example" in out and f"progenax {command}" in out.split("example", 1)[1]


# ------------------------------------------------------------------- compile cache


def test_compile_cache_directory_from_the_environment(monkeypatch, tmp_path):
    from progenax.cli import CACHE_ENV, compile_cache_dir

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache_dir() == tmp_path / "progenax" / "xla"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert compile_cache_dir() == tmp_path / "mine"
    for off in ("0", "off", "False", "no"):
        monkeypatch.setenv(CACHE_ENV, off)
        assert compile_cache_dir() is None


def test_no_compile_cache_flag_leaves_the_cache_off(monkeypatch, tmp_path, capsys, small_cluster):
    # The flag wins over the environment: no directory is made, JAX's setting is untouched.
    from progenax.cli import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    _spy_builders(monkeypatch, small_cluster)
    before = jax.config.jax_compilation_cache_dir
    assert _run(capsys, "build", "plummer", "--no-compile-cache", "-o", tmp_path / "c.npz")[0] == 0
    assert not (tmp_path / "cache").exists() and jax.config.jax_compilation_cache_dir == before


def test_an_entry_without_access_time_gets_one(tmp_path):
    # A folder filled without JAX's size cap has `-cache` entries only; with the
    # cap, JAX reads every entry's `-atime` before each write and fails on the first missing one.
    from progenax.cli import add_missing_access_times

    old = tmp_path / "jit_f-abc-cache"
    old.write_bytes(b"program")
    kept = tmp_path / "jit_g-def-atime"
    kept.write_bytes((7).to_bytes(8, "little"))
    (tmp_path / "jit_g-def-cache").write_bytes(b"program")
    add_missing_access_times(tmp_path)
    written = int.from_bytes((tmp_path / "jit_f-abc-atime").read_bytes(), "little")
    assert written == old.stat().st_mtime_ns
    assert int.from_bytes(kept.read_bytes(), "little") == 7


def test_the_console_script_flushes_its_output_and_keeps_its_status(tmp_path):
    # `run` ends the process with os._exit (no interpreter teardown): what a
    # command printed must still reach a pipe, and the status must be main's.
    import subprocess
    import sys

    def script(*argv):
        command = [sys.executable, "-m", "progenax.cli", *argv]
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)

    shown = script("--version")
    assert shown.returncode == 0 and shown.stdout.startswith("progenax "), shown
    refused = script("build", "plummer", "--n", "0")
    assert refused.returncode == 2 and refused.stderr.startswith("progenax build: error"), refused


def test_a_reader_that_leaves_early_gets_no_error_message(tmp_path, capsys):
    # `progenax info x.h5 | head -1`: the pipe closes before info writes. The
    # command stops with status 1 and prints nothing more (it printed
    # "progenax info: error: [Errno 32] Broken pipe").
    import subprocess
    import sys

    path = tmp_path / "c.h5"
    assert _run(capsys, "build", "plummer", "--n", N, "-o", path)[0] == 0
    command = [sys.executable, "-m", "progenax.cli", "info", str(path)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child.stdout.close()  # gone before the child has even imported progenax
    err = child.stderr.read()
    assert child.wait() == 1
    assert err == ""


@pytest.mark.slow
def test_second_build_loads_its_programs_from_the_cache(tmp_path):
    # Two fresh processes: the first fills the cache, the second adds nothing
    # (every program it needs is found). Slow: two interpreter start-ups and one compile.
    import os
    import subprocess
    import sys

    cache = tmp_path / "cache"
    env = {**os.environ, "PROGENAX_COMPILE_CACHE": str(cache)}
    command = [sys.executable, "-m", "progenax.cli", "build", "plummer", "--n", "300", "-o", str(tmp_path / "c.h5")]
    subprocess.run(command, env=env, check=True, capture_output=True)
    entries = sorted(p.name for p in cache.iterdir())
    assert entries
    subprocess.run(command, env=env, check=True, capture_output=True)
    assert sorted(p.name for p in cache.iterdir()) == entries


# ---------------------------------------------------------------------------- fit


def test_fit_refuses_an_unknown_model_and_a_missing_file(tmp_path, capsys):
    code, _, err = _run(capsys, "fit", tmp_path / "stars.csv", "--model", "eff")
    _assert_usage_error(code, err, "--model", "plummer")
    code, _, err = _run(capsys, "fit", tmp_path / "missing.h5", "--model", "plummer")
    _assert_usage_error(code, err, "missing.h5")


@pytest.mark.slow
def test_fit_recovers_a_plummer_catalogue(tmp_path, capsys):
    # The acceptance: a catalogue written by `build plummer --n 2000 --format
    # csv`, fitted with NUTS; each posterior median within 2 posterior sd of the
    # truth (r_h = 1, alpha = 2.3, Q = 0.5), r-hat and ESS in the summary. `--Q none`:
    # the likelihood's Q is the DF's velocity scale; the default exact rescaling to
    # T/|W| = 0.5 moves it by the realised scatter of T/|W| (docs/inference.md,
    # "What Q means here"; 0.463 +- 0.007 for this catalogue).
    import arviz as az

    stars = tmp_path / "stars.csv"
    assert _run(capsys, "build", "plummer", "--n", 2000, "--Q", "none", "--format", "csv", "-o", stars)[0] == 0
    argv = ["--format", "csv", "--model", "plummer", "--num-warmup", 300, "--num-samples", 300, "--no-progress"]
    code, out, err = _run(capsys, "fit", stars, *argv)
    assert code == 0, err
    assert "r_hat" in out and "ess_bulk" in out
    posterior = az.from_netcdf(str(tmp_path / "stars_fit_posterior.nc")).posterior
    for name, truth in {"r_h": 1.0, "alpha": 2.3, "Q": 0.5}.items():
        draws = np.asarray(posterior[name]).ravel()
        assert abs(np.median(draws) - truth) < 2 * draws.std(), name
    summary = (tmp_path / "stars_fit_summary.txt").read_text()
    assert "r_hat" in summary and "ess_bulk" in summary
    assert _is_png(tmp_path / "stars_fit_corner.png")
