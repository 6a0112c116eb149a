"""Cluster builders: a few lines each that compose a model, an IMF and modifiers.

`_common.py` holds what every builder shares (key, n, IMF, segregation, the
centre-of-mass and virial finish); `spherical.py` draws any registered model
(`model_builder`); one file per family composes it.
"""

from .eff import eff_builder as eff_builder
from .fractal import fractal_builder as fractal_builder
from .lowered_isothermal import king_builder as king_builder
from .lowered_isothermal import limepy_builder as limepy_builder
from .plummer import plummer_builder as plummer_builder
from .spherical import model_builder as model_builder

__all__ = ["eff_builder", "fractal_builder", "king_builder", "limepy_builder", "model_builder", "plummer_builder"]
