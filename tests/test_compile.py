"""The run-once compiler options (`progenax._compile`) and where they apply."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import progenax
from progenax import _compile


def test_cpu_gets_the_fast_compile_options():
    assert jax.default_backend() == "cpu"
    assert _compile.compile_options() == _compile.FAST_COMPILE
    assert _compile.FAST_COMPILE == {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}


def test_one_probe_serves_every_program():
    # A probe compiles a program in a cold process: one per process, whatever asks.
    _compile._accepted.cache_clear()
    assert _compile.compile_options() == _compile.FAST_COMPILE
    assert _compile.compile_options() == _compile.FAST_COMPILE
    assert _compile._accepted.cache_info().currsize == 1


def test_an_eager_gradient_compiles_with_the_options(monkeypatch):
    """The plain call and an eager `grad`'s forward and backward programs
    all ask for the run-once options."""
    asked, real = [], _compile.compile_options
    monkeypatch.setattr(_compile, "compile_options", lambda: asked.append(True) or real())
    cube = _compile.run_once_jit(lambda x: x**3, filter=True)
    assert float(cube(2.0)) == 8.0
    assert len(asked) == 1
    assert float(jax.grad(cube)(2.0)) == 12.0
    # The eager-grad test asks once more; the two programs, made once, once.
    assert len(asked) == 3


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


def test_eager_reverse_mode_is_only_an_eager_grad_or_vjp():
    seen = {}

    def probe(name):
        def f(x):
            seen.setdefault(name, _compile._eager_reverse_mode())
            return x * 2.0

        return f

    probe("top")(1.0)
    jax.grad(probe("grad"))(1.0)
    jax.vjp(probe("vjp"), 1.0)
    jax.jit(jax.grad(probe("jit_grad")))(1.0)
    jax.jvp(probe("jvp"), (1.0,), (1.0,))
    jax.vmap(jax.grad(probe("vmap_grad")))(jnp.ones(3))
    jax.grad(jax.grad(probe("grad_grad")))(1.0)
    assert seen == {
        "top": False,
        "grad": True,
        "vjp": True,
        "jit_grad": False,
        "jvp": False,
        "vmap_grad": False,
        "grad_grad": False,
    }


def test_builder_gradient_in_every_mode(monkeypatch):
    """An eager `grad` takes the builders' top-level forward and backward
    (`run_once_jit`'s custom VJP); the gradient equals the jitted one, forward
    mode, a jitted pullback and `jacrev` to rounding (1e-12: other compiles
    round the last bits apart)."""
    key = jax.random.PRNGKey(3)

    def second_moments(r_h, Q):
        s = progenax.plummer_builder(key, n=256, r_h=r_h, Q=Q).state
        return jnp.sum(s.masses * (jnp.sum(s.positions**2, 1) + jnp.sum(s.velocities**2, 1)))

    detected = []
    real = _compile._eager_reverse_mode
    monkeypatch.setattr(_compile, "_eager_reverse_mode", lambda: detected.append(real()) or detected[-1])
    eager = jax.grad(second_moments, argnums=(0, 1))(1.0, 0.5)
    assert detected == [True]

    jitted = jax.jit(jax.grad(second_moments, argnums=(0, 1)))(1.0, 0.5)
    np.testing.assert_allclose(eager, jitted, rtol=1e-12)
    _, tangent = jax.jvp(second_moments, (1.0, 0.5), (1.0, 0.0))
    np.testing.assert_allclose(tangent, eager[0], rtol=1e-12)
    _, pullback = jax.vjp(second_moments, 1.0, 0.5)
    np.testing.assert_allclose(jax.jit(pullback)(1.0), eager, rtol=1e-12)
    rows = jax.jacrev(lambda p: jnp.stack([second_moments(*p), 2.0 * second_moments(*p)]))(jnp.array([1.0, 0.5]))
    np.testing.assert_allclose(rows, [eager, 2.0 * np.asarray(eager)], rtol=1e-12)
    # jit(grad), jvp: no; vjp, and jacrev (an eager vjp, its pullback vmapped) of two builds: yes
    assert detected[1:] == [False, False, True, True, True], detected


def test_outputs_without_a_cotangent_stay_out_of_an_eager_gradient():
    """d/dx of the second output only: the first output's infinite partial at
    x = 1 must not meet its zero cotangent (0 * inf = NaN), as in JAX's own
    reverse pass (symbolic zeros). The error-free answer is 2."""
    pair = _compile.run_once_jit(lambda x: (jnp.sqrt(x - 1.0), 2.0 * x), filter=True)
    assert float(jax.grad(lambda x: pair(x)[1])(1.0)) == 2.0
    assert np.isinf(float(jax.grad(lambda x: pair(x)[0])(1.0)))


def test_a_call_that_runs_long_compiles_with_xla_defaults(monkeypatch):
    """`fast_compile` false: no options, eagerly or under an eager `grad`. An
    option no XLA has makes the difference visible: passing it fails the compile."""
    monkeypatch.setattr(_compile, "compile_options", lambda: {"xla_cpu_no_such_option_in_any_version": True})
    scaled = _compile.run_once_jit(
        lambda x, n: x * n, filter=True, fast_compile=lambda x, n: _compile.mesh_compiles_fast(n)
    )
    long_run = _compile.MESH_FAST_COMPILE_MAX_N + 1
    assert float(scaled(2.0, long_run)) == 2.0 * long_run
    assert float(jax.grad(lambda x: scaled(x, long_run))(2.0)) == long_run
    with pytest.raises(Exception, match="no_such_option"):
        scaled(2.0, _compile.MESH_FAST_COMPILE_MAX_N)


def test_the_cores_that_sum_the_mesh_w_of_many_stars_run_with_xla_defaults(monkeypatch):
    from progenax.gravoturb import builders as gravoturb
    from progenax.io import summary

    limit, key, Q = _compile.MESH_FAST_COMPILE_MAX_N, jax.random.PRNGKey(0), jnp.asarray(0.5)
    assert _compile.mesh_core_compiles_fast(key, limit) and not _compile.mesh_core_compiles_fast(key, limit + 1)
    stars = gravoturb._stars_compile_fast
    assert stars(key, limit, 10.0, 0.2, 2.3, Q, None, "physical")
    assert not stars(key, limit + 1, 10.0, 0.2, 2.3, Q, None, "physical")
    assert stars(key, limit + 1, 10.0, 0.2, 2.3, None, None, "physical")  # no W without Q ...
    assert not stars(key, limit + 1, 10.0, 0.2, 2.3, None, None, "henon")  # ... unless for the Henon unit
    many = jnp.zeros((limit + 1, 3))
    assert not summary._measures_compile_fast(many, None, None, None, None, 1.0, None, "mesh")
    assert summary._measures_compile_fast(many, None, None, None, None, 1.0, None, "spherical")
    assert summary._measures_compile_fast(many, None, None, None, None, 1.0, jnp.asarray(-1.0), "mesh")  # W known
    # The builders' cores ask: each call passes its n to the predicate.
    asked = []
    monkeypatch.setattr(_compile, "mesh_compiles_fast", lambda n: asked.append(n) or True)
    assert progenax.fractal_builder(key, n=64, Q=0.5).n == 64
    assert asked == [64]


@pytest.mark.parametrize("x64", [True, False])
def test_an_int_seed_gives_the_key_prngkey_gives(x64):
    from progenax.builders._common import as_key

    seeds = [0, 1, 12345, 2**31 - 1, np.int64(7), np.uint32(99)] + ([2**31, 2**32 + 5, -3] if x64 else [-3])
    with jax.enable_x64(x64):
        for seed in seeds:
            got, want = as_key(seed), jax.random.PRNGKey(int(seed))
            assert got.dtype == want.dtype and got.shape == want.shape and got.weak_type == want.weak_type
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_an_integer_array_is_a_seed_so_builders_vmap_over_seeds():
    """A 0-d integer array, concrete or traced, is a seed: `vmap` over seeds
    raised "invalid PRNG key data"; anything not a key or a seed is a
    ValueError naming `key`."""
    from progenax.builders._common import as_key

    build = lambda seed: progenax.plummer_builder(seed, n=50).state.positions  # noqa: E731
    batched = jax.vmap(build)(jnp.arange(3))
    for seed in range(3):
        np.testing.assert_array_equal(np.asarray(batched[seed]), np.asarray(build(seed)))
    np.testing.assert_array_equal(np.asarray(build(jnp.array(2))), np.asarray(build(2)))
    assert build(jax.random.key(0)).shape == (50, 3)  # a typed key passes through
    for bad in (3.0, jnp.array([1.0, 2.0]), jnp.array(1.5), "a", None, True, np.bool_(True)):
        with pytest.raises(ValueError, match="key must be a jax.random key or an int seed"):
            as_key(bad)


def test_a_fresh_process_compiles_nothing_for_a_seed_or_a_float_parameter(tmp_path):
    # An int seed's key and a Python float's range check are made on the host:
    # `jax.random.PRNGKey` and `jnp.asarray(1.0, dtype=...)` each compile a
    # one-op program on their first call in a process (tens of ms of a cold build).
    import subprocess
    import sys

    script = (
        "import logging, jax\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "jax.config.update('jax_log_compiles', True)\n"
        "from progenax.builders._common import as_key, check_common_arguments\n"
        "as_key(5); check_common_arguments(100, 'physical', 'kroupa', 1.0, 2, 0.5)\n"
        "from progenax.validation import as_float, check_range\n"
        "as_float(3); check_range('x', 2.5, lower=0.0)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "Compiling" not in result.stderr, result.stderr
