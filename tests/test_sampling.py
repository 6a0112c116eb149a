import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.kinematics.plummer_df import sample_speed_fraction, speed_fraction_cdf
from progenax.sampling import inverse_cdf, isotropic_directions, ndtri, solve_increasing, uniform_open, where_sparse


def test_solve_increasing_root_and_implicit_gradient():
    # F(x) = x^3 + theta x = t  =>  dx/dtheta = -x / (3x^2 + theta), dx/dt = 1/(3x^2 + theta)
    def solve(theta, t):
        return solve_increasing(lambda x: x**3 + theta * x, t, 0.0, 10.0, num_steps=60)

    theta, t = 2.0, 5.0
    x = solve(theta, t)
    assert abs(x**3 + theta * x - t) < 1e-13
    dtheta, dt = jax.grad(solve, argnums=(0, 1))(theta, t)
    slope = 3 * x**2 + theta
    np.testing.assert_allclose(dtheta, -x / slope, rtol=1e-12)
    np.testing.assert_allclose(dt, 1.0 / slope, rtol=1e-12)


def test_converged_root_is_not_moved_by_extra_steps():
    # Regression: once F(x) == t exactly, a further step must keep x.
    f = lambda x: 2.0 * x
    for steps in (1, 5, 20):
        np.testing.assert_allclose(solve_increasing(f, 1.0, 0.0, 1.0, num_steps=steps), 0.5)


def test_plummer_speed_inverse_cdf_reaches_machine_precision():
    u = jax.random.uniform(jax.random.PRNGKey(3), (100_000,))
    q = sample_speed_fraction(u)
    residual = jnp.abs(speed_fraction_cdf(jnp.arcsin(q)) - u)
    assert float(residual.max()) < 1e-14


def test_plummer_speed_cdf_matches_beta_distribution():
    # q^2 = (v / v_esc)^2 follows Beta(3/2, 9/2) for the Plummer DF.
    from scipy import stats

    q2 = np.linspace(0.0, 1.0, 101)
    theta = np.arcsin(np.sqrt(q2))
    np.testing.assert_allclose(speed_fraction_cdf(jnp.asarray(theta)), stats.beta(1.5, 4.5).cdf(q2), atol=1e-14)


def test_inverse_cdf_gradient_through_closed_over_parameter():
    # Exponential on [0, 5] truncated: F(x) = (1 - e^{-lam x}) / (1 - e^{-5 lam}).
    grid = jnp.linspace(0.0, 5.0, 64)

    def sample(lam, u):
        cdf = lambda x: -jnp.expm1(-lam * x) / -jnp.expm1(-5.0 * lam)
        return inverse_cdf(cdf, u, grid)

    u = jnp.array([0.1, 0.5, 0.9])
    h = 1e-6
    fd = (sample(1.3 + h, u) - sample(1.3 - h, u)) / (2 * h)
    ad = jax.jacfwd(sample)(1.3, u)
    np.testing.assert_allclose(ad, fd, rtol=1e-7)


def test_uniform_open_never_hits_ends_and_directions_are_unit():
    u = uniform_open(jax.random.PRNGKey(0), (10_000,))
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0
    d = isotropic_directions(jax.random.PRNGKey(1), 10_000)
    np.testing.assert_allclose(jnp.linalg.norm(d, axis=1), 1.0, rtol=1e-12)
    # Isotropy: each component has mean 0 with standard error sqrt(1/3 / n) = 0.0058.
    assert float(jnp.abs(d.mean(0)).max()) < 4 * np.sqrt(1 / 3 / 10_000)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_stored_directions_are_the_fused_ones_bit_for_bit(dtype):
    # `stored=True` only keeps cos(phi) and sin(phi) in memory: the same bits,
    # jitted as the builders run it, for n not a multiple of the store's width.
    key = jax.random.PRNGKey(3)
    directions = jax.jit(isotropic_directions, static_argnums=(1, 2), static_argnames="stored")
    fused, stored = directions(key, 1001, dtype, stored=False), directions(key, 1001, dtype, stored=True)
    assert stored.dtype == dtype and stored.shape == (1001, 3)
    np.testing.assert_array_equal(np.asarray(stored), np.asarray(fused))


