"""AMUSE particle sets: `to_amuse`, `write(..., format="amuse")`, `read_amuse`.

Most tests run against the fake `amuse` package of tests/io/conftest.py (AMUSE is
not a dependency); `test_real_amuse_round_trip` runs where AMUSE is installed.
"""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax.io as pio  # noqa: E402
from progenax import cli  # noqa: E402
from progenax.gravoturb import GasCloud  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import henon_units, physical_units  # noqa: E402


def _ic(n=57, seed=0, dtype=np.float64, weights=None, units=None):
    """A hand-made cluster with values that do not survive any rounding."""
    rng = np.random.default_rng(seed)
    state = ParticleState(
        jnp.asarray(rng.standard_normal((n, 3)).astype(dtype)),
        jnp.asarray((3.0 * rng.standard_normal((n, 3))).astype(dtype)),
        jnp.asarray(np.exp(rng.uniform(np.log(0.08), np.log(50.0), n)).astype(dtype)),
    )
    w = jnp.ones(n, dtype) if weights is None else jnp.asarray(weights, dtype)
    return InitialConditions(state, w, "plummer", {"r_h": jnp.asarray(1.0)}, units or physical_units())


def _gas(n=31, seed=1, dtype=np.float64):
    ic = _ic(n, seed, dtype)
    rng = np.random.default_rng(seed + 10)
    u = jnp.asarray(rng.uniform(0.01, 0.1, n).astype(dtype))
    h = jnp.asarray(rng.uniform(0.02, 0.2, n).astype(dtype))
    return GasCloud(ic.state, ic.weights, u, h, "gravoturb_gas", {}, physical_units())


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))


# ------------------------------------------------------------------ fake AMUSE


def test_physical_cluster_in_msun_parsec_kms(fake_amuse):
    units = fake_amuse["amuse.units.units"]
    ic = _ic()
    p = pio.to_amuse(ic)
    assert len(p) == ic.n
    assert p.mass.unit is units.MSun and p.position.unit is units.parsec and p.velocity.unit is units.kms
    _same(p.mass.value_in(units.MSun), ic.state.masses)
    _same(p.position.value_in(units.parsec), ic.state.positions)
    _same(p.velocity.value_in(units.kms), ic.state.velocities)
    info = p.collection_attributes
    assert info.progenax_model == "plummer" and info.progenax_units == "physical"
    assert (info.length_pc, info.mass_msun, info.velocity_kms) == (1.0, 1.0, 1.0)
    assert sorted(p.get_attribute_names_defined_in_store()) == ["mass", "vx", "vy", "vz", "x", "y", "z"]


def test_henon_cluster_in_nbody_units_or_converted(fake_amuse):
    nbody = fake_amuse["amuse.units.nbody_system"]
    units = fake_amuse["amuse.units.units"]
    ic = _ic(units=henon_units(250.0, 1.7))
    p = pio.to_amuse(ic)
    assert p.mass.unit is nbody.mass and p.position.unit is nbody.length and p.velocity.unit is nbody.speed
    _same(p.velocity.value_in(nbody.speed), ic.state.velocities)
    assert p.collection_attributes.progenax_units == "henon"
    assert p.collection_attributes.length_pc == pytest.approx(1.7, rel=1e-15)
    q = pio.to_amuse(ic, units="physical")
    assert q.mass.unit is units.MSun
    np.testing.assert_allclose(q.position.value_in(units.parsec), 1.7 * np.asarray(ic.state.positions), rtol=1e-14)
    with pytest.raises(ValueError, match="units must be one of"):
        pio.to_amuse(ic, units="si")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("units", ["physical", "henon"])
def test_write_and_read_back(fake_amuse, tmp_path, dtype, units):
    ic = _ic(dtype=dtype, units=henon_units(300.0, 2.0) if units == "henon" else None)
    path = pio.write(ic, tmp_path / "cluster.amuse", format="amuse")
    pio.write(ic, path, format="amuse")  # an existing file is overwritten
    back = pio.read(path, format="amuse")
    assert isinstance(back, InitialConditions) and back.model.name == "plummer" and back.units.name == units
    # Bit for bit in float64, though the fake stores units with 12 digits as AMUSE does.
    for a, b in [
        (back.state.positions, ic.state.positions),
        (back.state.velocities, ic.state.velocities),
        (back.state.masses, ic.state.masses),
        (back.weights, ic.weights),
    ]:
        _same(a, b)
    for name in ("length_pc", "mass_msun", "velocity_kms"):
        _same(getattr(back.units, name), getattr(ic.units, name))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gas_gets_u_and_h_smooth(fake_amuse, tmp_path, dtype):
    units = fake_amuse["amuse.units.units"]
    gas = _gas(dtype=dtype)
    p = pio.to_amuse(gas)
    _same(p.u.value_in(units.kms**2), gas.internal_energy)
    _same(p.h_smooth.value_in(units.parsec), gas.smoothing_length)
    back = pio.read(pio.write(gas, tmp_path / "gas.amuse", format="amuse"), format="amuse")
    assert isinstance(back, GasCloud) and back.model.name == "gravoturb_gas" and back.field is None
    _same(back.internal_energy, gas.internal_energy)
    _same(back.smoothing_length, gas.smoothing_length)
    _same(back.state.positions, gas.state.positions)
    with pytest.raises(ValueError, match="physical units"):
        pio.to_amuse(gas, units="henon")


