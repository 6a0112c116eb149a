"""The mock (synthetic) likelihood: set-up checks, finite values and gradients through builder + SPH."""

import jax
import numpy as np
import pytest

from progenax.infer import mock_likelihood, mock_log_likelihood, model_summaries, plummer_model, simulate_plummer
from progenax.infer.mock import data_summaries

SMALL = dict(n_model=200, n_sph=100, n_probes=64, num_covariance=40)


@pytest.fixture(scope="module")
def data():
    return simulate_plummer(21, n=400, r_h=1.0, alpha=2.3, Q=0.5)


# Building a MockLikelihood runs `num_covariance` simulations and compiles the
# builder + SPH forward model (about a minute on 2 cores): slow tests.
@pytest.fixture(scope="module")
def mock(data):
    return mock_likelihood(data, "plummer", key=3, **SMALL)


@pytest.mark.slow
def test_set_up(mock, data):
    # 4 density groups + 4 velocity bins + 4 mass bins.
    assert mock.observed.shape == (12,) and mock.precision_cholesky.shape == (12, 12)
    assert np.all(np.isfinite(np.asarray(mock.precision_cholesky)))
    assert set(mock.fiducial) == {"r_h", "alpha", "Q"}
    # The fiducial point is data-derived: within 20 % of the truth for 400 stars
    # (median radius ~ 1/sqrt(400) = 5 % noise, Q's moment estimate ~ 7 %).
    for name, truth in {"r_h": 1.0, "alpha": 2.3, "Q": 0.5}.items():
        assert abs(float(mock.fiducial[name]) / truth - 1.0) < 0.2, name


@pytest.mark.slow
def test_summaries_of_the_same_data_agree(mock, data):
    """The data's summaries are a deterministic function of the data (same probes each time)."""
    t, probes, group = data_summaries(mock, data, SMALL["n_probes"])
    np.testing.assert_allclose(np.asarray(t), np.asarray(mock.observed), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(probes), np.asarray(mock.probes))


@pytest.mark.slow
def test_gradient_flows_through_builder_and_sph(mock):
    """Autodiff of the synthetic log-likelihood against central differences.

    With common random numbers the summaries are smooth in theta. Rounding in a
    central difference with h = 1e-5 is ~ eps |f| / h ~ 1e-10, truncation
    ~ h^2 |f'''| ~ 1e-8 for |f'''| ~ 100: 1e-5 relative (to the largest
    component) leaves a wide margin.
    """
    keys = ("r_h", "alpha", "Q")
    theta0 = np.array([1.05, 2.25, 0.52])

    def f(p):
        return mock_log_likelihood(mock, dict(zip(keys, p)))

    f = jax.jit(f)
    grad = np.asarray(jax.grad(f)(theta0))
    h = 1e-5
    fd = np.array([(f(theta0 + h * e) - f(theta0 - h * e)) / (2 * h) for e in np.eye(3)])
    assert np.all(np.isfinite(grad)) and np.all(grad != 0)
    np.testing.assert_allclose(grad, fd, atol=1e-5 * np.max(np.abs(fd)), rtol=1e-4)


@pytest.mark.slow
def test_bad_parameters_give_minus_infinity(mock):
    theta = {"r_h": np.nan, "alpha": 2.3, "Q": 0.5}
    assert np.isneginf(float(mock_log_likelihood(mock, theta)))


@pytest.mark.slow
def test_model_summaries_depend_on_each_parameter(mock):
    base = np.asarray(model_summaries(mock, dict(mock.fiducial)))
    for name in ("r_h", "alpha", "Q"):
        moved = dict(mock.fiducial)
        moved[name] = moved[name] * 1.1
        assert np.max(np.abs(np.asarray(model_summaries(mock, moved)) - base)) > 1e-3, name


def test_argument_errors(data):
    """Checked before any simulation or compilation (fast)."""
    with pytest.raises(ValueError, match="model must be one of"):
        mock_likelihood(data, "no-such-model", key=0)
    with pytest.raises(ValueError, match="n_sph must be <= n_model"):
        mock_likelihood(data, key=0, n_model=100, n_sph=200)
    with pytest.raises(ValueError, match="num_covariance"):
        mock_likelihood(data, key=0, num_covariance=3)
    from numpyro.infer.util import initialize_model

    with pytest.raises(ValueError, match="likelihood='mock' needs"):
        initialize_model(jax.random.PRNGKey(0), plummer_model, model_args=(data,), model_kwargs={"likelihood": "mock"})


@pytest.mark.slow
def test_mock_is_tied_to_its_model(data, mock):
    from numpyro.infer.util import initialize_model

    from progenax.infer import king_model

    with pytest.raises(ValueError, match="built for model 'plummer'"):
        initialize_model(jax.random.PRNGKey(0), king_model, model_args=(data,), model_kwargs={"likelihood": mock})


@pytest.mark.slow
def test_default_soft_bins_give_one_maximum_along_r_h():
    """Regression for the bimodal r_h posterior of the Plummer mock example.

    On the example's data (N = 2,000, seed 0, model key 2, default sizes), the
    mock log-likelihood along r_h at alpha = 2.28, Q = 0.56 had two local
    maxima (0.95 and 1.15) with soft-bin edges of width 0.05: single model
    stars crossing bin edges. With the default width it has one. The scan's
    step, 0.01 pc, is below the 0.2 pc separation of the old maxima.
    """
    import jax.numpy as jnp

    data = simulate_plummer(jax.random.PRNGKey(0), n=2000, r_h=1.0, alpha=2.3, Q=0.5)
    spec = mock_likelihood(data, "plummer", key=2, n_model=1000, n_sph=500, n_probes=256)
    log_l = jax.jit(lambda r: mock_log_likelihood(spec, {"r_h": r, "alpha": jnp.asarray(2.28), "Q": jnp.asarray(0.56)}))
    values = np.array([float(log_l(jnp.asarray(r))) for r in np.linspace(0.85, 1.25, 41)])
    interior_maxima = (values[1:-1] > values[:-2]) & (values[1:-1] > values[2:])
    assert int(np.sum(interior_maxima)) == 1, values
