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

import contextlib
import contextvars
import functools
import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._compile import run_once_jit
from ._types import Array, ArrayLike


class _TracedCheckFilter(logging.Filter):
    """Drop JAX's "jax.pure_callback failed" log record when the failure is a
    traced check of ours (`equinox.error_if`) raising: the same error is raised
    to the caller with its message, so the record only repeats it as about 15
    lines on stderr, even when the caller catches the error. Any other failing
    callback is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (error is not None and type(error).__name__ == "_EquinoxRuntimeError")


_CALLBACK_LOGGER = logging.getLogger("jax._src.callback")
if not any(isinstance(f, _TracedCheckFilter) for f in _CALLBACK_LOGGER.filters):
    _CALLBACK_LOGGER.addFilter(_TracedCheckFilter())


def check_scalar(name: str, value: ArrayLike) -> None:
    """Refuse a parameter that is not a scalar (`ValueError` naming it and its shape)."""
    shape = jnp.shape(value)
    if shape != ():
        raise ValueError(f"{name} must be a scalar, got an array of shape {shape}")


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


def _primal(x):
    """The primal of a differentiation tracer (eager `grad`, `jacfwd`); x otherwise."""
    while isinstance(x, jax.core.Tracer) and hasattr(x, "primal"):
        x = x.primal
    return x


def array_module(*values):
    """NumPy when none of `values` is traced, else `jax.numpy`: host arithmetic
    on concrete arrays (each eager jnp operation compiles a one-op program on
    its first use). Unlike `testable`, a differentiation tracer selects
    `jax.numpy`, so derivatives are kept."""
    return np if all(_is_concrete(v) for v in values) else jnp


def testable(*values) -> tuple:
    """`(xp, values)`: the module to test a condition on parameters with, and
    the values to test. NumPy and the concrete values (a differentiation
    tracer's concrete primal in its place, under an eager `grad` or `jacfwd`:
    a test has no derivative) when nothing else is traced; else `jax.numpy`
    and the values as given. Each eager jnp operation compiles a one-op
    program on its first use (about 25 ms each, most of a builder's first
    call before its own compile)."""
    primals = tuple(_primal(v) for v in values)
    if all(_is_concrete(p) for p in primals):
        return np, primals
    return jnp, values


def _shown(x: Array) -> str:
    """The value for a message: a differentiation tracer (eager `grad`, `jacfwd`)
    shows its primal; any other tracer cannot be shown (never `np.asarray` it)."""
    x = _primal(x)
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


def as_float(value: ArrayLike) -> Array:
    """`value` as a float array: in its own floating dtype (a float32
    parameter stays float32 when x64 is on: it was widened to float64, so a
    float32 cluster read from a file gave float64 densities and `relax` of it
    failed), else (Python numbers, integers) in JAX's default float dtype. A
    Python or NumPy number (or NumPy array) is converted on the host and
    copied to the device: `jnp.asarray` of one compiles a one-op program (a
    conversion, or JAX's `stage`) on its first call in a process for each
    shape and dtype, 10-40 ms of a cold build on the project's machine."""
    dtype = jnp.result_type(float)
    own = getattr(value, "dtype", None)
    if own is not None and jnp.issubdtype(own, jnp.floating):
        if isinstance(value, jax.Array):
            return value  # its weak type kept too (a model's default total mass 1.0)
        dtype = own
    if isinstance(value, (int, float)) and not isinstance(value, (bool, np.generic)):
        return jax.device_put(float(value))  # weakly typed, as the number was: float32 arrays stay float32
    if isinstance(value, (bool, np.generic, np.ndarray)):
        return jax.device_put(np.asarray(value, dtype=dtype))
    return jnp.asarray(value, dtype=dtype)


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

    Returns the value as a float array (`as_float`); under jit the check runs
    at execution. `note` is appended to the message (e.g. what None means for
    an optional one).
    """
    bounds = dict(lower=lower, upper=upper, lower_inclusive=lower_inclusive, upper_inclusive=upper_inclusive)
    return check_argument(name, as_float(value), note=note, **bounds)


def check_argument(name: str, value, *, note: str = "", **bounds):
    """`check_range` that returns `value` as given, its dtype and weak type
    kept: for a public function whose arguments' dtypes set its result's
    (float32 arrays with a Python-number argument stay float32 under x64)."""
    bad, message = _range_violation(name, value, **bounds)
    # Test `bad`, not `value`: under eager grad `value` is a tracer while `bad` is concrete.
    if _is_concrete(bad):
        if bool(np.any(bad)):
            raise ValueError(f"{message}, got {_shown(value)}{note}")
        return value
    return error_if(value, jnp.any(bad), message + note)


def check_static_range(
    name: str,
    value: float,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = False,
    upper_inclusive: bool = False,
) -> float:
    """`check_range` for a static number (a Python or NumPy scalar, never traced):
    checked in NumPy and returned as a Python float, so that it stays static."""
    bad, message = _range_violation(name, np.float64(value), lower, upper, lower_inclusive, upper_inclusive)
    if bool(bad):
        raise ValueError(f"{message}, got {float(value)!r}")
    return float(value)


def _range_violation(
    name: str,
    x: Array,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = False,
    upper_inclusive: bool = False,
) -> tuple[Array, str]:
    """Elementwise 'out of range or not finite' and the message naming the range.

    A concrete `x`, or a differentiation tracer's concrete primal, is tested
    in NumPy (`testable`).
    """
    xp, (x,) = testable(x)
    x = xp.asarray(x)
    bad = ~xp.isfinite(x)
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
    checks (`tie_errors`: `equinox.branched_error_if`, or NaN under
    `errors_as_nan`), so the error fires whichever output a jitted caller keeps
    (a check on Q must fire even if only positions are used, which a per-value
    `error_if` would not guarantee).
    """

    def __init__(self) -> None:
        self._preds: list[Array] = []
        self._messages: list[str] = []
        self._traced: list[Array] = []

    def range(self, name: str, value: ArrayLike, note: str = "", **bounds) -> Array:
        """`check_range`, deferring a traced check to `attach`.

        `attach` also gives every output a zero-valued derivative path through
        each traced parameter, so that a `jit(grad)` with respect to it runs
        the checks even where it keeps no forward value of the build: a
        parameter the kept outputs depend on only through discrete draws (the
        fractal's D: pathwise gradient 0) or not at all (Q and `ra` move no
        position: `jit(grad)` of a loss of positions at Q = -1 returned 0).
        """
        x = as_float(value)
        bad, message = _range_violation(name, x, **bounds)
        if _is_concrete(bad):
            return check_range(name, x, note=note, **bounds)
        self._preds.append(jnp.any(bad))
        self._messages.append(message + note)
        self._traced.append(x)
        return x

    def condition(self, bad: ArrayLike, message: str) -> None:
        """A relation between parameters: raise (eagerly) or record if `bad`."""
        if _is_concrete(bad):
            if bool(np.any(bad)):
                raise ValueError(message)
            return
        self._preds.append(jnp.any(bad))
        self._messages.append(message)

    def attach(self, output):
        if not self._preds:
            return output
        preds = jnp.stack(self._preds)
        bad, index, messages = jnp.any(preds), jnp.argmax(preds), tuple(self._messages)
        output = tie_errors(output, bad, index, messages)
        if not self._traced:
            return output
        # 0 * x is 0 for a finite x (a bad x has failed the check above), and its
        # derivative carries the checks: see `_checked_derivative`.
        nan = _NAN_ON_ERROR.get()  # read now: the derivative rule may be traced after the context has closed
        zero = sum(0.0 * _checked_derivative(x, bad, index, messages, nan) for x in self._traced)
        return _tie(output, zero)


def _tie(output, zero: Array):
    """Every floating array leaf of `output` plus the scalar `zero`: the same
    values (a finite zero), each now depending on it; elementwise, so a leaf
    laid out over a device mesh stays so. Integer and boolean leaves are left
    as they are (they cannot hold NaN)."""

    def tie(leaf):
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.inexact):
            return leaf + zero.astype(leaf.dtype)
        return leaf

    return jax.tree_util.tree_map(tie, output)


