r"""Fixed-grid Runge-Kutta integration for the profile solves.

The King and LIMEPY profiles integrate Poisson's equation on a grid fixed in
advance (one step per node interval of $\ln r$), so nothing adapts and no
error is estimated: the integrator is a `lax.scan` of one explicit step per
interval. The method is Tsitouras' (2011) 5th-order pair (the coefficients of
his Table 1, as `diffrax.Tsit5.tableau` also holds them; written here so that
a profile solve does not import diffrax, 0.3 s); only its 5th-order
solution is used, so the 7th (first-same-as-last) stage, whose weight in that
solution is 0, is never evaluated: 6 evaluations of the right-hand side per step.

Why not `diffrax.diffeqsolve`: with `StepTo` it gives the same steps, but its
general loop (step-size control, event and error handling, checkpointed
adjoint) made the profile solve the largest part of a King builder's compile:
3.8 s of CPU time to compile the forward solve alone on the reference machine,
against 0.4 s for this scan (`benchmarks/builders.py` compile rows). Its
derivative is taken in forward mode in the few scalars it depends on
(`integrate_on_grid` with `args`, as the profile solves call it), so reverse
mode does not run the scan backwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._forward_mode import forward_mode
from .._types import Array

# Tsitouras (2011), Comput. Math. Appl. 62, 770, Table 1: the 5th-order pair's
# stage coefficients a_ij (row i: stage i + 2's argument), nodes c_i and
# 5th-order weights b_i; the 7th stage's weight is 0 (first same as last) and
# is dropped. The same numbers as `diffrax.Tsit5.tableau` (tests/profiles/test_ode.py).
_TSIT5_A = (
    (0.161,),
    (-0.008480655492356989, 0.335480655492357),
    (2.8971530571054935, -6.359448489975075, 4.3622954328695815),
    (5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525),
    (5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401, -0.028269050394068383),
)
_TSIT5_C = (0.161, 0.327, 0.9, 0.9800255409045097, 1.0)
_TSIT5_B = (
    0.09646076681806523,
    0.01,
    0.4798896504144996,
    1.379008574103742,
    -3.290069515436081,
    2.324710524099774,
)


@functools.cache
def _tsit5_coefficients() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stage matrix, stage nodes, 5th-order weights) of the Tsit5 tableau.

    Row i of the stage matrix holds the coefficients of stages 1..6 in the
    argument of stage i + 1 (row 0 is stage 1's: all zero).
    """
    matrix = np.zeros((6, 6))
    for i, row in enumerate(_TSIT5_A):
        matrix[i + 1, : len(row)] = row
    return matrix, np.array((0.0, *_TSIT5_C)), np.array(_TSIT5_B)


def integrate_on_grid(rhs: Callable[..., Any], y0: Any, ts: Array, args: Any = None) -> Any:
    r"""The solution of $dy/dt = \mathrm{rhs}(t, y[, \mathrm{args}])$ at the nodes `ts`, from $y(t_0) = y_0$.

    **Arguments:** `rhs` returns a pytree shaped like `y`; `y0` a pytree of
    arrays; `ts` the increasing nodes (1-D), one Tsit5 step per interval;
    `args` None, with `rhs(t, y)` (which may close over anything), or a
    pytree of every traced value the right-hand side reads, with
    `rhs(t, y, args)` (then its derivative is the forward-mode one below;
    a traced value it closes over instead would lose its derivative).

    **Returns:** the pytree of `y0` with a leading axis of `len(ts)`, `y0` first
    (as `diffrax.SaveAt(ts=ts)` returns it). Differentiable in `y0`, `ts` and
    `args` (or whatever `rhs` closes over without `args`).

    The six stages of a step are themselves a (rolled) loop, so `rhs` appears
    once in the compiled program: a right-hand side with special functions
    (the incomplete gamma function of the King density) compiles once, not six
    times.

    **Derivative.** A profile solve depends on a few scalars (W0, g, ra, the
    mass fractions), so with `args` its derivative is taken in forward mode,
    one tangent per scalar that carries one (`progenax._forward_mode`): the
    scan runs once with the tangents beside the state, and reverse mode
    transposes only a weighted sum of those columns instead of running the
    scan backwards with every stage stored. Without `args`, reverse mode runs
    the scan backwards.
    """
    if args is None:
        return _solve(lambda t, y, _: rhs(t, y), y0, ts, ())
    return _integrate(rhs, y0, ts, args)


def _solve(rhs, y0, ts, args):
    """`integrate_on_grid` itself (its derivative aside)."""
    leaves0, treedef = jax.tree.flatten(y0)
    dtype = jnp.result_type(*leaves0)
    matrix, nodes, weights = (jnp.asarray(c, dtype) for c in _tsit5_coefficients())

    def combine(y, h, coefficients, stages):
        return [leaf + h * jnp.tensordot(coefficients, k, axes=1) for leaf, k in zip(y, stages)]

    def step(y, interval):
        t, h = interval

        def stage(stages, i):
            y_i = combine(y, h, matrix[i], stages)
            k_i = jax.tree.leaves(rhs(t + nodes[i] * h, jax.tree.unflatten(treedef, y_i), args))
            return [k.at[i].set(ki) for k, ki in zip(stages, k_i)], None

        empty = [jnp.zeros((6,) + jnp.shape(leaf), jnp.result_type(leaf)) for leaf in y]
        stages, _ = jax.lax.scan(stage, empty, jnp.arange(6))
        y_next = combine(y, h, weights, stages)
        return y_next, y_next

    _, ys = jax.lax.scan(step, leaves0, (ts[:-1], jnp.diff(ts)))
    out = [jnp.concatenate([first[None], rest]) for first, rest in zip(leaves0, ys)]
    return jax.tree.unflatten(treedef, out)


_integrate = forward_mode(_solve, nondiff_argnums=(0,))

__all__ = ["integrate_on_grid"]
