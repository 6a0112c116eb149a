"""Argument checks: static ones raise ValueError eagerly, traced ones use error_if.

A traced value (under jit or grad) cannot be inspected in Python, so its check is
compiled into the graph with `equinox.error_if`, which raises at run time with the
same message. Concrete values are checked eagerly before any tracing.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array, ArrayLike


def check_count(name: str, value: int) -> int:
    """A static particle count: a Python int >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a positive int (static), got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_static_int(name: str, value: int, lowest: int) -> int:
    """A static integer setting (grid size, iteration count): a Python int >= `lowest`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lowest:
        raise ValueError(f"{name} must be an int >= {lowest} (static), got {value!r}")
    return int(value)


def _is_concrete(x: Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


def check_range(
    name: str,
    value: ArrayLike,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = False,
    upper_inclusive: bool = False,
) -> Array:
    """Check a (possibly traced) parameter lies in its allowed range and is not NaN.

    Returns the value as a float array; under jit the check runs at execution.
    """
    x = jnp.asarray(value, dtype=jnp.result_type(float))
    bad, message = _range_violation(name, x, lower, upper, lower_inclusive, upper_inclusive)
    # Test `bad`, not `x`: under jit a closed-over constant `x` is concrete while
    # the comparison built from it is traced.
    if _is_concrete(bad):
        if bool(jnp.any(bad)):
            raise ValueError(f"{message}, got {np.asarray(x)}")
        return x
    return eqx.error_if(x, jnp.any(bad), message)


def _range_violation(
    name: str,
    x: Array,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = False,
    upper_inclusive: bool = False,
) -> tuple[Array, str]:
    """Elementwise 'out of range or NaN' and the message naming the range."""
    bad = jnp.isnan(x)
    parts = []
    if lower is not None:
        bad = bad | ((x < lower) if lower_inclusive else (x <= lower))
        parts.append(f"{'>=' if lower_inclusive else '>'} {lower}")
    if upper is not None:
        bad = bad | ((x > upper) if upper_inclusive else (x >= upper))
        parts.append(f"{'<=' if upper_inclusive else '<'} {upper}")
    allowed = " and ".join(parts) if parts else "not NaN"
    return bad, f"{name} must be {allowed} (and not NaN)"


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

    def range(self, name: str, value: ArrayLike, **bounds) -> Array:
        """`check_range`, deferring a traced check to `attach`."""
        x = jnp.asarray(value, dtype=jnp.result_type(float))
        bad, message = _range_violation(name, x, **bounds)
        if _is_concrete(bad):
            return check_range(name, x, **bounds)
        self._preds.append(jnp.any(bad))
        self._messages.append(message)
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
