"""Bad data and bad model arguments raise clear errors before any sampling."""

import jax
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

from progenax.infer import ObservedCluster, init_to_data, observe, plummer_model
from progenax.builders import plummer_builder


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(0)
    return rng.normal(size=(50, 3)), rng.normal(size=(50, 3)), rng.uniform(0.1, 2.0, size=50)


def _run(data, **kwargs):
    mcmc = MCMC(NUTS(plummer_model, init_strategy=init_to_data()), num_warmup=2, num_samples=2, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), data, **kwargs)


def test_nan_positions(arrays):
    x, v, m = arrays
    x = x.copy()
    x[7, 1] = np.nan
    with pytest.raises(ValueError, match=r"positions must be finite.*row 7"):
        ObservedCluster(x, v, m)


def test_negative_masses(arrays):
    x, v, m = arrays
    m = m.copy()
    m[3] = -1.0
    with pytest.raises(ValueError, match=r"masses must be > 0.*row 3"):
        ObservedCluster(x, v, m)


def test_empty_data():
    with pytest.raises(ValueError, match="no stars"):
        ObservedCluster(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0))


def test_mismatched_shapes(arrays):
    x, v, m = arrays
    with pytest.raises(ValueError, match=r"velocities must have shape \(50, 3\)"):
        ObservedCluster(x, v[:10], m)
    with pytest.raises(ValueError, match=r"positions must have shape"):
        ObservedCluster(x[:, :1], v, m)


def test_model_argument_errors(arrays):
    x, v, m = arrays
    data = ObservedCluster(x, v, m)
    with pytest.raises(ValueError, match="likelihood must be one of"):
        _run(data, likelihood="binned")
    with pytest.raises(ValueError, match="priors may only name"):
        _run(data, priors={"W0": dist.Uniform(1, 9)})
    with pytest.raises(ValueError, match="must be a numpyro Distribution"):
        _run(data, priors={"r_h": 1.0})
    with pytest.raises(ValueError, match="data must be an ObservedCluster"):
        _run({"positions": x})
    with pytest.raises(ValueError, match="Kroupa IMF range"):
        _run(ObservedCluster(x, v, m * 200))
    with pytest.raises(ValueError, match="total_mass is required"):
        _run(ObservedCluster(x, v, None))


def test_observe_builds_consistent_data():
    ic = plummer_builder(jax.random.PRNGKey(1), n=64)
    data = observe(ic, projected=True)
    assert data.projected and data.positions.shape == (64, 2)
    assert data.velocities.shape == (64, 3) and data.masses.shape == (64,)
    np.testing.assert_array_equal(np.asarray(data.positions), np.asarray(ic.state.positions)[:, :2])


def test_data_derived_start_has_finite_likelihood():
    """The start `init_to_data` uses is inside every star's edge speed, even far from the prior's centre."""
    from progenax.infer import plummer_log_likelihood, simulate_plummer
    from progenax.infer.initialization import plummer_initial_values
    from progenax.units import G_PHYSICAL

    for r_h, Q in [(0.15, 0.22), (6.0, 0.95)]:
        data = simulate_plummer(5, n=300, r_h=r_h, alpha=2.0, Q=Q)
        start = plummer_initial_values(data, None, G_PHYSICAL)
        log_l = plummer_log_likelihood(
            data, start["r_h"], 2.0, start["Q"], centre=start["centre"], bulk_velocity=start["bulk_velocity"]
        )
        assert np.isfinite(float(log_l))
        # The median radius estimates r_h to ~ a few 1/sqrt(300) ~ 6 % (20 % margin).
        assert abs(float(start["r_h"]) / r_h - 1.0) < 0.2
