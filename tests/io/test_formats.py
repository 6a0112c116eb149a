"""Exchange formats: Gadget/SWIFT HDF5, NBODY6 tables, CSV; and the `format=` routing."""

import json

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py

import h5py  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax  # noqa: E402
import progenax.io as pio  # noqa: E402
from progenax.diagnostics import potential_energy  # noqa: E402
from progenax.io import gadget as gio  # noqa: E402
from progenax.io import nbody as nio  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import henon_units, physical_units  # noqa: E402


def _make_ic(n=123, seed=0, weights=None, units="physical"):
    """A hand-made float64 cluster with values that do not round-trip through short text."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    v = rng.standard_normal((n, 3)) * 3.0
    m = np.exp(rng.uniform(np.log(0.08), np.log(100.0), n))
    w = np.ones(n) if weights is None else weights
    state = ParticleState(jnp.asarray(x), jnp.asarray(v), jnp.asarray(m))
    u = physical_units() if units == "physical" else henon_units(float(m.sum()) * 3.0, 1.7)
    return InitialConditions(state, jnp.asarray(w), "plummer", {"r_h": jnp.asarray(1.0)}, u)


def _soft_weights(n):
    w = np.ones(n)
    w[5] = 0.3
    return w


# ------------------------------------------------------------------------- gadget


@pytest.mark.parametrize("fmt", ["gadget", "swift"])
def test_gadget_layout(tmp_path, fmt):
    ic = _make_ic()
    path = pio.write(ic, tmp_path / "snap.hdf5", format=fmt)
    n = ic.n
    with h5py.File(path, "r") as f:
        h = f["Header"].attrs
        for key in ("NumPart_ThisFile", "NumPart_Total", "NumPart_Total_HighWord"):
            assert h[key].shape == (6,) and h[key].dtype.kind == "u"
        np.testing.assert_array_equal(h["NumPart_ThisFile"], [0, 0, 0, 0, n, 0])
        np.testing.assert_array_equal(h["NumPart_Total"], [0, 0, 0, 0, n, 0])
        np.testing.assert_array_equal(h["NumPart_Total_HighWord"], np.zeros(6))
        np.testing.assert_array_equal(h["MassTable"], np.zeros(6))
        assert h["MassTable"].dtype == np.float64
        assert h["BoxSize"] == 0.0 and h["Time"] == 0.0 and h["Redshift"] == 0.0
        assert h["NumFilesPerSnapshot"] == 1
        for flag in ("Flag_Sfr", "Flag_Cooling", "Flag_StellarAge", "Flag_Metals", "Flag_Feedback"):
            assert h[flag] == 0
        assert h["Flag_DoublePrecision"] == 1  # float64 data

        u = f["Units"].attrs
        assert u["Unit length in cgs (U_L)"] == 3.0856775814913673e18
        assert u["Unit mass in cgs (U_M)"] == 1.98841e33
        assert u["Unit velocity in cgs (U_V)"] == 1e5
        assert u["Unit time in cgs (U_t)"] == 3.0856775814913673e18 / 1e5
        assert u["Unit current in cgs (U_I)"] == 1 and u["Unit temperature in cgs (U_T)"] == 1

        assert "PartType1" not in f
        g = f["PartType4"]
        assert g["Coordinates"].shape == (n, 3) and g["Coordinates"].dtype == np.float64
        assert g["Velocities"].shape == (n, 3) and g["Velocities"].dtype == np.float64
        assert g["Masses"].shape == (n,) and g["Masses"].dtype == np.float64
        assert g["ParticleIDs"].dtype == np.uint64
        np.testing.assert_array_equal(g["ParticleIDs"][()], np.arange(1, n + 1))
        np.testing.assert_array_equal(g["Coordinates"][()], np.asarray(ic.state.positions))


def test_gadget_round_trip_exact(tmp_path):
    ic = _make_ic()
    back = pio.read(pio.write(ic, tmp_path / "snap.hdf5", format="gadget"), format="gadget")
    assert back.units.name == "physical" and back.model.name == "plummer"
    np.testing.assert_array_equal(np.asarray(back.state.positions), np.asarray(ic.state.positions))
    np.testing.assert_array_equal(np.asarray(back.state.velocities), np.asarray(ic.state.velocities))
    np.testing.assert_array_equal(np.asarray(back.state.masses), np.asarray(ic.state.masses))
    np.testing.assert_array_equal(np.asarray(back.weights), 1.0)


def test_gadget_particle_type_1_box_and_henon_input(tmp_path):
    ic = _make_ic(units="henon")
    path = gio.write_gadget(ic, tmp_path / "snap.h5", particle_type=1, box_size=50.0)
    with h5py.File(path, "r") as f:
        assert "PartType4" not in f and "PartType1" in f
        np.testing.assert_array_equal(f["Header"].attrs["NumPart_Total"], [0, ic.n, 0, 0, 0, 0])
        assert f["Header"].attrs["BoxSize"] == 50.0
    back = gio.read_gadget(path)
    phys = ic.to_physical()  # Henon input is written in pc, km/s, Msun
    np.testing.assert_allclose(np.asarray(back.state.positions), np.asarray(phys.state.positions), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(back.state.masses), np.asarray(phys.state.masses), rtol=1e-15)


def test_gadget_float32_and_foreign_file(tmp_path):
    ic = _make_ic()
    s = ic.state
    ic32 = InitialConditions(
        ParticleState(*(x.astype(jnp.float32) for x in (s.positions, s.velocities, s.masses))),
        ic.weights.astype(jnp.float32),
        ic.model,
        {},
        ic.units,
    )
    path = gio.write_gadget(ic32, tmp_path / "snap32.hdf5")
    with h5py.File(path, "r") as f:
        assert f["PartType4/Coordinates"].dtype == np.float32
        assert f["Header"].attrs["Flag_DoublePrecision"] == 0
    # A snapshot without our group gives model "gadget"; one in kpc is converted.
    with h5py.File(path, "a") as f:
        del f["progenax"]
        f["Units"].attrs["Unit length in cgs (U_L)"] = 1e3 * gio.U_L_CGS
    back = gio.read_gadget(path)
    assert back.model.name == "gadget"
    np.testing.assert_allclose(np.asarray(back.state.positions), 1e3 * np.asarray(ic32.state.positions), rtol=1e-6)


def test_gadget_snapshot_without_particles_says_so(tmp_path):
    path = tmp_path / "empty.hdf5"
    with h5py.File(path, "w") as f:
        f.create_group("Header")
        f.create_group("PartType4")  # a group, but no Coordinates in it
    with pytest.raises(ValueError, match="holds no particles"):
        gio.read_gadget(path)


def test_gadget_refuses_soft_weights_and_bad_options(tmp_path):
    ic = _make_ic(weights=_soft_weights(123))
    with pytest.raises(ValueError, match="weights"):
        pio.write(ic, tmp_path / "snap.hdf5", format="gadget")
    assert not (tmp_path / "snap.hdf5").exists()
    with pytest.raises(ValueError, match="particle_type"):
        gio.write_gadget(_make_ic(), tmp_path / "snap.hdf5", particle_type=6)
    with pytest.raises(ValueError, match="box_size"):
        gio.write_gadget(_make_ic(), tmp_path / "snap.hdf5", box_size=-1.0)
    with pytest.raises(ValueError, match="Header"):
        gio.read_gadget(pio.write(_make_ic(), tmp_path / "native.h5"))


# ------------------------------------------------------------------------- nbody6


def test_nbody6_table_round_trip(tmp_path):
    ic = _make_ic(n=50)
    path = pio.write(ic, tmp_path / "fort.10", format="nbody6")
    lines = path.read_text().splitlines()
    assert len(lines) == 50 and all(len(line.split()) == 7 for line in lines)
    assert not any(line.startswith("#") for line in lines)  # Fortran list-directed input
    table = np.loadtxt(path)
    h = ic.to_henon()
    # '%.17g' text reads back every float64 exactly.
    np.testing.assert_array_equal(table[:, 0], np.asarray(h.state.masses))
    np.testing.assert_array_equal(table[:, 1:4], np.asarray(h.state.positions))
    np.testing.assert_array_equal(table[:, 4:7], np.asarray(h.state.velocities))
    assert table[:, 0].sum() == pytest.approx(1.0, rel=1e-14)

    meta = json.loads(nio.sidecar_path(path).read_text())
    assert meta["units"] == "henon" and meta["n"] == 50 and meta["G"] == 1.0
    assert meta["length_pc"] == float(h.units.length_pc)
    assert meta["nbody6"]["ZMBAR"] == pytest.approx(float(h.units.mass_msun) / 50)

    back = pio.read(path, format="petar")
    assert back.units.name == "henon" and back.model.name == "plummer"
    np.testing.assert_array_equal(np.asarray(back.state.positions), np.asarray(h.state.positions))
    for name in ("length_pc", "mass_msun", "velocity_kms"):
        assert float(getattr(back.units, name)) == float(getattr(h.units, name))
    # Back to physical units it is the cluster we started from.
    np.testing.assert_allclose(
        np.asarray(back.to_physical().state.velocities), np.asarray(ic.state.velocities), rtol=1e-12
    )


def test_nbody6_without_sidecar(tmp_path):
    path = nio.write_nbody6(_make_ic(n=20), tmp_path / "fort.10", sidecar=False)
    assert not nio.sidecar_path(path).exists()
    with pytest.raises(ValueError, match="length_pc"):
        nio.read_nbody6(path)
    back = nio.read_nbody6(path, length_pc=2.0, mass_msun=500.0)
    assert float(back.units.length_pc) == 2.0 and back.model.name == "nbody6"
    assert float(back.units.G) == pytest.approx(1.0, rel=1e-14)


def test_nbody6_refuses_soft_weights(tmp_path):
    with pytest.raises(ValueError, match="weights"):
        pio.write(_make_ic(weights=_soft_weights(123)), tmp_path / "fort.10", format="nbody6")


def test_nbody6_plummer_energy(tmp_path):
    """A Plummer cluster at Q = 0.5 has E = -1/4 in the Henon units of the table."""
    ic = progenax.plummer_builder(jax.random.PRNGKey(7), n=10_000, Q=0.5)
    table = np.loadtxt(pio.write(ic, tmp_path / "fort.10", format="nbody6"))
    m, x, v = table[:, 0], table[:, 1:4], table[:, 4:7]
    T = 0.5 * np.sum(m * np.sum(v * v, axis=1))
    W = float(potential_energy(jnp.asarray(x), jnp.asarray(m), G=1.0, method="exact"))
    E = T + W
    print(f"NBODY6 table: T = {T:.10f}, W = {W:.10f}, E = {E:.10f}, Q = {-T / W:.10f}")
    # The Henon length unit is the virial radius from the exact W, so W = -1/2 up to
    # rounding; T depends on how the builder scales to Q = 0.5 (1% leaves room for it).
    assert W == pytest.approx(-0.5, rel=1e-9)
    assert E == pytest.approx(-0.25, rel=0.01)


# ---------------------------------------------------------------------------- csv


def test_csv_header_values_and_round_trip(tmp_path):
    w = _soft_weights(30)
    ic = _make_ic(n=30, weights=w, units="henon")
    path = pio.write(ic, tmp_path / "stars.csv", format="csv")
    lines = path.read_text().splitlines()
    assert lines[0] == "x_pc,y_pc,z_pc,vx_kms,vy_kms,vz_kms,mass_msun,weight"
    assert len(lines) == 31
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    phys = ic.to_physical()
    np.testing.assert_array_equal(table[:, 0:3], np.asarray(phys.state.positions))
    np.testing.assert_array_equal(table[:, 3:6], np.asarray(phys.state.velocities))
    np.testing.assert_array_equal(table[:, 6], np.asarray(phys.state.masses))
    np.testing.assert_array_equal(table[:, 7], w)
    back = pio.read(path, format="csv")
    assert back.units.name == "physical"
    np.testing.assert_array_equal(np.asarray(back.state.masses), np.asarray(phys.state.masses))
    np.testing.assert_array_equal(np.asarray(back.weights), w)


def test_csv_missing_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("x_pc,y_pc,z_pc,mass_msun\n1,2,3,4\n")
    with pytest.raises(ValueError, match="vx_kms"):
        pio.read_csv(path)


# ------------------------------------------------------------------------ routing


def test_unknown_format_names_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match="gadget.*nbody6.*csv"):
        pio.write(_make_ic(), tmp_path / "x.dat", format="ramses")
    with pytest.raises(ValueError, match="gadget.*nbody6.*csv"):
        pio.read(tmp_path / "x.dat", format="tipsy")


def test_default_format_is_still_the_native_schema(tmp_path):
    ic = _make_ic()
    path = pio.write(ic, tmp_path / "cluster.h5")
    with h5py.File(path, "r") as f:
        assert f.attrs["schema"] == "progenax-ic" and "Header" not in f
    assert pio.read(path).model.name == "plummer"
    # An explicit native format ignores the extension.
    back = pio.read(pio.write(ic, tmp_path / "cluster.bin", format="npz"), format="npz")
    np.testing.assert_array_equal(np.asarray(back.state.positions), np.asarray(ic.state.positions))
    with pytest.raises(TypeError, match="options"):
        pio.write(ic, tmp_path / "c.csv", format="csv", particle_type=1)


def test_reading_a_file_compiles_nothing(tmp_path):
    # The readers hand their NumPy arrays to JAX with `jax.device_put`: in JAX 0.10
    # `jnp.asarray` compiled a one-op program per new shape and dtype (7 of them,
    # 0.15 s of `progenax info` on a native file).
    import subprocess
    import sys

    ic = _make_ic()
    paths = [
        (pio.write(ic, tmp_path / "c.h5"), None),
        (pio.write(ic, tmp_path / "c.csv", format="csv"), "csv"),
        (pio.write(ic, tmp_path / "snap.hdf5", format="gadget"), "gadget"),
        (pio.write(ic, tmp_path / "fort.10", format="nbody6"), "nbody6"),
    ]
    reads = "".join(f"pio.read({str(p)!r}, format={f!r})\n" for p, f in paths)
    script = (
        "import jax\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "jax.config.update('jax_log_compiles', True)\n"
        "import progenax.io as pio\n" + reads
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "Compiling" not in result.stderr, result.stderr[-2000:]