@pytest.mark.parametrize("name", ["plummer_builder"])
def test_builders_contain_no_while_loop(name):
    import progenax

    build = getattr(progenax, name)
    jaxpr = str(jax.make_jaxpr(lambda k: build(k, n=64).state)(jax.random.PRNGKey(0)))
    assert "while" not in jaxpr


def test_plummer_speed_extreme_tails():
    # The end cells use power-law first guesses; check them at extreme u.
    u = jnp.concatenate([jnp.geomspace(1e-15, 1e-3, 200), 1.0 - jnp.geomspace(1e-15, 1e-3, 200)])
    q = sample_speed_fraction(u)
    assert bool(jnp.all((q >= 0) & (q <= 1)))
    residual = jnp.abs(speed_fraction_cdf(jnp.arcsin(q)) - u)
    assert float(residual.max()) < 1e-14


def _costly(x, y):
    # No multiply-add: XLA may contract one into an FMA in one program and not
    # in another, which would move the last bit between the two paths.
    return jnp.arcsin(jnp.sin(x) * y)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("fraction", [0.002, 1.0])  # sparse path, and more True than slots (dense path)
def test_where_sparse_equals_where(dtype, fraction):
    n = 20_000
    kx, ky, km = jax.random.split(jax.random.PRNGKey(5), 3)
    x = jax.random.uniform(kx, (n,), dtype)
    y = jax.random.uniform(ky, (n,), dtype)
    mask = jax.random.uniform(km, (n,)) < fraction
    default = -x
    expected = jax.jit(lambda m, x, y, d: jnp.where(m, _costly(x, y), d))(mask, x, y, default)
    got = jax.jit(lambda m, x, y, d: where_sparse(m, _costly, (x, y), d, expected_fraction=0.002, min_size=0))(
        mask, x, y, default
    )
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_where_sparse_shape_vmap_and_gradient():
    x = jax.random.uniform(jax.random.PRNGKey(6), (4, 50, 20))
    mask = x < 0.01
    dense = lambda x: jnp.sum(jnp.where(mask, _costly(x, x), x**2))
    sparse = lambda x: jnp.sum(where_sparse(mask, _costly, (x, x), x**2, expected_fraction=0.01, min_size=0))
    np.testing.assert_array_equal(np.asarray(sparse(x)), np.asarray(dense(x)))
    np.testing.assert_allclose(jax.grad(sparse)(x), jax.grad(dense)(x), rtol=1e-14)
    rows = jax.vmap(lambda m, x: where_sparse(m, _costly, (x, x), x**2, expected_fraction=0.01, min_size=0))(mask, x)
    np.testing.assert_array_equal(np.asarray(rows), np.asarray(jnp.where(mask, _costly(x, x), x**2)))


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_ndtri_values_and_closed_form_derivative(dtype):
    # Values: jax.scipy's, bit for bit. Derivative: 1 / phi(x), against scipy's
    # normal density and against differentiating jax.scipy's rational
    # approximation itself (each branch: the centre |p - 1/2| < 0.36, and
    # both tails), to a few ulp of the dtype.
    import scipy.stats

    p = jnp.asarray([1e-30, 1e-10, 0.01, 0.2, 0.5, 0.7, 0.99, 1 - 1e-10], dtype)
    if dtype == jnp.float32:
        p = p[(p > 1e-30) & (p < 1 - 1e-10)]
    x = ndtri(p)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(jax.scipy.special.ndtri(p)))
    slope = jax.vmap(jax.grad(ndtri))(p)
    expected = 1.0 / scipy.stats.norm.pdf(np.asarray(x, np.float64))
    rtol = 1e-12 if dtype == jnp.float64 else 1e-5
    np.testing.assert_allclose(np.asarray(slope, np.float64), expected, rtol=rtol)
    autodiff = jax.vmap(jax.grad(jax.scipy.special.ndtri))(p)
    np.testing.assert_allclose(np.asarray(slope), np.asarray(autodiff), rtol=1e3 * float(jnp.finfo(dtype).eps))
