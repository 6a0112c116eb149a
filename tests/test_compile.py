"""The run-once compiler options (`progenax._compile`) and where they apply."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import progenax
from progenax import _compile


def test_cpu_gets_the_fast_compile_options():
    assert jax.default_backend() == "cpu"
    assert _compile.compile_options() == _compile.FAST_COMPILE


def test_environment_switch_turns_the_options_off(monkeypatch):
    monkeypatch.setenv("PROGENAX_XLA_DEFAULTS", "1")
    assert _compile.compile_options() is None


def test_an_option_this_xla_lacks_is_not_passed(monkeypatch):
    monkeypatch.setattr(_compile, "FAST_COMPILE", {"xla_cpu_no_such_option_in_any_version": True})
    assert _compile.compile_options() is None


def test_top_level_only_outside_every_transformation():
    seen = {}

    def probe(name):
        def f(x):
            seen[name] = _compile.at_top_level()
            return x * 2.0

        return f

    assert _compile.at_top_level()
    jax.jit(probe("jit"))(1.0)
    jax.grad(probe("grad"))(1.0)
    jax.vmap(probe("vmap"))(jnp.ones(3))
    assert seen == {"jit": False, "grad": False, "vmap": False}


def test_builder_eager_and_inside_jit_and_grad_agree():
    """The eager call compiles with the options, the jitted and differentiated
    ones without (JAX refuses options on a nested jit): all three run and give
    the same cluster, to rounding (1e-12: the two compiles may round
    transcendental functions differently in the last bit)."""
    key = jax.random.PRNGKey(3)
    eager = progenax.king_builder(key, n=256, W0=6.0, r_h=1.0).state
    jitted = jax.jit(lambda r_h: progenax.king_builder(key, n=256, W0=6.0, r_h=r_h).state)(1.0)
    np.testing.assert_allclose(jitted.positions, eager.positions, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jitted.velocities, eager.velocities, rtol=1e-12, atol=1e-12)

    def size(r_h):
        return jnp.sum(progenax.king_builder(key, n=256, W0=6.0, r_h=r_h).state.positions ** 2)

    # Positions scale exactly with r_h: d/dr_h sum |x|^2 = 2 sum |x|^2 / r_h at r_h = 1.
    np.testing.assert_allclose(jax.grad(size)(1.0), 2.0 * jnp.sum(eager.positions**2), rtol=1e-12)
