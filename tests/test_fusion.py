import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax._fusion import materialize


@pytest.mark.parametrize("shape", [(1,), (13,), (64,), (5, 3)])
def test_materialize_is_exact_and_differentiable(shape):
    x = jax.random.normal(jax.random.PRNGKey(0), shape) * 1e3
    np.testing.assert_array_equal(materialize(x), x)
    g = jax.grad(lambda x: jnp.sum(jnp.sin(materialize(x))))(x)
    np.testing.assert_allclose(g, jnp.cos(x), rtol=1e-14)


def test_materialize_float32():
    x = jnp.linspace(-1, 1, 10, dtype=jnp.float32)
    out = materialize(x)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, x)