def tie_errors(output, bad: Array, index: Array, messages):
    """The failed check's error tied to every array leaf of `output`
    (`equinox.branched_error_if`), so that it fires whichever leaf a jitted
    caller keeps. Under `errors_as_nan`, NaN added to every floating leaf
    through one scalar (`_tie`) instead: elementwise, so no leaf laid out over
    a device mesh is gathered onto every device for the check, as
    `branched_error_if` of the leaves would."""
    if not _NAN_ON_ERROR.get():
        return eqx.branched_error_if(output, bad, index, list(messages))
    return _tie(output, jnp.where(bad, jnp.nan, 0.0))


_NAN_ON_ERROR: contextvars.ContextVar[bool] = contextvars.ContextVar("progenax_nan_on_error", default=False)


@contextlib.contextmanager
def errors_as_nan():
    """Within it, a traced check that fails makes the outputs NaN instead of
    raising at run time. For programs over a device mesh: the error a host
    callback raises stops one device's program while the others wait for it in
    a collective, and the process aborts. Concrete checks still raise
    `ValueError` at once."""
    token = _NAN_ON_ERROR.set(True)
    try:
        yield
    finally:
        _NAN_ON_ERROR.reset(token)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _checked_derivative(x: Array, bad: Array, index: Array, messages: tuple[str, ...], nan: bool = False) -> Array:
    """`x` itself; its derivative is multiplied by a 1 that `branched_error_if`
    computes from the checks (with `nan`: a 1 that is NaN when they fail). A
    reverse pass that reaches `x` therefore needs the checks' value and keeps
    them, where a forward-only `error_if` is dropped as dead code by
    `jit(grad)` when no forward value is used."""
    return x


