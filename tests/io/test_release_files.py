"""Files written by progenax 0.1.0 (committed in tests/data/) still read.

0.1.0 stored the model as a name and its parameters; reading rebuilds the model
object from them (`progenax.models.model_from_record`), so a read cluster can
again be asked for its density or relaxed towards its model. The files were
written by `progenax.io.write` of 0.1.0's builders at key 1 (plummer r_h = 0.8,
king W0 = 5, eff gamma = 2.5 r_t = 6, fractal D = 2; 64 stars each).
"""

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from progenax import io as pio
from progenax.models import EFF, King, Plummer, RecordedModel

DATA = pathlib.Path(__file__).parent.parent / "data"
FILES = [
    ("v0.1.0_plummer.h5", Plummer, {"r_h": 0.8}),
    ("v0.1.0_king.npz", King, {"W0": 5.0}),
    ("v0.1.0_eff.h5", EFF, {"gamma": 2.5, "r_t": 6.0}),
    ("v0.1.0_fractal.h5", RecordedModel, {"D": 2.0}),
]


@pytest.mark.parametrize("name, model_type, recorded", FILES)
def test_file_of_release_0_1_0_reads_with_its_model(name, model_type, recorded):
    ic = pio.read(DATA / name)
    assert type(ic.model) is model_type and ic.n == 64
    for key, value in recorded.items():
        assert float(ic.params[key]) == value
    if model_type is RecordedModel:
        assert ic.model.name == "fractal" and float(ic.model.record()["D"]) == 2.0
        with pytest.raises(ValueError, match="no analytic density"):
            ic.model.density(1.0)
        return
    for key, value in recorded.items():
        assert float(getattr(ic.model, key)) == value
    # The model's mass is the cluster's, and its density integrates to it.
    total = float(jnp.sum(ic.state.masses))
    assert float(ic.model.total_mass) == pytest.approx(total, rel=1e-12)
    r = np.geomspace(1e-4, 1e3, 4001)
    rho = np.asarray(ic.model.density(jnp.asarray(r)))
    integral = np.trapezoid(4 * np.pi * r**3 * rho, np.log(r))
    # Trapezoid in ln r on 4,000 cells (and the tabulated King density): 1e-3.
    assert integral == pytest.approx(total, rel=1e-3)