def test_soft_weights_are_refused(fake_amuse, tmp_path):
    w = np.ones(57)
    w[3] = 0.5
    with pytest.raises(ValueError, match="amuse format has no membership weights"):
        pio.write(_ic(weights=w), tmp_path / "w.amuse", format="amuse")
    assert not (tmp_path / "w.amuse").exists()


def test_nbody_file_without_scales_is_refused(fake_amuse, tmp_path):
    nbody = fake_amuse["amuse.units.nbody_system"]
    p = fake_amuse["amuse.datamodel"].Particles(4)
    p.mass = np.full(4, 0.25) | nbody.mass
    p.position = np.zeros((4, 3)) | nbody.length
    p.velocity = np.zeros((4, 3)) | nbody.speed
    fake_amuse["amuse.io"].write_set_to_file(p, str(tmp_path / "plain.amuse"), "amuse")
    with pytest.raises(ValueError, match="N-body units without the physical scales"):
        pio.read_amuse(tmp_path / "plain.amuse")
    with pytest.raises(FileNotFoundError):
        pio.read_amuse(tmp_path / "missing.amuse")


def test_cli_build(fake_amuse, tmp_path, capsys, monkeypatch):
    # Building a real cluster is tested in tests/test_cli.py; here a hand-made one keeps this fast.
    monkeypatch.setattr(cli.recipes, "build_from_recipe", lambda recipe: (_ic(n=recipe["n"]), dict(recipe)))
    monkeypatch.setattr(pio, "summary_figures", lambda ic: {})
    monkeypatch.setattr(pio, "summary_line", lambda ic, figures: f"{ic.model.name} n={ic.n}")
    path = tmp_path / "c.amuse"
    assert cli.main(["build", "plummer", "--n", "64", "--format", "amuse", "-o", str(path)]) == 0
    assert "-> " in capsys.readouterr().out
    # `progenax info --format amuse` reads with the same call (its summary is tested elsewhere).
    assert pio.read(path, format="amuse").n == 64


# ------------------------------------------------------------- AMUSE missing


def test_missing_amuse_says_how_to_install(no_amuse, tmp_path, capsys, monkeypatch):
    ic = _ic()
    for call in (
        lambda: pio.to_amuse(ic),
        # ImportError first, not FileNotFoundError for the missing directory.
        lambda: pio.write(ic, tmp_path / "nowhere" / "c.amuse", format="amuse"),
        lambda: pio.read(tmp_path / "c.amuse", format="amuse"),
    ):
        with pytest.raises(ImportError, match="pip install amuse-framework"):
            call()

    def must_not_build(recipe):
        raise AssertionError("the cluster was built before AMUSE was checked")

    monkeypatch.setattr(cli.recipes, "build_from_recipe", must_not_build)
    path = tmp_path / "c.amuse"
    assert cli.main(["build", "plummer", "--n", "64", "--format", "amuse", "-o", str(path)]) == 2
    assert "pip install amuse-framework" in capsys.readouterr().err
    assert not path.exists()


# --------------------------------------------------------------- real AMUSE


# AMUSE is not a dependency (it needs a Fortran compiler to install), so CI has
# none: this check runs with `make validate` where AMUSE is installed (it passed
# against amuse-framework 2024.6.0) and the fake-package tests above cover
# the calls in the default suite.
@pytest.mark.slow
def test_real_amuse_round_trip(tmp_path):
    """With AMUSE installed: write, read back with AMUSE's own reader, compare."""
    pytest.importorskip("amuse.io")
    from amuse.io import read_set_from_file
    from amuse.units import nbody_system, units

    ic = _ic(n=101)
    path = pio.write(ic, tmp_path / "c.amuse", format="amuse")
    p = read_set_from_file(str(path), "amuse")
    # AMUSE stores the parsec as "3.08567758128e+16 * m" (12 digits): 5e-13 off.
    np.testing.assert_allclose(p.position.value_in(units.parsec), ic.state.positions, rtol=1e-12, atol=0)
    np.testing.assert_allclose(p.velocity.value_in(units.kms), ic.state.velocities, rtol=1e-15, atol=0)
    np.testing.assert_allclose(p.mass.value_in(units.MSun), ic.state.masses, rtol=1e-15, atol=0)
    assert p.collection_attributes.progenax_model == "plummer"
    back = pio.read(path, format="amuse")  # the stored numbers, bit for bit
    _same(back.state.positions, ic.state.positions)
    _same(back.state.velocities, ic.state.velocities)
    _same(back.state.masses, ic.state.masses)

    henon = _ic(n=33, units=henon_units(120.0, 0.8))
    q = read_set_from_file(str(pio.write(henon, tmp_path / "h.amuse", format="amuse")), "amuse")
    _same(q.position.value_in(nbody_system.length), henon.state.positions)
    gas = _gas()
    g = pio.read(pio.write(gas, tmp_path / "g.amuse", format="amuse"), format="amuse")
    assert isinstance(g, GasCloud)
    _same(g.internal_energy, gas.internal_energy)
    _same(g.smoothing_length, gas.smoothing_length)
