"""The Knothe-Rosenblatt placement: exact 1D quantiles, cell masses, stratification, smoothness."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import quad

from progenax.gravoturb.placement import knothe_rosenblatt, smooth_positions, smooth_quantile

G = 8
N = 4000
# One compile of the placement serves every float64 test (same n, grid and dtype).
_place = jax.jit(smooth_positions, static_argnums=2)


def _interp(values, t):
    """Smoothstep interpolation between cell centres i + 1/2 along the last axis of `values`,
    constant beyond the ends (numpy); `t` broadcasts against the leading axes."""
    t = np.asarray(t, dtype=float)
    g = values.shape[-1]
    values = np.broadcast_to(values, np.broadcast_shapes(t.shape, values.shape[:-1]) + (g,))
    c = np.broadcast_to(np.clip(t - 0.5, 0.0, g - 1.0), values.shape[:-1])
    i0 = np.minimum(np.floor(c).astype(int), g - 2)
    f = c - i0
    s = f**3 * (6 * f**2 - 15 * f + 10)
    lo = np.take_along_axis(values, i0[..., None], -1)[..., 0]
    hi = np.take_along_axis(values, i0[..., None] + 1, -1)[..., 0]
    return (1 - s) * lo + s * hi


def _overlap_matrix(g):
    r"""A[i, a] = \int_{cell a} \psi_i. Half a cell of the smoothstep hat holds
    1/2 - \int_0^{1/2} S = 27/64 next to its centre and 5/64 beyond: 27/32 on the
    diagonal, 5/64 beside it, 59/64 at the clamped ends."""
    a = 27 / 32 * np.eye(g) + 5 / 64 * (np.eye(g, k=1) + np.eye(g, k=-1))
    a[0, 0] = a[-1, -1] = 59 / 64
    return a


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(3)
    return jnp.asarray(np.exp(rng.normal(0.0, 1.0, (G, G, G))))


def test_quantile_inverts_the_piecewise_linear_cdf():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(size=G))
    values[2] = 0.0  # a zero node: the density touches 0 there
    u = np.linspace(0.0, 1.0, 201)
    t = np.asarray(jax.jit(smooth_quantile)(jnp.asarray(values), jnp.asarray(u)))
    # Reference CDF by adaptive quadrature, breaking at every node (an independent integral).
    nodes = np.arange(G) + 0.5

    def cdf(x):
        return quad(lambda y: _interp(values, y), 0.0, x, points=nodes[nodes < x], epsabs=1e-14, limit=200)[0]

    total = cdf(float(G))
    np.testing.assert_allclose([cdf(x) / total for x in t], u, atol=1e-11)
    assert np.all(np.diff(t) >= 0) and t[0] == 0.0 and t[-1] == pytest.approx(G)


def test_cell_counts_follow_the_trilinear_cell_masses(weights):
    n = N
    positions, density = _place(jax.random.PRNGKey(0), weights, n, jnp.asarray(float(G)))
    t = np.asarray(positions) + 0.5 * G  # box of side G: cell units
    cells = np.clip(np.floor(t).astype(int), 0, G - 1)
    counts = np.zeros((G, G, G))
    np.add.at(counts, tuple(cells.T), 1)
    a = _overlap_matrix(G)
    mass = np.einsum("ijk,ia,jb,kc->abc", np.asarray(weights), a, a, a)
    expected = n * mass / mass.sum()
    chi2 = np.sum((counts - expected) ** 2 / expected)
    dof = G**3 - 1
    # Multinomial counts: chi2 ~ dof +- sqrt(2 dof) (stratification in x only lowers it);
    # 5 sigma keeps a false alarm below 1e-6 and still catches a wrong conditional.
    assert chi2 < dof + 5.0 * np.sqrt(2.0 * dof), chi2
    # The returned density is the interpolated weight at each particle.
    w = np.asarray(weights)
    m = 1000  # the tensor-product interpolation at the first m particles: z, then y, then x
    lines = _interp(np.broadcast_to(w, (m, G, G, G)), t[:m, 2, None, None])
    ref = _interp(_interp(lines, t[:m, 1, None]), t[:m, 0])
    np.testing.assert_allclose(np.asarray(density)[:m], ref, rtol=1e-10)


def test_x_marginal_is_stratified(weights):
    """Count with t_x < m within one of n F_x(m), F_x(m) = sum_{i<m} W_i - (5/64)(W_{m-1} - W_m)."""
    n = N
    positions, _ = _place(jax.random.PRNGKey(1), weights, n, jnp.asarray(float(G)))
    t_x = np.asarray(positions)[:, 0] + 0.5 * G
    big_w = np.asarray(jnp.sum(weights, axis=(1, 2)))
    for m in range(1, G):
        f = (big_w[:m].sum() - 5 / 64 * (big_w[m - 1] - big_w[m])) / big_w.sum()
        assert abs(np.sum(t_x < m) - n * f) <= 1.0 + 1e-9


def test_zero_weight_cells_only_at_one_cell_from_weighted_ones():
    """A ball of weighted cells: particles stay within one cell (sqrt(3) cell diagonals) of a weighted centre."""
    c = np.arange(G) + 0.5 - G / 2
    r2 = c[:, None, None] ** 2 + c[None, :, None] ** 2 + c[None, None, :] ** 2
    w = jnp.asarray(np.where(r2 <= (G / 2) ** 2, 1.0, 0.0))
    positions, density = _place(jax.random.PRNGKey(2), w, N, jnp.asarray(float(G)))
    r = np.linalg.norm(np.asarray(positions), axis=-1)
    assert r.max() <= G / 2 + np.sqrt(3.0)
    assert np.all(np.asarray(density) > 0)


_jvp = jax.jit(lambda w, dw, u: jax.jvp(lambda x: knothe_rosenblatt(x, u)[0], (w,), (dw,)))


def test_map_is_differentiable_in_the_weights(weights):
    """Directional derivative against central differences of the same jitted map (no second compile)."""
    rng = np.random.default_rng(4)
    u = jnp.asarray(rng.uniform(size=(64, 3)))
    dw = jnp.asarray(rng.normal(size=(G, G, G))) * weights
    _, tangent = _jvp(weights, dw, u)
    h = 1e-6
    up = _jvp(weights + h * dw, dw, u)[0]
    down = _jvp(weights - h * dw, dw, u)[0]
    fd = (up - down) / (2 * h)
    # Truncation error O(h^2) and rounding O(eps / h) ~ 1e-10 against O(1) derivatives
    # (the map is C^2: no kinks at the cell centres).
    np.testing.assert_allclose(np.asarray(fd), np.asarray(tangent), atol=1e-6)


def test_float32_finite():
    with jax.enable_x64(False):
        w = jnp.exp(jax.random.normal(jax.random.PRNGKey(0), (G, G, G), jnp.float32))
        positions, density = jax.jit(smooth_positions, static_argnums=2)(
            jax.random.PRNGKey(1), w, 256, jnp.float32(2.0)
        )
        assert positions.dtype == jnp.float32
        assert np.all(np.isfinite(np.asarray(positions))) and np.all(np.asarray(density) > 0)
        assert np.all(np.abs(np.asarray(positions)) <= 1.0)
