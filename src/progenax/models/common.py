"""The parameters every builder takes besides its model's: the IMF slope and Q.

Declared like a model's own (`Parameter`), so that the builders' argument
checks, the command line and the inference priors read one support each.
"""

from __future__ import annotations

from ._base import Interval, Parameter

IMF_SLOPE = Parameter("alpha", Interval(0.0, 10.0), 2.3, "high-mass slope of the Kroupa (2001) IMF")
VIRIAL_RATIO = Parameter("Q", Interval(0.0), 0.5, "virial ratio T/|W| (None: the model's own velocities)")
BUILDER_PARAMETERS: tuple[Parameter, ...] = (IMF_SLOPE, VIRIAL_RATIO)
