"""Modifiers of a built particle set: fractal substructure, mass segregation, tidal truncation."""

from . import fractal as fractal
from . import segregation as segregation
from . import tidal as tidal
