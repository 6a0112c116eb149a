"""Bayesian inference of cluster parameters with numpyro (unbinned and mock likelihoods, calibration)."""

from .arviz import pair_plot as pair_plot
from .arviz import posterior_summary as posterior_summary
from .arviz import sbc_rank_plot as sbc_rank_plot
from .arviz import to_inference_data as to_inference_data
from .arviz import write_posterior as write_posterior
from .calibration import rank_statistic as rank_statistic
from .calibration import rank_uniformity_test as rank_uniformity_test
from .data import ObservedCluster as ObservedCluster
from .data import observe as observe
from .diagnostics import bulk_ess as bulk_ess
from .diagnostics import print_recovery as print_recovery
from .diagnostics import recovery_table as recovery_table
from .diagnostics import split_r_hat as split_r_hat
from .fit import FIT_MODELS as FIT_MODELS
from .fit import fit_catalogue as fit_catalogue
from .initialization import init_to_data as init_to_data
from .king import king_default_priors as king_default_priors
from .king import king_log_likelihood as king_log_likelihood
from .king import king_model as king_model
from .likelihoods import kroupa_log_likelihood as kroupa_log_likelihood
from .likelihoods import kroupa_logpdf as kroupa_logpdf
from .likelihoods import plummer_position_logpdf as plummer_position_logpdf
from .likelihoods import plummer_projected_logpdf as plummer_projected_logpdf
from .likelihoods import plummer_projected_velocity_logpdf as plummer_projected_velocity_logpdf
from .likelihoods import plummer_velocity_logpdf as plummer_velocity_logpdf
from .los import king_los_logpdf as king_los_logpdf
from .los import plummer_los_error_logpdf as plummer_los_error_logpdf
from .los import plummer_los_logpdf as plummer_los_logpdf
from .los import plummer_projected_los_logpdf as plummer_projected_los_logpdf
from .mock import MockLikelihood as MockLikelihood
from .mock import mock_likelihood as mock_likelihood
from .mock import mock_log_likelihood as mock_log_likelihood
from .mock import model_summaries as model_summaries
from .plummer import default_priors as default_priors
from .plummer import plummer_log_likelihood as plummer_log_likelihood
from .plummer import plummer_model as plummer_model
from .simulate import simulate_king as simulate_king
from .simulate import simulate_model as simulate_model
from .simulate import simulate_plummer as simulate_plummer

__all__ = [
    # fitting a catalogue
    "FIT_MODELS",
    "fit_catalogue",
    # ArviZ
    "pair_plot",
    "sbc_rank_plot",
    "posterior_summary",
    "to_inference_data",
    "write_posterior",
    # models
    "plummer_model",
    "king_model",
    "default_priors",
    "king_default_priors",
    "plummer_log_likelihood",
    "king_log_likelihood",
    "init_to_data",
    # mock (synthetic) likelihood
    "MockLikelihood",
    "mock_likelihood",
    "mock_log_likelihood",
    "model_summaries",
    # data
    "simulate_plummer",
    "simulate_king",
    "simulate_model",
    "ObservedCluster",
    "observe",
    # per-star log-densities
    "kroupa_log_likelihood",
    "kroupa_logpdf",
    "plummer_position_logpdf",
    "plummer_projected_logpdf",
    "plummer_projected_velocity_logpdf",
    "plummer_velocity_logpdf",
    "plummer_los_logpdf",
    "plummer_los_error_logpdf",
    "plummer_projected_los_logpdf",
    "king_los_logpdf",
    # calibration
    "rank_statistic",
    "rank_uniformity_test",
    # convergence and recovery
    "bulk_ess",
    "split_r_hat",
    "recovery_table",
    "print_recovery",
]
