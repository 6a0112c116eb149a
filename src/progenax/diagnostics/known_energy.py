"""Potential energies measured already, recalled by the arrays they belong to.

A fractal or gravoturbulent builder scales its velocities with the nested-mesh
W, which takes tens of seconds at a million stars (`progenax.diagnostics.mesh`).
It records that W here against the arrays of the cluster it returns, and the
command line's summary (`progenax.io.summary_figures`) recalls it instead of
summing the same W a second time.

A record is keyed by the identity of the arrays (positions, masses, weights:
JAX arrays are immutable, so the same objects hold the same values) and by the
`potential_energy` method that measured it. It lasts while those arrays live;
a cluster changed in any way has new arrays and is measured again. Only
concrete arrays are recorded, never tracers. Where W was measured before the
positions were moved to the centre of mass, the two differ by round-off (W
does not depend on where the cluster sits).
"""

from __future__ import annotations

import weakref

import jax

from .._types import Array

_RECORDS: dict[int, tuple[tuple[weakref.ref, ...], str, Array]] = {}


def record_potential_energy(positions: Array, masses: Array, weights: Array, method: str, w: Array) -> None:
    """Remember `w`, W of these stars (masses weighted by `weights`) measured by
    `method` ("mesh", say). Tracers are not recorded."""
    arrays = (positions, masses, weights)
    if any(isinstance(a, jax.core.Tracer) or not isinstance(a, jax.Array) for a in (*arrays, w)):
        return
    key = id(arrays[0])

    def forget(_ref, key=key):  # any of the arrays freed: its id may name another array next
        _RECORDS.pop(key, None)

    _RECORDS[key] = (tuple(weakref.ref(a, forget) for a in arrays), method, w)


def recall_potential_energy(positions: Array, masses: Array, weights: Array, method: str) -> Array | None:
    """W recorded for these very arrays (the same objects) and `method`, or None."""
    arrays = (positions, masses, weights)
    record = _RECORDS.get(id(arrays[0]))
    if record is None:
        return None
    refs, recorded_method, w = record
    same = all(ref() is a for ref, a in zip(refs, arrays, strict=True))
    return w if same and recorded_method == method else None