@_checked_derivative.defjvp
def _checked_derivative_jvp(messages, nan, primals, tangents):
    x, bad, index = primals
    one = jnp.ones((), x.dtype)
    one = jnp.where(bad, jnp.nan, one) if nan else eqx.branched_error_if(one, bad, index, messages)
    return x, tangents[0] * one


# -- traced checks inside a builder's compiled core ---------------------------------
# A check compiled into a program (`equinox.error_if`) is a host callback, whose
# address is part of the program: JAX's persistent compilation cache then never
# matches it in a new process, and each check adds to the compile. A builder's
# jitted core therefore collects its traced checks as outputs instead
# (`deferred_checks`); its caller raises a `ValueError` from them at once when they
# are concrete, and compiles them into the caller's own program (`error_if`) when
# the builder itself runs under the caller's jit.
_COLLECTED: contextvars.ContextVar[list | None] = contextvars.ContextVar("progenax_collected_checks", default=None)


def error_if(x, pred: ArrayLike, message: str):
    """`equinox.error_if(x, pred, message)`, or, inside a `deferred_checks` core,
    the check recorded for its caller (and `x` returned unchanged)."""
    collected = _COLLECTED.get()
    if collected is None:
        return eqx.error_if(x, pred, message)
    collected.append((jnp.any(jnp.asarray(pred)), message))
    return x


def without_checks(fn):
    """`fn` with the traced checks of the functions it calls dropped (collected
    into a list of its own and discarded).

    For code whose inputs were checked already and that runs in a trace of its
    own inside a builder's (a `custom_jvp` rule): its checks would otherwise
    record that trace's tracers into the builder's deferred checks, a leak.
    """

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        token = _COLLECTED.set([])
        try:
            return fn(*args, **kwargs)
        finally:
            _COLLECTED.reset(token)

    return wrapped


def raise_collected(output, preds: Array, messages: tuple[str, ...]):
    """Raise the first failed check (concrete), or tie them to `output` (traced)."""
    if not messages:
        return output
    concrete = _primal(preds)
    if _is_concrete(concrete):
        failed = np.flatnonzero(np.asarray(concrete))
        if failed.size:
            raise ValueError(messages[failed[0]])
        return output
    outer = _COLLECTED.get()
    if outer is not None:  # a core called inside another's trace: its caller raises them
        outer.extend((preds[i], message) for i, message in enumerate(messages))
        return output
    return tie_errors(output, jnp.any(preds), jnp.argmax(preds), messages)


def collecting_checks(fn):
    """`fn` returning `(output, preds, messages)`: the traced checks of the
    functions it calls, collected rather than compiled in (a (k,) bool array
    and their k static messages), for `raise_collected`, or for `error_if` in a
    caller's trace (a `shard_map` body's checks, raised outside the map)."""

    @functools.wraps(fn)
    def collected_fn(*args, **kwargs):
        token = _COLLECTED.set([])
        try:
            out = fn(*args, **kwargs)
            collected = _COLLECTED.get()
        finally:
            _COLLECTED.reset(token)
        preds = jnp.stack([p for p, _ in collected]) if collected else jnp.zeros((0,), bool)
        return out, preds, tuple(m for _, m in collected)

    return collected_fn


def deferred_checks(fn=None, *, fast_compile=None):
    """`equinox.filter_jit(fn)` whose traced checks (`error_if`, `check_range`) are
    returned rather than compiled in, then raised by `raise_collected`; compiled
    with the run-once options of `progenax._compile` (for the calls where
    `fast_compile(*args, **kwargs)` is true, if given: `run_once_jit`).
    `@deferred_checks` or `@deferred_checks(fast_compile=...)`."""
    if fn is None:
        return functools.partial(deferred_checks, fast_compile=fast_compile)

    def core(*args, **kwargs):
        # The messages are static: equinox returns them from the trace as they are.
        return collecting_checks(fn)(*args, **kwargs)

    core.__name__ = core.__qualname__ = fn.__name__  # the compiled program's name

    jitted = run_once_jit(core, filter=True, fast_compile=fast_compile)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        out, preds, messages = jitted(*args, **kwargs)
        return raise_collected(out, preds, messages)

    return checked
