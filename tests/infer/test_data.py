"""Bad data and bad model arguments raise clear errors before any sampling."""

import jax
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import MCMC, NUTS

from progenax.builders import plummer_builder
from progenax.infer import ObservedCluster, init_to_data, king_model, observe, plummer_model
from progenax.infer.priors import check_prior_supports
from progenax.models import King


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


def test_velocity_errors_must_be_positive_and_finite(arrays):
    x, v, m = arrays
    e = np.full(50, 0.3)
    e[4] = 0.0
    with pytest.raises(ValueError, match=r"velocity_errors must be > 0.*row 4"):
        ObservedCluster(x, v[:, 2], m, e)
    with pytest.raises(ValueError, match=r"velocity_errors must be > 0"):
        ObservedCluster(x, v[:, 2], m, -1.0)
    e[4] = np.nan
    with pytest.raises(ValueError, match=r"velocity_errors must be finite.*row 4"):
        ObservedCluster(x, v[:, 2], m, e)


def test_line_of_sight_velocities(arrays):
    x, v, m = arrays
    data = ObservedCluster(x[:, :2], v[:, 2], m, 0.5)
    assert data.line_of_sight and data.projected and data.velocity_errors.shape == (50,)
    assert not ObservedCluster(x, v, m).line_of_sight
    with pytest.raises(ValueError, match="velocity_errors need line-of-sight velocities"):
        ObservedCluster(x, v, m, 0.5)
    with pytest.raises(ValueError, match=r"velocities must have shape \(50, 3\) \(3D\) or \(50,\)"):
        ObservedCluster(x, v[:, :2], m)
    with pytest.raises(ValueError, match="velocity_errors must be a scalar or have shape"):
        ObservedCluster(x, v[:, 2], m, np.ones(7))


def test_observe_line_of_sight_with_errors():
    ic = plummer_builder(jax.random.PRNGKey(2), n=64)
    data = observe(ic, velocities="los", velocity_error=0.2, key=jax.random.PRNGKey(3))
    assert data.line_of_sight and data.velocities.shape == (64,)
    # The draws are the exact z velocities plus N(0, 0.2^2) noise: their rms
    # over 64 stars is 0.2 within ~ 0.2 / sqrt(2 * 64) ~ 9 % (30 % margin).
    noise = np.asarray(data.velocities) - np.asarray(ic.state.velocities)[:, 2]
    assert abs(np.sqrt(np.mean(noise**2)) / 0.2 - 1.0) < 0.3
    with pytest.raises(ValueError, match="needs a key"):
        observe(ic, velocities="los", velocity_error=0.2)
    with pytest.raises(ValueError, match="velocity_error needs velocities='los'"):
        observe(ic, velocity_error=0.2, key=jax.random.PRNGKey(3))


def test_king_model_refuses_bad_data_before_sampling(arrays):
    from progenax.infer import king_model

    x, v, m = arrays
    with pytest.raises(ValueError, match="Kroupa IMF range"):
        MCMC(NUTS(king_model, init_strategy=init_to_data()), num_warmup=2, num_samples=2, progress_bar=False).run(
            jax.random.PRNGKey(0), ObservedCluster(x, v, m * 200)
        )
    with pytest.raises(NotImplementedError, match="3D positions"):
        MCMC(NUTS(king_model, init_strategy=init_to_data()), num_warmup=2, num_samples=2, progress_bar=False).run(
            jax.random.PRNGKey(0), ObservedCluster(x[:, :2], v, m)
        )


@pytest.mark.parametrize(
    "name, prior, support",
    [
        ("r_h", dist.Normal(1.0, 0.5), r"\(0, inf\)"),
        ("Q", dist.Uniform(-0.5, 1.0), r"\(0, inf\)"),
        ("alpha", dist.Uniform(1.0, 12.0), r"\(0, 10\)"),
    ],
)
def test_priors_outside_the_declared_support_are_refused(arrays, name, prior, support):
    # The supports come from the declarations (Plummer.PARAMETERS and
    # progenax.models.BUILDER_PARAMETERS), not from a copy in progenax.infer.
    x, v, m = arrays
    with pytest.raises(
        ValueError,
        match=rf"priors\['{name}'\] has support .* outside the plummer model's {name} "
        rf"support {support}",
    ):
        _run(ObservedCluster(x, v, m), priors={name: prior})


def test_king_prior_on_W0_must_stay_inside_the_solvable_range(arrays):
    x, v, m = arrays
    W0_support = next(p.support for p in King.PARAMETERS if p.name == "W0")
    too_wide = dist.Uniform(1.0, W0_support.upper + 5.0)
    with pytest.raises(ValueError, match=r"priors\['W0'\] has support \[1, 25\], outside the king model's W0"):
        handlers.seed(king_model, 0)(ObservedCluster(x, v, m), priors={"W0": too_wide})
    # A prior inside the support passes the check (a truncated normal on r_h too).
    check_prior_supports(
        {"W0": dist.Uniform(1.0, W0_support.upper), "r_h": dist.TruncatedNormal(1.0, 1.0, low=0.0)}, King
    )
