"""Bayesian inference of cluster parameters with numpyro (unbinned likelihoods, calibration)."""

from .calibration import rank_statistic as rank_statistic
from .calibration import rank_uniformity_test as rank_uniformity_test
from .data import ObservedCluster as ObservedCluster
from .data import observe as observe
from .initialization import init_to_data as init_to_data
from .likelihoods import kroupa_log_likelihood as kroupa_log_likelihood
from .likelihoods import kroupa_logpdf as kroupa_logpdf
from .likelihoods import plummer_position_logpdf as plummer_position_logpdf
from .likelihoods import plummer_projected_logpdf as plummer_projected_logpdf
from .likelihoods import plummer_projected_velocity_logpdf as plummer_projected_velocity_logpdf
from .likelihoods import plummer_velocity_logpdf as plummer_velocity_logpdf
from .plummer import default_priors as default_priors
from .plummer import plummer_log_likelihood as plummer_log_likelihood
from .plummer import plummer_model as plummer_model
from .simulate import simulate_plummer as simulate_plummer

__all__ = [
    # models
    "plummer_model",
    "default_priors",
    "plummer_log_likelihood",
    "init_to_data",
    # data
    "simulate_plummer",
    "ObservedCluster",
    "observe",
    # per-star log-densities
    "kroupa_log_likelihood",
    "kroupa_logpdf",
    "plummer_position_logpdf",
    "plummer_projected_logpdf",
    "plummer_projected_velocity_logpdf",
    "plummer_velocity_logpdf",
    # calibration
    "rank_statistic",
    "rank_uniformity_test",
]
