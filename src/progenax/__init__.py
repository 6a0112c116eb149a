"""progenax: differentiable star-cluster initial conditions in JAX."""

# First: glibc then keeps freed memory, and XLA's temporaries reuse their pages (`_allocator`).
from . import _allocator as _allocator  # isort: skip
from . import audit as audit
from . import binaries as binaries
from . import diagnostics as diagnostics
from . import gravoturb as gravoturb
from . import imf as imf
from . import io as io
from . import models as models
from . import sampling as sampling
from . import sph as sph
from . import structure as structure
from ._version import __version__ as __version__
from .binaries import BinaryPopulation as BinaryPopulation
from .binaries import solve_kepler as solve_kepler
from .builders import eff_builder as eff_builder
from .builders import fractal_builder as fractal_builder
from .builders import king_builder as king_builder
from .builders import limepy_builder as limepy_builder
from .builders import model_builder as model_builder
from .builders import plummer_builder as plummer_builder
from .profiles.king import KingProfile as KingProfile
from .profiles.king import MultiMassKingProfile as MultiMassKingProfile
from .profiles.king import solve_king_profile as solve_king_profile
from .profiles.king import solve_multimass_king_profile as solve_multimass_king_profile
from .sph.relax import relax as relax
from .state import InitialConditions as InitialConditions
from .state import ParticleState as ParticleState
from .structure import segregation as segregation
from .structure import tidal as tidal
from .structure.tidal import apply_tidal_truncation as apply_tidal_truncation
from .structure.tidal import jacobi_radius_flat_rotation as jacobi_radius_flat_rotation
from .structure.tidal import jacobi_radius_point_mass as jacobi_radius_point_mass
from .units import G_PHYSICAL as G_PHYSICAL
from .units import Units as Units
from .units import henon_units as henon_units
from .units import physical_units as physical_units

__all__ = [
    # builders
    "eff_builder",
    "fractal_builder",
    "king_builder",
    "limepy_builder",
    "model_builder",
    "plummer_builder",
    # profiles
    "KingProfile",
    "MultiMassKingProfile",
    "solve_king_profile",
    "solve_multimass_king_profile",
    # modifiers
    "apply_tidal_truncation",
    "relax",
    "jacobi_radius_flat_rotation",
    "jacobi_radius_point_mass",
    # binaries
    "BinaryPopulation",
    "solve_kepler",
    # containers
    "InitialConditions",
    "ParticleState",
    # units
    "G_PHYSICAL",
    "Units",
    "henon_units",
    "physical_units",
    # submodules
    "audit",
    "binaries",
    "diagnostics",
    "gravoturb",
    "imf",
    "io",
    "models",
    "sampling",
    "segregation",
    "sph",
    "structure",
    "tidal",
]
