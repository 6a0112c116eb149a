"""Cluster models: one model per file, each an `AbstractClusterModel`.

A model knows its density, enclosed mass, potential, how to sample radii and
velocities, and declares its parameters' supports (`PARAMETERS`). Builders, the
command line, relaxation, the quick-look plot, the audit and the inference all
ask the model; see `docs/architecture.md` for how to add one.
"""

from . import eddington as eddington
from . import osipkov_merritt as osipkov_merritt
from ._base import REGISTRY as REGISTRY
from ._base import AbstractClusterModel as AbstractClusterModel
from ._base import Interval as Interval
from ._base import NoAnalyticFormError as NoAnalyticFormError
from ._base import Parameter as Parameter
from ._base import RecordedModel as RecordedModel
from ._base import as_model as as_model
from ._base import density_at as density_at
from ._base import is_spherical as is_spherical
from ._base import model_from_record as model_from_record
from ._base import prepared_density as prepared_density
from .common import BUILDER_PARAMETERS as BUILDER_PARAMETERS
from .dehnen import Dehnen as Dehnen
from .eff import EFF as EFF
from .king import King as King
from .lowered_isothermal import LoweredIsothermal as LoweredIsothermal
from .plummer import Plummer as Plummer

__all__ = [
    "BUILDER_PARAMETERS",
    "REGISTRY",
    "is_spherical",
    "AbstractClusterModel",
    "Dehnen",
    "EFF",
    "King",
    "Interval",
    "LoweredIsothermal",
    "NoAnalyticFormError",
    "Parameter",
    "Plummer",
    "RecordedModel",
    "as_model",
    "density_at",
    "model_from_record",
]
