"""A minimal stand-in for AMUSE, so the AMUSE writer is tested where AMUSE is not installed.

It copies the parts of AMUSE's API that `progenax.io.amuse` calls, with AMUSE's
behaviour where it matters:

- `amuse.units.units.MSun`, `.parsec`, `.kms` (SI) and `amuse.units.nbody_system`
  `.mass`, `.length`, `.speed`; `array | unit` makes a quantity (units set
  `__array_ufunc__ = None`, so numpy hands `|` to the unit, as in AMUSE);
  `quantity.number`, `.unit`, `.value_in(unit)` (an error between N-body and SI
  units, or between different dimensions); `unit ** 2`;
  `nbody_system.is_nbody_unit(unit)`.
- `amuse.datamodel.Particles(n)`: attributes are quantities of shape (n,);
  `position` / `velocity` (n, 3) are stored as x, y, z / vx, vy, vz, in float64;
  `collection_attributes`; `get_attribute_names_defined_in_store()`.
- `amuse.io.write_set_to_file(set, path, "amuse", overwrite_file=...)` refuses
  an existing file unless `overwrite_file=True`; it stores each unit with 12
  significant digits, as AMUSE's HDF5 files do (parsec comes back 5e-13 off);
  `amuse.io.read_set_from_file(path, "amuse")`.
"""

import json
import os
import sys
import types

import numpy as np
import pytest


class FakeUnit:
    __array_ufunc__ = None  # `ndarray | unit` -> unit.__ror__, as with AMUSE's units

    def __init__(self, system, dims, factor, name):
        self.system, self.dims, self.factor, self.name = system, tuple(sorted(dims)), float(factor), name

    def __ror__(self, number):
        return FakeQuantity(np.asarray(number), self)

    def __pow__(self, k):
        return FakeUnit(self.system, [(d, p * k) for d, p in self.dims], self.factor**k, f"{self.name}**{k}")

    def __repr__(self):
        return f"unit<{self.name}>"


class FakeQuantity:
    def __init__(self, number, unit):
        self.number, self.unit = number, unit

    def value_in(self, unit):
        if unit.system != self.unit.system or unit.dims != self.unit.dims:
            raise TypeError(f"incompatible units {self.unit} and {unit}")
        return self.number * (self.unit.factor / unit.factor)


_SI = {
    "MSun": FakeUnit("si", [("mass", 1)], 1.98892e30, "MSun"),
    "parsec": FakeUnit("si", [("length", 1)], 3.0856775814913673e16, "parsec"),
    "kms": FakeUnit("si", [("length", 1), ("time", -1)], 1e3, "kms"),
}
_NBODY = {
    "mass": FakeUnit("nbody", [("mass", 1)], 1.0, "mass"),
    "length": FakeUnit("nbody", [("length", 1)], 1.0, "length"),
    "speed": FakeUnit("nbody", [("length", 1), ("time", -1)], 1.0, "speed"),
}
_VECTORS = {"position": ("x", "y", "z"), "velocity": ("vx", "vy", "vz")}


class FakeParticles:
    def __init__(self, n):
        object.__setattr__(self, "_n", int(n))
        object.__setattr__(self, "_attrs", {})
        object.__setattr__(self, "collection_attributes", types.SimpleNamespace())

    def __len__(self):
        return self._n

    def __setattr__(self, name, value):
        if not isinstance(value, FakeQuantity):
            raise TypeError(f"fake AMUSE: give {name} with a unit (array | unit)")
        number = np.asarray(value.number, dtype=np.float64)
        if name in _VECTORS:
            if number.shape != (self._n, 3):
                raise ValueError(f"{name} must have shape ({self._n}, 3), got {number.shape}")
            for k, component in enumerate(_VECTORS[name]):
                self._attrs[component] = FakeQuantity(number[:, k].copy(), value.unit)
        else:
            if number.shape != (self._n,):
                raise ValueError(f"{name} must have shape ({self._n},), got {number.shape}")
            self._attrs[name] = FakeQuantity(number, value.unit)

    def __getattr__(self, name):
        attrs = object.__getattribute__(self, "_attrs")
        if name in _VECTORS:
            parts = [attrs[c] for c in _VECTORS[name]]
            return FakeQuantity(np.stack([p.number for p in parts], axis=-1), parts[0].unit)
        if name in attrs:
            return attrs[name]
        raise AttributeError(name)

    def get_attribute_names_defined_in_store(self):
        return sorted(self._attrs)


def _write_set_to_file(particles, filename, format="amuse", **options):
    assert format == "amuse", format
    if os.path.exists(filename) and not options.get("overwrite_file", False):
        raise OSError(f"fake AMUSE: {filename!r} exists; pass overwrite_file=True")
    content = {}
    units = {}
    for name, q in particles._attrs.items():
        content[name] = q.number
        # AMUSE writes the unit as text, "%.12g"-style.
        units[name] = [q.unit.system, q.unit.dims, float(f"{q.unit.factor:.12g}"), q.unit.name]
    meta = {"n": len(particles), "units": units, "collection": vars(particles.collection_attributes)}
    with open(filename, "wb") as f:
        np.savez(f, __meta__=np.asarray(json.dumps(meta)), **content)


def _read_set_from_file(filename, format="amuse", **options):
    assert format == "amuse", format
    if not os.path.exists(filename):
        raise OSError(f"Error: file {filename!r} does not exist.")
    with np.load(filename) as data:
        meta = json.loads(str(data["__meta__"]))
        particles = FakeParticles(meta["n"])
        for name, (system, dims, factor, label) in meta["units"].items():
            unit = FakeUnit(system, [tuple(d) for d in dims], factor, label)
            particles._attrs[name] = FakeQuantity(data[name], unit)
    for name, value in meta["collection"].items():
        setattr(particles.collection_attributes, name, value)
    return particles


def _fake_amuse_modules():
    amuse = types.ModuleType("amuse")
    units_pkg = types.ModuleType("amuse.units")
    units = types.ModuleType("amuse.units.units")
    for name, unit in _SI.items():
        setattr(units, name, unit)
    nbody_system = types.ModuleType("amuse.units.nbody_system")
    for name, unit in _NBODY.items():
        setattr(nbody_system, name, unit)
    nbody_system.is_nbody_unit = lambda unit: unit.system == "nbody"
    units_pkg.units, units_pkg.nbody_system = units, nbody_system
    datamodel = types.ModuleType("amuse.datamodel")
    datamodel.Particles = FakeParticles
    io = types.ModuleType("amuse.io")
    io.write_set_to_file, io.read_set_from_file = _write_set_to_file, _read_set_from_file
    amuse.units, amuse.datamodel, amuse.io = units_pkg, datamodel, io
    return {
        "amuse": amuse,
        "amuse.units": units_pkg,
        "amuse.units.units": units,
        "amuse.units.nbody_system": nbody_system,
        "amuse.datamodel": datamodel,
        "amuse.io": io,
    }


AMUSE_MODULES = tuple(_fake_amuse_modules())


@pytest.fixture
def fake_amuse(monkeypatch):
    """Install the fake `amuse` package in sys.modules for one test; returns its modules."""
    modules = _fake_amuse_modules()
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules


@pytest.fixture
def no_amuse(monkeypatch):
    """Make `import amuse...` fail for one test, whether or not AMUSE is installed."""
    for name in AMUSE_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
