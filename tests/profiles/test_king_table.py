"""The tabulated King profile: the solve's values, C1 in W0, its range enforced."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.profiles.king import W0_MAX, king_potential, solve_king_profile
from progenax.profiles.king_table import TABLE_W0_MIN, interpolated_king_profile, king_table

NUM_POINTS = 256


def _solve(W0):
    return solve_king_profile(W0, 1.0, num_points=NUM_POINTS)


@pytest.fixture(scope="module")
def both():
    # Both ends and 60 random W0: the interpolant is worst in the cells of small W0.
    rng = np.random.default_rng(3)
    W0 = jnp.asarray(np.concatenate([[TABLE_W0_MIN, W0_MAX], rng.uniform(TABLE_W0_MIN, W0_MAX, 60)]))
    solved = jax.jit(jax.vmap(_solve))(W0)
    table = jax.jit(jax.vmap(interpolated_king_profile))(W0)
    return W0, solved, table


def _relative(a, b, axis=None):
    a, b = np.asarray(a), np.asarray(b)
    scale = np.max(np.abs(a), axis=axis, keepdims=axis is not None)
    return np.max(np.abs(a - b) / scale)


def test_table_reproduces_the_solve(both):
    """Every field within a few 1e-6 of the solve (measured: W_raw 6e-8, r_t 5e-7, r_h 2e-6,
    M 4e-6 of its largest node). The solve's own r_h and r_t are not quite smooth in W0
    (they move with the bracketing grid node), which bounds what any table can reach;
    10^-5 is far below what data constrain (a 2,000-star King posterior has sd ~1 %)."""
    _, solved, table = both
    for name in ("W_raw", "mass"):
        assert _relative(getattr(solved, name), getattr(table, name), axis=-1) < 1e-5, name
    for name in ("r_t", "r_h", "r_v", "total_mass"):
        a, b = np.asarray(getattr(solved, name)), np.asarray(getattr(table, name))
        assert np.max(np.abs(a - b) / np.abs(a)) < 1e-5, name
    np.testing.assert_array_equal(np.asarray(table.r[0]), np.asarray(solved.r[0]))


def test_potential_at_the_stars_matches(both):
    """W(r) at radii 0 to 3 r_h, what the likelihood reads, within 1e-5 of W0."""
    W0, solved, table = both
    x = jnp.linspace(0.0, 3.0, 41)
    at = jax.vmap(lambda p: king_potential(p, x * p.r_h))
    assert np.max(np.abs(at(solved) - at(table)) / np.asarray(W0)[:, None]) < 1e-5


def test_profile_is_c1_across_a_table_node():
    """The Hermite interpolant joins value and slope at a node: left and right limits agree."""
    u = king_table(NUM_POINTS, "float64").u
    for node in (u[7], u[200], u[-5]):
        W0 = float(np.exp(node))
        for field in ("r_h", "r_t"):

            def f(w, field=field):
                return getattr(interpolated_king_profile(w), field)

            left, right = W0 * (1 - 1e-12), W0 * (1 + 1e-12)
            np.testing.assert_allclose(f(left), f(right), rtol=1e-10)
            np.testing.assert_allclose(jax.grad(f)(left), jax.grad(f)(right), rtol=1e-9)


def test_gradient_is_the_interpolants_and_near_the_solves():
    """Autodiff equals central differences of the table (its own gradient, exact),
    and the solve's gradient to 1e-3 (the solve's r_h is smooth only to ~1e-4 in slope)."""

    def ratio(profile):
        return lambda w: profile(w).r_h / profile(w).r_t

    def each(f):
        return jax.jit(jax.vmap(f))

    W0, h = jnp.array([0.7, 3.3, 9.1, 17.0]), 1e-5
    f = each(ratio(interpolated_king_profile))
    grad = each(jax.grad(ratio(interpolated_king_profile)))(W0)
    fd = (f(W0 + h) - f(W0 - h)) / (2 * h)
    # Rounding ~ eps / h ~ 1e-11 of f; truncation h^2 f''' / 6 smaller.
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(grad, each(jax.grad(ratio(_solve)))(W0), rtol=1e-3, atol=1e-6)


def test_range_is_enforced_eagerly_and_under_jit():
    for bad in (TABLE_W0_MIN / 2, W0_MAX + 1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="W0"):
            interpolated_king_profile(bad)
        with pytest.raises(Exception, match="W0"):
            jax.jit(lambda w: interpolated_king_profile(w).r_h)(bad).block_until_ready()


def test_float32():
    def r_h(w):
        return interpolated_king_profile(w).r_h

    exact = float(_solve(4.0).r_h)
    with jax.enable_x64(False):
        value, grad = jax.jit(jax.value_and_grad(r_h))(jnp.float32(4.0))
        assert value.dtype == jnp.float32 and grad.dtype == jnp.float32
        # float32 rounding of a 255-step solve and of the Hermite sums: ~1e-6.
        np.testing.assert_allclose(float(value), exact, rtol=1e-5)
        assert np.isfinite(float(grad))
