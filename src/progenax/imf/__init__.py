"""Initial mass functions."""

from .power_law import PowerLawIMF as PowerLawIMF
from .power_law import kroupa as kroupa
from .power_law import salpeter as salpeter

__all__ = ["PowerLawIMF", "kroupa", "salpeter"]
