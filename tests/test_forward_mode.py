"""`progenax._forward_mode.forward_mode`: a custom JVP whose columns come from forward mode.

Each test compares against plain autodiff of the same function: the derivative
is the same map, so the two agree to rounding (1e-13 relative: a few
operations on values of order 1, done in a different order), in every mode
that reaches the custom rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax._forward_mode import MAX_COLUMNS, forward_mode
from progenax.profiles.ode import _solve, integrate_on_grid

jax.config.update("jax_enable_x64", True)


def _loop(steps: int, params: dict) -> jax.Array:
    """A sequential loop in a scalar `a` and a (3,) vector `v`: x <- x + 0.01 (a x^2 - v . sin x)."""

    def body(x, _):
        return x + 0.01 * (params["a"] * x**2 - jnp.sum(params["v"]) * jnp.sin(x)), x

    return jax.lax.scan(body, params["x0"], None, length=steps)[1]


_fast_loop = forward_mode(_loop, nondiff_argnums=(0,))
PARAMS = {"a": jnp.asarray(0.3), "v": jnp.asarray([0.2, -0.1, 0.4]), "x0": jnp.asarray([0.5, 1.5])}


def _scalar(fn):
    return lambda p: jnp.sum(jnp.cos(fn(50, p)))


@pytest.mark.parametrize("names", [("a",), ("a", "v"), ("a", "v", "x0")])
def test_reverse_mode_equals_autodiff(names):
    """jax.grad through the rule (which transposes only the contraction) equals
    jax.grad of the plain loop, for every subset of the inputs differentiated."""

    def split(fn):
        def f(moving):
            return _scalar(fn)({**PARAMS, **moving})

        return f

    moving = {k: PARAMS[k] for k in names}
    got = jax.grad(split(_fast_loop))(moving)
    want = jax.grad(split(_loop))(moving)
    for k in names:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-13, atol=1e-15)


def test_values_and_forward_mode_equal_the_plain_function():
    """The primal is fn's own, bit for bit, outside differentiation; jax.jvp and
    jax.jacfwd give fn's derivatives."""
    np.testing.assert_array_equal(_fast_loop(50, PARAMS), _loop(50, PARAMS))
    tangent = {"a": jnp.asarray(1.0), "v": jnp.asarray([0.5, 0.0, -1.0]), "x0": jnp.asarray([0.0, 2.0])}
    _, got = jax.jvp(lambda p: _fast_loop(50, p), (PARAMS,), (tangent,))
    _, want = jax.jvp(lambda p: _loop(50, p), (PARAMS,), (tangent,))
    np.testing.assert_allclose(got, want, rtol=1e-13)
    hess_got = jax.hessian(lambda a: _scalar(_fast_loop)({**PARAMS, "a": a}))(PARAMS["a"])
    hess_want = jax.hessian(lambda a: _scalar(_loop)({**PARAMS, "a": a}))(PARAMS["a"])
    np.testing.assert_allclose(hess_got, hess_want, rtol=1e-12)


def test_many_scalars_take_the_plain_jvp():
    """More than MAX_COLUMNS scalars with tangents: the plain JVP, the same gradient."""
    x0 = jnp.linspace(0.1, 1.0, MAX_COLUMNS + 1)
    got = jax.grad(lambda x: _scalar(_fast_loop)({**PARAMS, "x0": x}))(x0)
    want = jax.grad(lambda x: _scalar(_loop)({**PARAMS, "x0": x}))(x0)
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_float32():
    """Runs, and differentiates, in float32 with x64 on (the columns keep the inputs' dtype)."""
    p32 = jax.tree.map(lambda x: x.astype(jnp.float32), PARAMS)
    g = jax.grad(lambda a: _scalar(_fast_loop)({**p32, "a": a}))(p32["a"])
    want = jax.grad(lambda a: _scalar(_loop)({**PARAMS, "a": a}))(PARAMS["a"])
    assert g.dtype == jnp.float32
    np.testing.assert_allclose(g, want, rtol=1e-4)


def test_integrate_on_grid_gradient_is_the_scan_gradient():
    """The ODE integrator's gradient in its args and initial state equals reverse
    mode through the scan (`_solve`, the same integration without the rule):
    y' = -k y + c sin t on [0, 3], 60 steps."""
    ts = jnp.linspace(0.0, 3.0, 61)

    def rhs(t, y, args):
        return -args["k"] * y + args["c"] * jnp.sin(t)

    def loss(solve):
        return lambda args, y0: jnp.sum(solve(rhs, y0, ts, args) ** 2)

    args, y0 = {"k": jnp.asarray(0.7), "c": jnp.asarray(1.3)}, jnp.asarray(2.0)
    got = jax.grad(loss(integrate_on_grid), argnums=(0, 1))(args, y0)
    want = jax.grad(loss(_solve), argnums=(0, 1))(args, y0)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-13)


def test_integrate_on_grid_without_args_differentiates_its_closure():
    """`rhs(t, y)` without `args` may close over a differentiated value (reverse
    mode through the scan, as before `args`): d/dk of y(3) for y' = -k y is
    -3 y0 e^{-3k}, to the integrator's accuracy (60 steps, 5th order: 1e-9)."""
    ts = jnp.linspace(0.0, 3.0, 61)

    def end(k):
        return integrate_on_grid(lambda t, y: -k * y, jnp.asarray(2.0), ts)[-1]

    k = 0.7
    np.testing.assert_allclose(jax.grad(end)(k), -3.0 * 2.0 * np.exp(-3.0 * k), rtol=1e-9)
