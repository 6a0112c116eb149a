"""Initial mass functions."""

from .environment import marks_alpha3 as marks_alpha3
from .environment import marks_imf as marks_imf
from .environment import marks_x as marks_x
from .power_law import PowerLawIMF as PowerLawIMF
from .power_law import kroupa as kroupa
from .power_law import salpeter as salpeter

__all__ = ["PowerLawIMF", "kroupa", "marks_alpha3", "marks_imf", "marks_x", "salpeter"]
