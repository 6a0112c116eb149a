"""The King (1966) model: the g = 1 lowered isothermal model under its own name.

Everything is `LoweredIsothermal`'s (see `progenax.models.lowered_isothermal`);
this class fixes g = 1, takes no `ra` and records no `g`, as `king_builder` does.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
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

    g: float = eqx.field(static=True)
    """Always 1, held static: every P(a, x) of the model then takes its closed
    form (`progenax.kinematics.king_df.regularized_lower_gamma`), which compiles
    in a fraction of `gammainc`'s time."""

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
        # g is always 1; the argument is kept for callers that name it.
        if isinstance(g, jax.core.Tracer) or float(g) != 1.0:
            raise ValueError(
                f"King is the g = 1 model (a static 1); for any other g use LoweredIsothermal, got g = {g}"
            )
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

    @staticmethod
    def held_g(g, dtype):
        return 1.0

    def record(self) -> dict[str, Array]:
        return {k: v for k, v in super().record().items() if k != "g"}
