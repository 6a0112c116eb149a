"""Initial mass functions: multi-segment power laws (Kroupa, Salpeter, any
slopes and breaks), Chabrier's (2003) log-normal, and the environment-dependent
IMF of Marks et al. (2012). Each has `pdf`, `cdf`, `icdf`, `sample`,
`mean_mass` and `record`; `IMF` is the type a builder's `imf=` accepts."""

from .chabrier import ChabrierIMF as ChabrierIMF
from .chabrier import chabrier as chabrier
from .environment import marks_alpha3 as marks_alpha3
from .environment import marks_imf as marks_imf
from .environment import marks_x as marks_x
from .power_law import PowerLawIMF as PowerLawIMF
from .power_law import kroupa as kroupa
from .power_law import salpeter as salpeter

IMF = (PowerLawIMF, ChabrierIMF)
"""The IMF classes (for `isinstance`): what a builder's `imf=` takes besides a name."""

__all__ = [
    "IMF",
    "ChabrierIMF",
    "PowerLawIMF",
    "chabrier",
    "kroupa",
    "marks_alpha3",
    "marks_imf",
    "marks_x",
    "salpeter",
]
