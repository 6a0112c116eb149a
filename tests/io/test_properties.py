"""Property tests (hypothesis) of the writers and readers of every format.

- Finite clusters of any size, either float width and any finite values round
  trip through every format: what is read back is what was written (the
  values of `ic`, or of `ic.to_physical()` for the formats that store
  physical units; float32 widened by the text and AMUSE formats).
- A cluster with one NaN or inf in any array is refused by every writer with a
  `ValueError` naming the array, and nothing is written.

Clusters are made in Henon units with finite scales, so the NBODY6 writer
needs no conversion (a one-star cluster, or coincident stars, have no virial
radius). AMUSE is the fake package of conftest.py (installed per example).
"""

import sys
import tempfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import progenax.io as pio  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import henon_units  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import conftest  # noqa: E402  (the fake AMUSE)

TARGETS = {"hdf5": "c.h5", "npz": "c.npz", "gadget": "c.hdf5", "nbody6": "fort.10", "csv": "c.csv", "amuse": "c.amuse"}
PHYSICAL = ("gadget", "csv")  # formats that store physical units
KEEP_WEIGHTS = ("hdf5", "npz", "csv")  # the others refuse weights other than 1
ARRAYS = ("positions", "velocities", "masses", "weights")


@st.composite
def clusters(draw, unit_weights=False):
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    n = draw(st.sampled_from([1, 2, 5, 12]))  # few shapes: the unit conversions compile once per shape
    big = 2.0**100 if dtype == np.float32 else 2.0**600  # finite, and so after a unit conversion

    def array(shape, lo, hi):
        floats = st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=32 if dtype == np.float32 else 64)
        return jnp.asarray(draw(hnp.arrays(dtype, shape, elements=floats)))

    state = ParticleState(array((n, 3), -big, big), array((n, 3), -big, big), array((n,), 0.0, big))
    weights = jnp.ones(n, dtype) if unit_weights else array((n,), 0.0, 1.0)
    scales = [draw(st.floats(1e-3, 1e3)) for _ in range(2)]
    units = henon_units(jnp.asarray(scales[0]), jnp.asarray(scales[1]))
    return InitialConditions(state, weights, "plummer", {"r_h": jnp.asarray(1.0, dtype)}, units)


def _same(read, written, fmt):
    expected = written.to_physical() if fmt in PHYSICAL else written
    for name in ARRAYS[:3]:
        got, want = getattr(read.state, name), getattr(expected.state, name)
        np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64), f"{fmt} {name}")
    if fmt in KEEP_WEIGHTS:
        np.testing.assert_array_equal(np.asarray(read.weights, np.float64), np.asarray(written.weights, np.float64))


@pytest.fixture(scope="module")
def fake_amuse_module():
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, module in conftest._fake_amuse_modules().items():
            monkeypatch.setitem(sys.modules, name, module)
        yield


@settings(max_examples=15, deadline=None)
@given(ic=clusters(unit_weights=False), unit=clusters(unit_weights=True))
def test_finite_clusters_round_trip_through_every_format(fake_amuse_module, ic, unit):
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, name in TARGETS.items():
            written = ic if fmt in KEEP_WEIGHTS else unit
            path = pio.write(written, Path(tmp) / name, format=fmt)
            _same(pio.read(path, format=fmt), written, fmt)


@settings(max_examples=20, deadline=None)
@given(
    ic=clusters(unit_weights=True),
    which=st.sampled_from(ARRAYS),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
    where=st.integers(0, 10**6),
)
def test_non_finite_clusters_are_refused_by_every_writer(fake_amuse_module, ic, which, bad, where):
    x = np.array(ic.weights if which == "weights" else getattr(ic.state, which))
    x.flat[where % x.size] = bad
    arrays = {"positions": ic.state.positions, "velocities": ic.state.velocities, "masses": ic.state.masses}
    arrays["weights"] = ic.weights
    arrays[which] = jnp.asarray(x)
    weights = arrays.pop("weights")
    ic = InitialConditions(ParticleState(**arrays), weights, ic.model, ic.params, ic.units)
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, name in TARGETS.items():
            with pytest.raises(ValueError, match=f"{which} must be finite"):
                pio.write(ic, Path(tmp) / name, format=fmt)
        assert list(Path(tmp).iterdir()) == []  # nothing written, no temporary left
