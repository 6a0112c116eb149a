"""`fractal_builder(profile="box")`: the pure box fractal (McLuster's -P -1)."""

import jax
import numpy as np
import pytest

from progenax import fractal_builder
from progenax.diagnostics import half_mass_radius

N = 300


@pytest.mark.parametrize("D", [3.0, 1.6])  # D is traced: one compile serves both
def test_box_profile_keeps_the_fractal_radii_scaled_to_r_h(D):
    ic = fractal_builder(jax.random.PRNGKey(0), n=N, D=D, r_h=2.0, profile="box")
    x, m = np.asarray(ic.state.positions), np.asarray(ic.state.masses)
    # The scale is set by the same half-mass radius, about the centre of mass: exact.
    np.testing.assert_allclose(float(half_mass_radius(x, m)), 2.0, rtol=1e-10)
    r = np.linalg.norm(x - (m[:, None] * x).sum(0) / m.sum(), axis=1)
    if D == 3.0:
        # A uniform ball has r_max / r_h = 2^(1/3) = 1.26; the sampled r_h of N = 300
        # stars is uncertain by a few per cent, 1.5 leaves room for it (a Plummer
        # sphere of 300 stars reaches several r_h).
        assert r.max() / 2.0 < 1.5
    assert np.isfinite(np.asarray(ic.state.velocities)).all()


def test_unknown_profile_names_the_argument():
    with pytest.raises(ValueError, match="profile must be one of"):
        fractal_builder(0, n=10, profile="sphere")
