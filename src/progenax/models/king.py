"""The King (1966) model: the g = 1 lowered isothermal model under its own name.

Everything is `LoweredIsothermal`'s (see `progenax.models.lowered_isothermal`);
this class fixes g = 1, takes no `ra` and records no `g`, as `king_builder` does.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax

from .._types import Array
from ..units import G_PHYSICAL
from ._base import Parameter
from .lowered_isothermal import LoweredIsothermal

AUDIT_POINTS = {"W0": (6.0, (0.5, 15.0)), "r_h": (1.0, (1e-3, 1e3))}


class King(LoweredIsothermal):
    """King (1966): central potential `W0`, 3D half-mass radius `r_h` (pc)."""

    NAME: ClassVar[str] = "king"
    BUILDER: ClassVar[str] = "king_builder"
    # LIMEPY's parameters less g and ra, with audit points; W0's range reaches 15
    # (King's tidal radius stays on the solver grid there, LIMEPY's at large g not).
    PARAMETERS: ClassVar[tuple[Parameter, ...]] = tuple(
        dataclasses.replace(p, audit=AUDIT_POINTS[p.name]) if p.name in AUDIT_POINTS else p
        for p in LoweredIsothermal.PARAMETERS
        if p.name not in ("g", "ra")
    )
    # g enters a compiled builder as an input array, as in 0.1.0 (a constant 1
    # lets XLA fold it and changes the last bits of the output).
    FIXED: ClassVar[dict[str, float]] = {"g": 1.0}

    def __init__(
        self,
        W0=6.0,
        r_h=1.0,
        total_mass=1.0,
        G=G_PHYSICAL,
        *,
        profile_points=1024,
        speed_table_size=128,
        g=1.0,
        solve=True,
    ):
        # g is always 1 (see FIXED); it is an argument only to enter as an array.
        if not isinstance(g, jax.core.Tracer) and float(g) != 1.0:
            raise ValueError(f"King is the g = 1 model; for g = {float(g)} use LoweredIsothermal")
        super().__init__(
            W0,
            g,
            r_h,
            None,
            total_mass,
            G,
            profile_points=profile_points,
            speed_table_size=speed_table_size,
            solve=solve,
        )

    def record(self) -> dict[str, Array]:
        return {k: v for k, v in super().record().items() if k != "g"}
