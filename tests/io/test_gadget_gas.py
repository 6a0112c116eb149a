"""Gadget/SWIFT PartType0: SPH gas (`progenax.gravoturb.GasCloud`) written and read back."""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py

import h5py  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax.io as pio  # noqa: E402
from progenax.gravoturb import GasCloud  # noqa: E402
from progenax.io import gadget as gio  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import physical_units  # noqa: E402


def _gas(n=97, seed=1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    state = ParticleState(
        jnp.asarray(rng.standard_normal((n, 3)).astype(dtype)),
        jnp.asarray(rng.standard_normal((n, 3)).astype(dtype)),
        jnp.asarray(np.full(n, 0.37, dtype)),
    )
    u = jnp.asarray(rng.uniform(0.01, 0.1, n).astype(dtype))
    h = jnp.asarray(rng.uniform(0.02, 0.2, n).astype(dtype))
    return GasCloud(state, jnp.ones(n, dtype), u, h, "gravoturb_gas", {}, physical_units())


def _stars(n=41, seed=2):
    rng = np.random.default_rng(seed)
    state = ParticleState(
        jnp.asarray(rng.standard_normal((n, 3))),
        jnp.asarray(rng.standard_normal((n, 3))),
        jnp.asarray(rng.uniform(0.1, 5, n)),
    )
    return InitialConditions(state, jnp.ones(n), "gravoturb", {}, physical_units())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gas_is_written_as_parttype0_and_read_back(tmp_path, dtype):
    gas = _gas(dtype=dtype)
    path = pio.write(gas, tmp_path / "gas.hdf5", format="gadget")
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["Header"].attrs["NumPart_ThisFile"], [gas.n, 0, 0, 0, 0, 0])
        assert f["Header"].attrs["Flag_DoublePrecision"] == int(dtype == np.float64)
        g = f["PartType0"]
        for name in ("Coordinates", "Velocities", "Masses", "ParticleIDs", "InternalEnergy", "SmoothingLength"):
            assert name in g
        assert g["InternalEnergy"].dtype == dtype and g["SmoothingLength"].shape == (gas.n,)
        np.testing.assert_array_equal(g["ParticleIDs"][()], np.arange(1, gas.n + 1))
    back = pio.read(path, format="gadget")
    assert isinstance(back, GasCloud) and back.model.name == "gravoturb_gas" and back.field is None
    for a, b in [
        (back.state.positions, gas.state.positions),
        (back.state.velocities, gas.state.velocities),
        (back.state.masses, gas.state.masses),
        (back.internal_energy, gas.internal_energy),
        (back.smoothing_length, gas.smoothing_length),
    ]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_stars_and_gas_in_one_snapshot(tmp_path):
    gas, stars = _gas(), _stars()
    path = gio.write_gadget(stars, tmp_path / "both.hdf5", gas=gas)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["Header"].attrs["NumPart_Total"], [gas.n, 0, 0, 0, stars.n, 0])
        ids = np.concatenate([f["PartType0/ParticleIDs"][()], f["PartType4/ParticleIDs"][()]])
        np.testing.assert_array_equal(np.sort(ids), np.arange(1, gas.n + stars.n + 1))
    with pytest.raises(ValueError, match="particle_type"):
        gio.read_gadget(path)
    back_gas = gio.read_gadget(path, particle_type=0)
    back_stars = gio.read_gadget(path, particle_type=4)
    assert isinstance(back_gas, GasCloud) and back_gas.model.name == "gravoturb_gas"
    assert isinstance(back_stars, InitialConditions) and back_stars.model.name == "gravoturb"
    np.testing.assert_array_equal(np.asarray(back_stars.state.masses), np.asarray(stars.state.masses))
    np.testing.assert_array_equal(np.asarray(back_gas.smoothing_length), np.asarray(gas.smoothing_length))


def test_gas_particle_type_errors(tmp_path):
    with pytest.raises(ValueError, match="PartType0"):
        gio.write_gadget(_gas(), tmp_path / "g.hdf5", particle_type=4)
    with pytest.raises(ValueError, match="particle_type"):
        gio.write_gadget(_stars(), tmp_path / "g.hdf5", particle_type=0, gas=_gas())
    with pytest.raises(ValueError, match="gas="):
        gio.write_gadget(_stars(), tmp_path / "g.hdf5", gas=_stars())


def test_stars_written_as_parttype0_stay_stars(tmp_path):
    """A stars-only file with particle_type=0 (no gas datasets) still reads as InitialConditions."""
    path = gio.write_gadget(_stars(), tmp_path / "s.hdf5", particle_type=0)
    back = gio.read_gadget(path)
    assert isinstance(back, InitialConditions) and back.model.name == "gravoturb"
