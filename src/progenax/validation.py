"""Argument checks: static ones raise ValueError eagerly, traced ones use error_if.

A traced value (under jit or grad) cannot be inspected in Python, so its check is
compiled into the graph with `equinox.error_if`, which raises at run time with the
same message. Concrete values are checked eagerly before any tracing.

Every range check also refuses non-finite values: NaN, and +-inf even where the
range is open-ended (an infinite radius or virial ratio has no cluster). An
optional parameter that is absent is None, never inf. Under eager `jax.grad` /
`jacfwd` the value is a differentiation tracer whose comparison with the bounds
is still concrete: the check raises `ValueError` at once, naming the argument
and the primal value.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array, ArrayLike


def check_count(name: str, value: int, lowest: int = 1, why: str = "") -> int:
    """A static particle count: a Python int >= `lowest` (`why` says what needs it)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a positive int (static), got {value!r}")
    if value < lowest:
        raise ValueError(f"{name} must be >= {lowest}{f' {why}' if why else ''}, got {value}")
    return int(value)


def check_static_int(name: str, value: int, lowest: int) -> int:
    """A static integer setting (grid size, iteration count): a Python int >= `lowest`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lowest:
        raise ValueError(f"{name} must be an int >= {lowest} (static), got {value!r}")
    return int(value)


def _is_concrete(x: Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _shown(x: Array) -> str:
    """The value for a message: a differentiation tracer (eager `grad`, `jacfwd`)
    shows its primal; any other tracer cannot be shown (never `np.asarray` it)."""
    while isinstance(x, jax.core.Tracer) and hasattr(x, "primal"):
        x = x.primal
    return str(np.asarray(x)) if _is_concrete(x) else "a traced value"


def check_finite(name: str, value: ArrayLike) -> None:
    """Refuse a concrete array that holds NaN or inf (`ValueError` naming it and
    the first bad row); a traced one is not checked here."""
    if not _is_concrete(value):
        return
    x = np.asarray(value)
    if x.dtype.kind not in "fc":
        return
    bad = ~np.isfinite(x)
    if bad.any() and x.ndim == 0:
        raise ValueError(f"{name} must be finite, got {x}")
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise ValueError(
            f"{name} must be finite: {rows.size} of {x.shape[0]} row(s) hold NaN or inf (first at row {rows[0]})"
        )


def check_range(
    name: str,
    value: ArrayLike,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = False,
    upper_inclusive: bool = False,
    note: str = "",
) -> Array:
    """Check a (possibly traced) parameter lies in its allowed range and is finite.

    Returns the value as a float array; under jit the check runs at execution.
    `note` is appended to the message (e.g. what None means for an optional one).
    """
    x = jnp.asarray(value, dtype=jnp.result_type(float))
    bad, message = _range_violation(name, x, lower, upper, lower_inclusive, upper_inclusive)
    # Test `bad`, not `x`: under jit a closed-over constant `x` is concrete while
    # the comparison built from it is traced (and under eager grad `x` is a
    # tracer while `bad` is concrete).
    if _is_concrete(bad):
        if bool(jnp.any(bad)):
            raise ValueError(f"{message}, got {_shown(x)}{note}")
        return x
    return eqx.error_if(x, jnp.any(bad), message + note)


def _range_violation(
    name: str,
    x: Array,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = False,
    upper_inclusive: bool = False,
) -> tuple[Array, str]:
    """Elementwise 'out of range or not finite' and the message naming the range."""
    bad = ~jnp.isfinite(x)
    parts = []
    if lower is not None:
        bad = bad | ((x < lower) if lower_inclusive else (x <= lower))
        parts.append(f"{'>=' if lower_inclusive else '>'} {lower}")
    if upper is not None:
        bad = bad | ((x > upper) if upper_inclusive else (x >= upper))
        parts.append(f"{'<=' if upper_inclusive else '<'} {upper}")
    allowed = " and ".join([*parts, "finite"])
    return bad, f"{name} must be {allowed}"


class ParameterChecks:
    """Range checks for a builder's parameters, tied to every output leaf.

    A concrete value out of range raises `ValueError` at once. A traced one is
    recorded, and `attach(output)` ties every array leaf of the output to the
    checks with `equinox.branched_error_if`, so the error fires whichever output
    a jitted caller keeps (a check on Q must fire even if only positions are
    used, which a per-value `error_if` would not guarantee).
    """

    def __init__(self) -> None:
        self._preds: list[Array] = []
        self._messages: list[str] = []

    def range(self, name: str, value: ArrayLike, note: str = "", **bounds) -> Array:
        """`check_range`, deferring a traced check to `attach`."""
        x = jnp.asarray(value, dtype=jnp.result_type(float))
        bad, message = _range_violation(name, x, **bounds)
        if _is_concrete(bad):
            return check_range(name, x, note=note, **bounds)
        self._preds.append(jnp.any(bad))
        self._messages.append(message + note)
        return x

    def condition(self, bad: ArrayLike, message: str) -> None:
        """A relation between parameters: raise (eagerly) or record if `bad`."""
        bad = jnp.asarray(bad)
        if _is_concrete(bad):
            if bool(jnp.any(bad)):
                raise ValueError(message)
            return
        self._preds.append(jnp.any(bad))
        self._messages.append(message)

    def attach(self, output):
        if not self._preds:
            return output
        preds = jnp.stack(self._preds)
        return eqx.branched_error_if(output, jnp.any(preds), jnp.argmax(preds), self._messages)
