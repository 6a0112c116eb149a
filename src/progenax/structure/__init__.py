"""Modifiers of a built particle set: fractal substructure, mass segregation, rotation, tidal truncation."""

from . import fractal as fractal
from . import rotation as rotation
from . import segregation as segregation
from . import tidal as tidal
