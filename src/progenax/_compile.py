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
call, the command line): inside the user's `jax.jit`, `jax.grad` or
`jax.vmap` it compiles with what the user's program asks for. An XLA without
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

FAST_COMPILE = {"xla_cpu_use_fusion_emitters": False}
"""The XLA debug options of `compile_options()` (see the module notes)."""


@functools.cache
def _accepted(options: tuple) -> bool:
    """Whether this XLA takes `options` (one tiny compile, once per process)."""
    try:
        jax.jit(jnp.negative, compiler_options=dict(options)).lower(1.0).compile()
    except Exception:  # the error type of an unknown option is jaxlib's own and varies
        return False
    return True


def compile_options() -> dict | None:
    """`FAST_COMPILE` when compiling for the CPU with an XLA that has it, else
    None (also when `PROGENAX_XLA_DEFAULTS=1`)."""
    if os.environ.get("PROGENAX_XLA_DEFAULTS") == "1" or jax.default_backend() != "cpu":
        return None
    options = tuple(sorted(FAST_COMPILE.items()))
    return dict(options) if _accepted(options) else None


def at_top_level() -> bool:
    """Whether JAX is tracing nothing here (no `jit`, `grad`, `vmap`...): only
    then may a `jax.jit` carry compiler options. (JAX's own test of it is not
    public; without it the answer is False and no options are passed.)"""
    clean = getattr(_jax_core, "trace_state_clean", None)
    return bool(clean is not None and clean())


def run_once_jit(fn: Callable, *, filter: bool = False, **jit_kwargs) -> Callable:
    """`jax.jit(fn, **jit_kwargs)` (`equinox.filter_jit` with `filter=True`)
    that compiles with `compile_options()` when called at the top level
    (`at_top_level`), and with the caller's options inside a transformation.
    The jit is made at the first call, not at import: the options depend on
    the backend."""

    @functools.cache
    def jitted(top_level: bool) -> Callable:
        options = compile_options() if top_level else None
        return (eqx.filter_jit if filter else jax.jit)(fn, compiler_options=options, **jit_kwargs)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return jitted(at_top_level())(*args, **kwargs)

    return call
