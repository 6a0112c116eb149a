"""The fast float orders of `progenax._sort` against NumPy's stable argsort."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax._sort import float_order, inverse_permutation

# (No subnormals: XLA on CPU flushes them to zero, NumPy orders them.)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-300, -1e-300]


def _values(rng, n: int, dtype) -> np.ndarray:
    """Signed values over many decades, exact ties (every value drawn twice,
    at random places) and the special values, in `dtype`."""
    half = rng.standard_normal(n // 2) * 10.0 ** rng.uniform(-30, 30, n // 2)
    values = np.concatenate([half, half, SPECIAL]).astype(dtype)
    return values[rng.permutation(values.size)]


def _reference(values: np.ndarray) -> np.ndarray:
    # NumPy, like jnp.argsort, ties -0.0 with 0.0 and puts NaN last.
    return np.argsort(values, kind="stable")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_float_order_is_the_stable_argsort_for_signed_values(dtype):
    # Drawn values are far apart (relative gaps of ~1e-3 at 4,000 values, far
    # above float64's 2^(b - 52) = 2.8e-12 merge width at b = 12 index bits),
    # so the order is exact in both dtypes, ties in index order.
    rng = np.random.default_rng(7)
    values = _values(rng, 4000, dtype)
    got = jax.jit(float_order)(jnp.asarray(values))
    np.testing.assert_array_equal(np.asarray(got), _reference(values))


def test_float_order_keeps_index_order_within_its_float64_resolution():
    # n = 4 takes b = 2 index bits: values within 2^(2 - 52) relative share a
    # key and keep their index order (the module's documented trade); a gap
    # of 2^-40 relative is resolved.
    values = np.array([1.0 + 2.0**-51, 1.0, 1.0 + 2.0**-40, 1.0 - 2.0**-40])
    got = np.asarray(jax.jit(float_order)(jnp.asarray(values)))
    np.testing.assert_array_equal(got, [3, 0, 1, 2])


def test_float_order_without_x64_is_argsort():
    rng = np.random.default_rng(8)
    values = _values(rng, 1000, np.float32)
    with jax.enable_x64(False):
        got = jax.jit(float_order)(jnp.asarray(values))
        assert got.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), _reference(values))


def test_inverse_permutation_is_the_rank():
    rng = np.random.default_rng(9)
    values = rng.standard_normal(1000)
    order = np.argsort(values, kind="stable")
    ranks = jax.jit(inverse_permutation)(jnp.asarray(order))
    np.testing.assert_array_equal(np.asarray(ranks), np.argsort(order))
