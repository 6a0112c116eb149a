r"""Gravoturbulent initial conditions (**experimental**): turbulent gas and the stars it forms.

The log-density $s = \ln(\rho/\rho_0)$ of a supersonic turbulent cloud on a
periodic grid follows the lognormal + power-law PDF of Burkhart (2018) and
Burkhart & Mocz (2019), imposed on a Gaussian random field by a rank copula; the
velocity field is Gaussian with a Burgers-like spectrum and a solenoidal /
compressive mix set by the forcing parameter b.

- `cloud_builder`: SPH gas particles (`GasCloud`), writable as Gadget/SWIFT `PartType0`.
- `star_builder`: n stars where s exceeds the transition s_t (soft threshold of width 1/kappa).
- `dense_gas_fraction`: the gas mass fraction above s_t, smooth in the parameters.
- `PiecewiseLogDensityPDF`, `gaussian_random_field`, `velocity_field`: the pieces.

The API and the models may change between releases.
"""

from .builders import cloud_builder as cloud_builder
from .builders import star_builder as star_builder
from .builders import star_formation_weights as star_formation_weights
from .builders import turbulent_field as turbulent_field
from .cloud import GasCloud as GasCloud
from .cloud import TurbulentField as TurbulentField
from .cloud import dense_gas_fraction as dense_gas_fraction
from .field import gaussian_random_field as gaussian_random_field
from .field import shell_power_spectrum as shell_power_spectrum
from .field import spectral_slope as spectral_slope
from .measure import lognormal_variance_fit as lognormal_variance_fit
from .measure import tail_slope_fit as tail_slope_fit
from .measure import volume_mean_density as volume_mean_density
from .pdf import PiecewiseLogDensityPDF as PiecewiseLogDensityPDF
from .pdf import log_density_variance as log_density_variance
from .velocity import compressive_fraction as compressive_fraction
from .velocity import velocity_field as velocity_field

__all__ = [
    # builders
    "cloud_builder",
    "star_builder",
    # containers
    "GasCloud",
    "TurbulentField",
    # pieces
    "PiecewiseLogDensityPDF",
    "compressive_fraction",
    "dense_gas_fraction",
    "gaussian_random_field",
    "log_density_variance",
    "star_formation_weights",
    "turbulent_field",
    "velocity_field",
    # measurements
    "lognormal_variance_fit",
    "shell_power_spectrum",
    "spectral_slope",
    "tail_slope_fit",
    "volume_mean_density",
]
