r"""Derivatives of long sequential solves in forward mode, whatever transformation asks.

A profile solve (an ODE scan of a thousand Runge-Kutta steps, a fixed-point
iteration of such solves) depends on a handful of scalars: $W_0$, $g$, $r_a$,
the mass fractions. Reverse mode differentiates it by running the loop
backwards with every step's stages stored, a second latency-bound loop of
as many iterations. Forward mode instead carries one tangent per input scalar
beside the state in the same loop: for $k$ scalars the columns
$\partial y/\partial p_k$ cost about $k$ more lanes of the step's arithmetic and
no second loop. `forward_mode(fn)` gives `fn` a custom JVP that computes those
columns (one `vmap` over the unit tangents of the inputs that carry a tangent)
and returns the tangent $\sum_k (\partial y/\partial p_k)\,\dot p_k$: linear in
the input tangents through one contraction, which is all that reverse mode
then transposes.

Every traced value `fn` depends on must be one of its arguments: a closure over
a differentiated value would lose its derivative (`jax.custom_jvp`). Inputs
with more than `MAX_COLUMNS` scalars carrying tangents fall back to the plain
JVP of `fn`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

MAX_COLUMNS = 16
"""Most input scalars with a tangent taken as forward-mode columns; beyond, the plain JVP."""


def forward_mode(fn: Callable, nondiff_argnums: tuple[int, ...] = ()) -> Callable:
    """`fn` with its derivative in its (few, scalar) inputs by forward mode (module notes).

    `nondiff_argnums`: positions of static arguments (callables, Python numbers),
    as for `jax.custom_jvp`."""
    wrapped = jax.custom_jvp(fn, nondiff_argnums=nondiff_argnums)

    def jvp(*args):
        static, (primals, tangents) = args[:-2], args[-2:]

        def call(*p):
            return fn(*_merge(static, p, nondiff_argnums))

        flat, treedef = jax.tree.flatten(primals)
        flat_dot = jax.tree.leaves(tangents, is_leaf=lambda t: isinstance(t, SymbolicZero))
        moving = [k for k, t in enumerate(flat_dot) if not isinstance(t, SymbolicZero)]
        if not moving:
            out = call(*primals)
            return out, jax.tree.map(jnp.zeros_like, out)
        sizes = [int(np.size(flat[k])) for k in moving]
        if sum(sizes) > MAX_COLUMNS:
            dense = [jnp.zeros_like(p) if isinstance(t, SymbolicZero) else t for p, t in zip(flat, flat_dot)]
            return jax.jvp(call, primals, tuple(jax.tree.unflatten(treedef, dense)))
        dtype = jnp.result_type(*[flat[k] for k in moving])

        def column(unit):
            directions = [jnp.zeros_like(p) for p in flat]
            start = 0
            for k, size in zip(moving, sizes):
                directions[k] = unit[start : start + size].reshape(np.shape(flat[k])).astype(flat[k].dtype)
                start += size
            return jax.jvp(call, primals, tuple(jax.tree.unflatten(treedef, directions)))

        values, columns = jax.vmap(column)(jnp.eye(sum(sizes), dtype=dtype))
        out = jax.tree.map(lambda v: v[0], values)  # the primal, the same in every lane
        dot = jnp.concatenate([jnp.ravel(flat_dot[k]).astype(dtype) for k in moving])
        return out, jax.tree.map(lambda c: jnp.tensordot(dot.astype(c.dtype), c, axes=1), columns)

    wrapped.defjvp(jvp, symbolic_zeros=True)
    return wrapped


def _merge(static: tuple, dynamic: tuple, static_positions: tuple[int, ...]) -> list:
    """The arguments in call order from the static ones (at `static_positions`) and the rest."""
    static_iter, dynamic_iter = iter(static), iter(dynamic)
    total = len(static) + len(dynamic)
    return [next(static_iter) if i in static_positions else next(dynamic_iter) for i in range(total)]
