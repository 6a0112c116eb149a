"""progenax's own .h5/.npz schema keeps SPH gas: internal energies and smoothing lengths."""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py

import h5py  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax.io as pio  # noqa: E402
from progenax.gravoturb import GasCloud  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import physical_units  # noqa: E402


def _gas(n=43, seed=3, dtype=np.float64):
    rng = np.random.default_rng(seed)
    state = ParticleState(
        jnp.asarray(rng.standard_normal((n, 3)).astype(dtype)),
        jnp.asarray(rng.standard_normal((n, 3)).astype(dtype)),
        jnp.asarray(np.full(n, 0.37, dtype)),
    )
    u = jnp.asarray(rng.uniform(0.01, 0.1, n).astype(dtype))
    h = jnp.asarray(rng.uniform(0.02, 0.2, n).astype(dtype))
    params = {"mach": jnp.asarray(dtype(5.5)), "b": jnp.asarray(dtype(0.4))}
    return GasCloud(state, jnp.ones(n, dtype), u, h, "gravoturb_gas", params, physical_units())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["gas.h5", "gas.npz"])
def test_gas_round_trips_bit_for_bit(tmp_path, dtype, name):
    gas = _gas(dtype=dtype)
    back = pio.read(pio.write(gas, tmp_path / name))
    assert isinstance(back, GasCloud) and back.model.name == "gravoturb_gas" and back.field is None
    assert back.units.name == "physical"
    for a, b in [
        (back.state.positions, gas.state.positions),
        (back.state.velocities, gas.state.velocities),
        (back.state.masses, gas.state.masses),
        (back.weights, gas.weights),
        (back.internal_energy, gas.internal_energy),
        (back.smoothing_length, gas.smoothing_length),
    ]:
        assert np.asarray(a).dtype == dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert sorted(back.params) == ["b", "mach"] and float(back.params["mach"]) == pytest.approx(5.5)


def test_stars_have_no_gas_datasets(tmp_path):
    gas = _gas()
    stars = InitialConditions(gas.state, gas.weights, "plummer", {}, physical_units())
    path = pio.write(stars, tmp_path / "stars.h5")
    with h5py.File(path, "r") as f:
        assert "internal_energy" not in f and "smoothing_length" not in f
    assert isinstance(pio.read(path), InitialConditions)


def test_half_a_gas_file_is_an_error(tmp_path):
    path = pio.write(_gas(), tmp_path / "gas.h5")
    with h5py.File(path, "a") as f:
        del f["smoothing_length"]
    with pytest.raises(ValueError, match="internal_energy and smoothing_length"):
        pio.read(path)


@pytest.mark.parametrize("fmt, name", [("nbody6", "fort.10"), ("csv", "gas.csv")])
def test_star_only_formats_refuse_gas(tmp_path, fmt, name):
    # nbody6 raised AttributeError ('GasCloud' has no 'to_henon'); csv dropped
    # the internal energies and smoothing lengths without a word.
    with pytest.raises(ValueError, match=f"the {fmt} format cannot hold SPH gas"):
        pio.write(_gas(), tmp_path / name, format=fmt)
    assert list(tmp_path.iterdir()) == []
