r"""XLA options for the programs the library compiles to run once (the builders).

A builder is traced, compiled and run once per shape, so on the CPU its compile
time is most of what a user waits for. XLA's CPU backend has two ways to emit
the code of a fused elementwise kernel: its newer MLIR fusion emitters (the
default) and the older elemental emitters. A builder's program is hundreds of
small kernels, and with the older emitters it compiles 25-35% faster for the
same run time (the project's 2-core machine, n = 1e5, XLA compile alone: King
2.45 s -> 1.81 s, EFF 3.28 s -> 2.22 s; with the flag set for a whole process,
the SPH density's gradient at 1e6 in 2D ran in 0.666 s against 0.745 s). So
`compile_options()` asks for them on the CPU.

JAX takes compiler options only for a top-level `jax.jit`, so they are passed
only when a builder is called outside any transformation (its first eager
call, the command line), or under an eager `jax.grad` / `jax.vjp` (below):
inside the user's `jax.jit`, `jax.vmap` or `jax.jvp` it compiles with what
the user's program asks for.

**Eager reverse mode.** Under `jax.grad` called outside any `jit`, JAX
splits a jitted builder into two programs, the forward pass with its
residuals and the backward pass, and compiles both without options, after
linearising and transposing the builder's graph in Python. `run_once_jit`
(with `filter=True`, as the builders' cores use it) instead makes the core a
`jax.custom_vjp` there, differentiated in its traced (perturbed) floating
arguments only: its forward rule, which JAX runs outside the gradient's
trace, compiles `jax.linearize` of the core at the top level with the
options; its backward rule compiles the transpose of that linear map
restricted to the outputs that receive a cotangent (JAX's symbolic zeros:
the other outputs' branches are dropped before the transpose, as in JAX's
own reverse pass, where a zero cotangent times an infinite partial would
give NaN). The gradient is the same to rounding (2e-16 relative here). Its
first call, n = 1e4, a fresh process per builder (2 cores; `jax.grad` of a
scalar of every output, as in `benchmarks/builders.py --every-builder`):
Plummer 1.82 -> 1.51 s, fractal 2.22 -> 1.56 s, King 5.78 -> 3.93 s, EFF
10.53 -> 7.20 s, EFF with `r_t` 13.66 -> 9.61 s, LIMEPY with `ra` 14.09 ->
9.44 s, multi-mass King 8.56 -> 7.36 s, gravoturbulent stars 3.73 -> 3.48 s
and gas 5.76 -> 5.10 s; later calls run as fast as before. Which trace is
active is read from JAX's private trace state (`_eager_reverse_mode`); where
it cannot be read, the plain path runs. Forward mode (`jax.jvp`,
`jax.jacfwd`, `jax.hessian`), `vmap` and `jit` never take this path.

**Level 1.** Every run-once program also takes LLVM's optimisation level 1
instead of XLA's default 2 (`FAST_COMPILE`): the builders' first calls, an
eager gradient's two programs and the command line's summary. A run-once
program is compiled for the call that waits for it, and level 1 compiles it
10-45% sooner. Eager first call at n = 1e4, the compile alone (`python
benchmarks/builders.py --every-builder --every-sizes 10000 --repeats 2`, the
two levels alternated, two rounds each, 2026-12-06): Plummer 1.78 / 1.37 ->
1.01 / 1.00 s, EFF 4.78 / 3.91 -> 3.03 / 3.04 s, EFF `r_t` 4.42 / 4.53 ->
3.69 / 3.61 s, King 2.20 / 2.47 -> 1.92 / 1.89 s, LIMEPY `ra` 4.31 / 4.46 ->
4.07 / 3.79 s, multi-mass King 3.37 / 3.41 -> 3.16 / 2.82 s, gravoturbulent
stars 3.27 / 3.28 -> 2.35 / 2.32 s and gas 2.62 / 2.81 -> 1.95 / 1.81 s, the
fractal within noise; their build times at that n within noise too. Later
calls of a large build can run a few per cent longer: at n = 1e6 (float64,
fresh processes, alternated, best of 5) King 0.51-0.52 against 0.50-0.53 s and
multi-mass King 0.72-0.76 against 0.75-0.77 s (unchanged), Plummer 0.31-0.33
against 0.29-0.31 s, LIMEPY `ra` 0.93-0.96 against 0.86-0.91 s and EFF
1.49-1.53 against 1.32-1.45 s; at n = 1e5 the gravoturbulent stars, whose
nested-mesh W is a heavy pair loop, 1.33-1.40 against 1.17-1.22 s. The first
call, which is what a run-once program is for, is sooner at every size
measured, or within noise: at 1e6 Plummer 1.55 / 1.73 against 1.82 / 1.88 s,
King 2.47 / 2.60 against 2.87 / 3.02 s, multi-mass King 4.29 / 4.29 against
5.33 / 5.00 s, LIMEPY `ra` 4.99 / 5.53 against 5.26 / 5.87 s, EFF 5.16 / 6.89
against 5.19 / 6.16 s (noise); the stars at 1e5 6.6-7.0 against 7.9-8.1 s;
the fractal at 2e5 7.84 against 8.31 s (and 9.22 s with XLA's defaults). (A user
who builds many large clusters eagerly in a loop can `jax.jit` the builder:
inside a user's `jit` the user's options apply.) The outputs change in the
last bits only (n = 300, key 0: velocities within 2.3e-14 of the largest
value, positions within 1.4e-16; `tests/builders/test_output_hashes.py` was
re-recorded with them).

**Programs that run long.** The elemental emitters' kernels run slower in
heavy loops: the nested-mesh W of a clumpy cluster (`potential_energy(method=
"mesh")`, whose short-range pair loop dominates) took 1.46x as long at n = 2e5
(3.29 against 2.25 s) and the fractal builder at n = 1e6 1.9x (31.4 against
16.8 s, recipe seed 1), against about 1 s of compile saved. So a core whose
program sums that W for more than `MESH_FAST_COMPILE_MAX_N` stars compiles
with XLA's defaults (`run_once_jit(..., fast_compile=)`, `mesh_compiles_fast`).
Below it the options win: the fractal builder at 1e5 took 5.9 s to its
first result with them against 6.9 s without (run 1.54 against 1.25 s); the
spherical builders run 5-10% slower with them even at 1e6 (King 0.48
against 0.44 s, EFF 1.20 against 1.10 s) and compile 0.5-1.6 s faster, so
they keep them at every n. W has the same bits either way (2e5 stars); the
builders' positions and velocities can differ in the last bits (3e5 stars: up
to 6e-14 of the largest value).

An XLA without
the option (a debug option, which may go) is detected once by compiling a
one-op program, and then nothing is passed. `PROGENAX_XLA_DEFAULTS=1` in the
environment turns the options off (XLA's defaults everywhere).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax._src import core as _jax_core
from jax.custom_derivatives import SymbolicZero

try:  # JAX's trace types are private: without them no eager reverse mode is detected
    from jax._src.interpreters import ad as _jax_ad
except ImportError:  # pragma: no cover
    _jax_ad = None

FAST_COMPILE = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}
"""The XLA options of `compile_options()`: the elemental emitters and LLVM at
level 1 (see the module notes)."""


@functools.cache
def _accepted(options: tuple) -> bool:
    """Whether this XLA takes `options` (one tiny compile, once per process)."""
    try:
        jax.jit(jnp.negative, compiler_options=dict(options)).lower(1.0).compile()
    except Exception:  # the error type of an unknown option is jaxlib's own and varies
        return False
    return True


MESH_FAST_COMPILE_MAX_N = 200_000
"""The most stars whose nested-mesh W a program sums and still compiles with
`FAST_COMPILE` (module notes: above it the slower run outweighs the faster
compile)."""


def mesh_compiles_fast(n: int) -> bool:
    """Whether a program that sums the nested-mesh W of `n` stars takes the
    run-once options (`MESH_FAST_COMPILE_MAX_N`)."""
    return n <= MESH_FAST_COMPILE_MAX_N


def mesh_core_compiles_fast(key, n: int, *args, **kwargs) -> bool:
    """`fast_compile` of a builder core called as `core(key, n, ...)` whose
    program sums the nested-mesh W of its n stars (`mesh_compiles_fast`)."""
    return mesh_compiles_fast(n)


def compile_options() -> dict | None:
    """`FAST_COMPILE` when compiling for the CPU with an XLA that has it; else
    None (also when `PROGENAX_XLA_DEFAULTS=1`)."""
    if os.environ.get("PROGENAX_XLA_DEFAULTS") == "1" or jax.default_backend() != "cpu":
        return None
    return dict(FAST_COMPILE) if _accepted(tuple(sorted(FAST_COMPILE.items()))) else None


def at_top_level() -> bool:
    """Whether JAX is tracing nothing here (no `jit`, `grad`, `vmap`...): only
    then may a `jax.jit` carry compiler options. (JAX's own test of it is not
    public; without it the answer is False and no options are passed.)"""
    clean = getattr(_jax_core, "trace_state_clean", None)
    return bool(clean is not None and clean())


def _eager_reverse_mode() -> bool:
    """Whether reverse-mode autodiff (`jax.grad`, `jax.vjp`) is tracing here
    straight above eager evaluation: no `jit`, `vmap` or other transformation
    around it. (JAX's trace types are not public; without them the answer is
    False.)"""
    trace = getattr(getattr(_jax_core, "trace_ctx", None), "trace", None)
    linearize = getattr(_jax_ad, "LinearizeTrace", None)
    return (
        linearize is not None
        and isinstance(trace, linearize)
        and bool(getattr(trace, "is_vjp", False))
        and getattr(trace, "parent_trace", None) is getattr(_jax_core, "eval_trace", False)
    )


def _is_float_array(x) -> bool:
    return eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.inexact)


def _is_float_tracer(x) -> bool:
    """A floating input the caller differentiates: under an eager `grad` the
    others are concrete."""
    return isinstance(x, jax.core.Tracer) and _is_float_array(x)


def run_once_jit(
    fn: Callable,
    *,
    filter: bool = False,
    fast_compile: Callable[..., bool] | None = None,
    **jit_kwargs,
) -> Callable:
    """`jax.jit(fn, **jit_kwargs)` (`equinox.filter_jit` with `filter=True`)
    that compiles with `compile_options()` when called at the top level
    (`at_top_level`), and with the caller's options inside a transformation.
    The jit is made at the first call, not at import: the options depend on
    the backend. `fast_compile(*args, **kwargs)`, if given, says whether a
    call's program takes the options at all: False for one that runs long
    (module notes), which then compiles with XLA's defaults everywhere.

    With `filter=True`, an eager `jax.grad` or `jax.vjp` of a caller
    (`_eager_reverse_mode`) gets the options too: `fn` is then a
    `jax.custom_vjp` whose forward (`jax.linearize` of `fn`) and backward
    (the transpose of that linear map) are each compiled at the top level
    (module notes). JAX would otherwise compile the two programs it splits
    the jitted `fn` into without them (it refuses options on a jit traced
    under `grad`)."""

    @functools.cache
    def jitted(top_level: bool) -> Callable:
        options = compile_options() if top_level else None
        return (eqx.filter_jit if filter else jax.jit)(fn, compiler_options=options, **jit_kwargs)

    @functools.cache
    def programs(top_level: bool) -> tuple[Callable, Callable]:
        options = compile_options() if top_level else None

        def forward(diff, rest):
            """fn's array outputs, its other outputs (static) and its linearisation in
            `diff` (the arguments are `diff` and `rest` combined)."""
            static_out = []

            def arrays_of_fn(d):
                a, k = eqx.combine(d, rest)
                arrays, static = eqx.partition(fn(*a, **k), eqx.is_array)
                static_out.append(static)
                return arrays

            arrays, linear = jax.linearize(arrays_of_fn, diff)
            return arrays, static_out[0], linear

        def backward(linear, diff, given, kept):
            """The transpose of `linear` restricted to the output leaves marked `kept`,
            applied to their cotangents `given`: the outputs without a cotangent
            are left out of the graph before it is transposed, as JAX's own
            reverse pass leaves them out (0 times an infinite partial would be NaN)."""

            def kept_outputs(tangent):
                return [t for t, k in zip(jax.tree.leaves(linear(tangent)), kept, strict=True) if k]

            return jax.linear_transpose(kept_outputs, diff)(given)[0]

        return eqx.filter_jit(forward, compiler_options=options), eqx.filter_jit(backward, compiler_options=options)

    def reverse(args, kwargs):
        dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
        diff, nondiff = eqx.partition(dynamic, _is_float_tracer)
        held = {}  # what is not differentiated: the other array outputs (concrete), static leaves

        def floats_of(arrays, static_out):
            floats, others = eqx.partition(arrays, _is_float_array)
            held.update(others=others, static=static_out, floats=[_is_float_array(x) for x in jax.tree.leaves(arrays)])
            return floats

        @jax.custom_vjp
        def through(diff, nondiff):
            a, k = eqx.combine(diff, nondiff, static)
            return floats_of(*eqx.partition(jitted(True)(*a, **k), eqx.is_array))

        def through_fwd(diff, nondiff):
            # JAX runs it outside the gradient's trace: at the top level (`_eager_reverse_mode`).
            diff, nondiff = (jax.tree.map(lambda p: p.value, x) for x in (diff, nondiff))
            arrays, static_out, linear = programs(True)[0](diff, eqx.combine(nondiff, static))
            return floats_of(arrays, static_out), (linear, diff)

        def through_bwd(residuals, cotangents):
            linear, diff = residuals
            given = iter(jax.tree.leaves(cotangents, is_leaf=lambda c: isinstance(c, SymbolicZero)))
            kept, cts = [], []
            for is_float in held["floats"]:
                ct = next(given) if is_float else None
                kept.append(ct is not None and not isinstance(ct, SymbolicZero))
                if kept[-1]:
                    cts.append(ct)
            # Not at the top level when the caller jits or vmaps the pullback of an eager `jax.vjp`.
            backward = programs(at_top_level())[1]
            return backward(linear, diff, cts, tuple(kept)), None

        through.defvjp(through_fwd, through_bwd, symbolic_zeros=True)
        return eqx.combine(through(diff, nondiff), held["others"], held["static"])

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if fast_compile is not None and not fast_compile(*args, **kwargs):
            return jitted(False)(*args, **kwargs)
        if filter and _eager_reverse_mode() and compile_options() is not None:
            return reverse(args, kwargs)
        return jitted(at_top_level())(*args, **kwargs)

    return call
