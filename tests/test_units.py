"""`Units.G`: on the host for concrete units, traced (and differentiable) otherwise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.units import G_PHYSICAL, Units, henon_units, physical_units


def _jitted_G(units: Units):
    """G by the same formula, as XLA computes it inside a program."""
    formula = jax.jit(lambda mass, length, velocity: G_PHYSICAL * mass / (length * velocity**2))
    return formula(units.mass_msun, units.length_pc, units.velocity_kms)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_concrete_G_is_xla_s_value_and_compiles_nothing(dtype):
    systems = [
        physical_units(),
        henon_units(1e4, 1.3),
        Units("henon", jnp.asarray(0.77, dtype), jnp.asarray(5.9e4, dtype), jnp.asarray(18.3, dtype)),
    ]
    for units in systems:
        assert np.asarray(units.G).dtype == np.asarray(units.mass_msun).dtype
        np.testing.assert_array_equal(np.asarray(units.G), np.asarray(_jitted_G(units)))
        # jnp arithmetic would be staged as equations (eagerly: one-op programs,
        # each compiled on its first use); on the host G is a constant.
        assert not jax.make_jaxpr(lambda units=units: units.G)().eqns


def test_traced_units_give_a_traced_differentiable_G():
    def G_of(mass, length, velocity):
        return Units("henon", length, mass, velocity).G

    mass, length, velocity = 5.9e4, 0.77, 18.3
    grads = jax.grad(G_of, argnums=(0, 1, 2))(mass, length, velocity)
    G = G_PHYSICAL * mass / (length * velocity**2)
    np.testing.assert_allclose(grads, (G / mass, -G / length, -2.0 * G / velocity), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(G_of)(mass, length, velocity), G, rtol=1e-15)


@pytest.mark.parametrize("x64", [True, False])
def test_henon_units_of_python_floats_are_the_traced_formula_s(x64):
    # Python floats take a host path (no eager one-op programs): the same bits,
    # dtype and weak type as the jnp formula gives for the same numbers.
    rng = np.random.default_rng(1)
    cases = [(1e4, 1.3), (123.456, 0.789)] + [
        (float(10 ** rng.uniform(0, 7)), float(10 ** rng.uniform(-2, 2))) for _ in range(50)
    ]
    with jax.enable_x64(x64):
        for mass, length in cases:
            host, traced = henon_units(mass, length), henon_units(jnp.asarray(mass), jnp.asarray(length))
            for name in ("length_pc", "mass_msun", "velocity_kms"):
                a, b = getattr(host, name), getattr(traced, name)
                assert a.dtype == b.dtype and a.weak_type == b.weak_type
                assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (mass, length, name)
        # NumPy's float64 is a float subclass, but strongly typed: it keeps its type.
        numpy_units = henon_units(np.float64(1e4), np.float64(1.3))
        assert not numpy_units.velocity_kms.weak_type
