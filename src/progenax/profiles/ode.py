r"""Fixed-grid Runge-Kutta integration for the profile solves.

The King and LIMEPY profiles integrate Poisson's equation on a grid fixed in
advance (one step per node interval of $\ln r$), so nothing adapts and no
error is estimated: the integrator is a `lax.scan` of one explicit step per
interval. The method is Tsitouras' (2011) 5th-order pair as diffrax tabulates it
(`diffrax.Tsit5.tableau`, the home of the coefficients); only its 5th-order
solution is used, so the 7th (first-same-as-last) stage, whose weight in that
solution is 0, is never evaluated: 6 evaluations of the right-hand side per step.

Why not `diffrax.diffeqsolve`: with `StepTo` it gives the same steps, but its
general loop (step-size control, event and error handling, checkpointed
adjoint) made the profile solve the largest part of a King builder's compile:
3.8 s of CPU time to compile the forward solve alone on the reference machine,
against 0.4 s for this scan (`benchmarks/builders.py` compile rows). Reverse
mode differentiates the scan directly, storing each step's stages
($6 \times$ the state per node: a few hundred kB at 1024 nodes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array

_TABLEAU = diffrax.Tsit5.tableau
# Stages 2..6 (c_i, row a_i of the tableau) and the 5th-order weights of stages
# 1..6; the 7th stage's weight is 0 (first same as last).
_NODES = tuple(float(c) for c in _TABLEAU.c[:5])
_ROWS = tuple(tuple(float(a) for a in row) for row in _TABLEAU.a_lower[:5])
_WEIGHTS = tuple(float(b) for b in _TABLEAU.b_sol[:6])
if abs(float(_TABLEAU.b_sol[6])) != 0.0:  # pragma: no cover - a changed tableau
    raise ImportError("the Tsit5 tableau's last weight is not 0: update progenax.profiles.ode")


# The stage matrix: row i holds the coefficients of stages 1..6 in the argument
# of stage i + 1 (row 0 is stage 1's: all zero).
_STAGE_MATRIX = np.zeros((6, 6))
for _i, _row in enumerate(_ROWS):
    _STAGE_MATRIX[_i + 1, : len(_row)] = _row
_STAGE_NODES = np.concatenate([[0.0], _NODES])


def integrate_on_grid(rhs: Callable[[Array, Any], Any], y0: Any, ts: Array) -> Any:
    r"""The solution of $dy/dt = \mathrm{rhs}(t, y)$ at the nodes `ts`, from $y(t_0) = y_0$.

    **Arguments:** `rhs(t, y)` returns a pytree shaped like `y`; `y0` a pytree of
    arrays; `ts` the increasing nodes (1-D), one Tsit5 step per interval.

    **Returns:** the pytree of `y0` with a leading axis of `len(ts)`, `y0` first
    (as `diffrax.SaveAt(ts=ts)` returns it). Differentiable in `y0`, `ts` and
    whatever `rhs` closes over.

    The six stages of a step are themselves a (rolled) loop, so `rhs` appears
    once in the compiled program: a right-hand side with special functions
    (the incomplete gamma function of the King density) compiles once, not six
    times.
    """
    leaves0, treedef = jax.tree.flatten(y0)
    dtype = jnp.result_type(*leaves0)
    matrix = jnp.asarray(_STAGE_MATRIX, dtype)
    nodes = jnp.asarray(_STAGE_NODES, dtype)
    weights = jnp.asarray(_WEIGHTS, dtype)

    def combine(y, h, coefficients, stages):
        return [leaf + h * jnp.tensordot(coefficients, k, axes=1) for leaf, k in zip(y, stages)]

    def step(y, interval):
        t, h = interval

        def stage(stages, i):
            y_i = combine(y, h, matrix[i], stages)
            k_i = jax.tree.leaves(rhs(t + nodes[i] * h, jax.tree.unflatten(treedef, y_i)))
            return [k.at[i].set(ki) for k, ki in zip(stages, k_i)], None

        empty = [jnp.zeros((6,) + jnp.shape(leaf), jnp.result_type(leaf)) for leaf in y]
        stages, _ = jax.lax.scan(stage, empty, jnp.arange(6))
        y_next = combine(y, h, weights, stages)
        return y_next, y_next

    _, ys = jax.lax.scan(step, leaves0, (ts[:-1], jnp.diff(ts)))
    out = [jnp.concatenate([first[None], rest]) for first, rest in zip(leaves0, ys)]
    return jax.tree.unflatten(treedef, out)


__all__ = ["integrate_on_grid"]
