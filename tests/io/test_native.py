"""Round trips of progenax's own file format (HDF5 and .npz) and its errors."""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py when present

import h5py  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax.io as pio  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import Units, henon_units, physical_units  # noqa: E402

FORMATS = ("cluster.h5", "cluster.hdf5", "cluster.npz")


def _make_ic(dtype, n=257, units="physical", seed=0):
    """A hand-made cluster with awkward values (no builder needed)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(dtype)
    v = (rng.standard_normal((n, 3)) * 3.0).astype(dtype)
    # Masses over several decades and values that do not round-trip through text.
    m = np.exp(rng.uniform(np.log(0.08), np.log(100.0), n)).astype(dtype)
    w = rng.uniform(0.0, 1.0, n).astype(dtype)
    w[:10] = 1.0
    params = {
        "r_h": jnp.asarray(np.array(1.0 / 3.0, dtype)),
        "alpha": jnp.asarray(np.array(2.3, dtype)),
        "Q": jnp.asarray(np.array(0.5, dtype)),
        "breaks": jnp.asarray(np.array([0.08, 0.5, 100.0], dtype)),
    }
    state = ParticleState(jnp.asarray(x), jnp.asarray(v), jnp.asarray(m))
    if units == "physical":
        u = Units("physical", *(jnp.asarray(np.array(1.0, dtype)) for _ in range(3)))
    else:
        h = henon_units(float(m.sum()), 1.7)
        u = Units("henon", *(jnp.asarray(np.asarray(s, dtype)) for s in (h.length_pc, h.mass_msun, h.velocity_kms)))
    return InitialConditions(state, jnp.asarray(w), "plummer", params, u)


def _assert_identical(a, b):
    # The model is rebuilt from its name and parameters on reading (a hand-made
    # cluster's bare name stays a RecordedModel); what the file stores must
    # come back bit for bit.
    assert a.model.name == b.model.name
    assert a.units.name == b.units.name
    stored = lambda c: (c.state, c.weights, c.params, c.units)  # noqa: E731
    leaves_a, tree_a = jax.tree_util.tree_flatten(stored(a))
    leaves_b, tree_b = jax.tree_util.tree_flatten(stored(b))
    assert tree_a == tree_b
    for la, lb in zip(leaves_a, leaves_b):
        la, lb = np.asarray(la), np.asarray(lb)
        assert la.dtype == lb.dtype
        assert la.shape == lb.shape
        # Bit-exact: compare the raw bytes, not values within a tolerance.
        assert la.tobytes() == lb.tobytes()


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("units", ["physical", "henon"])
def test_round_trip_is_bit_exact(tmp_path, name, dtype, units):
    ic = _make_ic(dtype, units=units)
    path = pio.write(ic, tmp_path / name)
    assert path.is_file()
    back = pio.read(path)
    _assert_identical(ic, back)
    assert back.state.positions.dtype == dtype
    assert set(back.params) == set(ic.params)


@pytest.mark.parametrize("name", FORMATS)
def test_round_trip_with_str_path_and_string_parameter(tmp_path, name):
    ic = _make_ic(np.float64, n=5)
    ic = InitialConditions(ic.state, ic.weights, "eff", {"gamma": jnp.asarray(3.0)}, physical_units())
    pio.write(ic, str(tmp_path / name))
    back = pio.read(str(tmp_path / name))
    _assert_identical(ic, back)
    assert back.model.name == "eff"


def test_hdf5_schema(tmp_path):
    ic = _make_ic(np.float64, n=11)
    path = pio.write(ic, tmp_path / "c.h5")
    with h5py.File(path, "r") as f:
        assert f.attrs["schema"] == "progenax-ic"
        assert f.attrs["schema_version"] == 1
        assert f.attrs["model"] == "plummer"
        assert f.attrs["units"] == "physical"
        assert f.attrs["n"] == 11
        for name in ("progenax_version", "length_pc", "mass_msun", "velocity_kms"):
            assert name in f.attrs
        np.testing.assert_allclose(f.attrs["G"], 4.300917270e-3, rtol=1e-12)
        assert f["positions"].shape == (11, 3)
        assert f["velocities"].shape == (11, 3)
        assert f["masses"].shape == (11,)
        assert f["weights"].shape == (11,)
        assert f["parameters"].attrs["alpha"] == 2.3
        assert f["parameters"]["breaks"].shape == (3,)


def test_unknown_extension(tmp_path):
    ic = _make_ic(np.float64, n=4)
    with pytest.raises(ValueError, match=r"\.h5, \.hdf5, \.npz"):
        pio.write(ic, tmp_path / "cluster.txt")
    with pytest.raises(ValueError, match=r"\.h5, \.hdf5, \.npz"):
        pio.read(tmp_path / "cluster")


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.h5"
    with pytest.raises(FileNotFoundError, match="nope.h5"):
        pio.read(missing)
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        pio.read(tmp_path / "nope.npz")


def test_missing_directory_on_write(tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_dir"):
        pio.write(_make_ic(np.float64, n=4), tmp_path / "no_such_dir" / "c.h5")


def test_foreign_hdf5_is_rejected(tmp_path):
    path = tmp_path / "snapshot.h5"
    with h5py.File(path, "w") as f:  # e.g. a GADGET-like snapshot
        f.create_group("PartType1").create_dataset("Coordinates", data=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="not a progenax"):
        pio.read(path)

    path = tmp_path / "other_schema.h5"
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "something-else"
    with pytest.raises(ValueError, match="something-else"):
        pio.read(path)


def test_newer_schema_version_is_rejected(tmp_path):
    path = pio.write(_make_ic(np.float64, n=4), tmp_path / "c.h5")
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(ValueError, match="schema_version 99"):
        pio.read(path)


def test_schema_file_missing_a_dataset_is_rejected(tmp_path):
    path = pio.write(_make_ic(np.float64, n=4), tmp_path / "c.h5")
    with h5py.File(path, "a") as f:
        del f["velocities"]
    with pytest.raises(ValueError, match="velocities"):
        pio.read(path)


@pytest.mark.parametrize("name", ["garbage.h5", "garbage.npz"])
def test_not_hdf5_or_npz_at_all(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"this is not a cluster\n" * 10)
    with pytest.raises(ValueError, match=name):
        pio.read(path)


def test_foreign_npz_is_rejected(tmp_path):
    path = tmp_path / "arrays.npz"
    np.savez(path, positions=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="not a progenax"):
        pio.read(path)


@pytest.mark.parametrize("name", ["cluster.h5", "cluster.npz"])
def test_summary_figures_kept_in_the_file_are_used_only_for_its_contents(tmp_path, name):
    ic = _make_ic(np.float64, n=300)
    measured = pio.summary_figures(ic)
    path = pio.write(ic, tmp_path / name, summary=measured)
    stored = pio.stored_summary(path)
    assert stored == measured  # every figure back as the same Python value
    back = pio.read(path)
    assert pio.summary_figures(back)["digest"] == stored["digest"]  # the digest survives the round trip
    # Stored figures are taken as they are when the digest matches ...
    marked = {**stored, "Q": 123.0}
    assert "virial ratio Q    123.0000" in pio.format_summary(back, marked)
    # ... and measured again for any other contents: one velocity changed, the units, the weights.
    moved = InitialConditions(
        ParticleState(back.state.positions, back.state.velocities.at[0, 0].add(1e-9), back.state.masses),
        back.weights,
        back.model,
        back.params,
        back.units,
    )
    s = back.state
    as_float32 = InitialConditions(
        ParticleState(*(jnp.asarray(a, np.float32) for a in (s.positions, s.velocities, s.masses))),
        back.weights.astype(np.float32),
        back.model,
        back.params,
        back.units,
    )
    for other in (
        moved,
        back.to_henon(),
        InitialConditions(back.state, back.weights * 0.5, back.model, back.params, back.units),
        InitialConditions(back.state, back.weights, back.model, back.params, back.units, jnp.asarray([[0, 1]])),
        as_float32,
    ):
        figures = pio.summary_figures(other, marked)
        assert figures["digest"] != stored["digest"]
        assert figures["Q"] != 123.0
    # A stored set that lacks a figure is measured again, not printed with a gap.
    partial = {key: value for key, value in marked.items() if key != "r_h"}
    assert pio.summary_figures(back, partial)["Q"] != 123.0
    # A file written without figures, and an exchange format, hold none.
    assert pio.stored_summary(pio.write(ic, tmp_path / f"bare_{name}")) is None
    assert pio.stored_summary(pio.write(ic, tmp_path / "x.csv", format="csv", summary=measured), format="csv") is None


def test_small_virial_ratios_keep_their_significant_figures():
    """A cold cluster's Q (1e-4 for gravoturbulent stars of 1e6 with their own
    velocities) printed with its digits, not as 0.0000; ordinary ones in fixed point."""
    ic = _make_ic(np.float64, n=300)
    figures = pio.summary_figures(ic)
    for q, long, short in ((3.1234e-4, "0.000312", "0.000312"), (0.5, "0.5000", "0.500"), (0.0, "0.0000", "0.000")):
        marked = {**figures, "Q": q}
        assert f"virial ratio Q    {long}" in pio.format_summary(ic, marked)
        assert pio.summary_line(ic, marked).endswith(f"Q = {short}")


def test_summary_figures_refuse_arrays(tmp_path):
    ic = _make_ic(np.float64, n=20)
    with pytest.raises(ValueError, match="'r_h' of shape"):
        pio.write(ic, tmp_path / "c.h5", summary={"r_h": np.ones(3)})


def test_format_summary_physical_and_henon():
    ic = _make_ic(np.float64, n=300)
    ic = InitialConditions(ic.state, jnp.ones(300), ic.model, ic.params, physical_units())
    text = pio.format_summary(ic)
    for word in ("plummer", "N", "300", "Msun", "pc", "virial ratio Q", "physical", "alpha = 2.3"):
        assert word in text
    henon = ic.to_henon()
    text_h = pio.format_summary(henon)
    assert "henon" in text_h
    # Total mass is 1 in Henon units; the physical mass is reported alongside.
    assert "total mass        1 (Henon units)" in text_h or "1 (Henon units)" in text_h
    total = float(jnp.sum(ic.state.masses))
    assert f"{total:.6g} Msun" in text and f"{total:.6g} Msun" in text_h
    line = pio.summary_line(ic)
    assert "\n" not in line and "N = 300" in line


def _changed(ic, weights=None, **params):
    weights = ic.weights if weights is None else weights
    return InitialConditions(ic.state, weights, ic.model, {**ic.params, **params}, ic.units)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda ic: _changed(ic, run_info={"id": 3}), "parameter 'run_info' must be a string or numbers"),
        (lambda ic: _changed(ic, names=["a", "bb"]), "parameter 'names' must be a string or numbers"),
        (lambda ic: _changed(ic, mixed=[1.0, None]), "parameter 'mixed' must be a string or numbers"),
        (lambda ic: _changed(ic, weights=ic.weights[:-1]), r"weights must have shape \(257,\)"),
        (lambda ic: _changed(ic, weights=-ic.weights), "weights must be >= 0"),
    ],
)
def test_what_read_would_refuse_is_not_written(tmp_path, name, change, message):
    # .npz pickled a dict parameter over a good file (read then refused it) and
    # read a list of strings back as one string; mismatched rows and negative
    # weights were written whole and refused only on reading.
    path = tmp_path / name
    pio.write(_make_ic(np.float64), path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=message):
        pio.write(change(_make_ic(np.float64, seed=1)), path)
    assert path.read_bytes() == before
