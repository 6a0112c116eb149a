"""Banded pair sums (sph.pairs on the neighbour engine, scatter form): exact
against brute force, gradients included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.neighbours import minimum_image
from progenax.sampling import safe_norm
from progenax.sph.kernels import get_kernel
from progenax.sph.pairs import build_bands, pair_sum, safe_distance
from progenax.sph.relax import _density_pair, _loss_gradient_features, _loss_gradient_pair

CUBIC = get_kernel("cubic")


def _brute_density(x, m, h, box=None):
    dx = x[:, None, :] - x[None, :, :]
    if box is not None:
        dx = minimum_image(dx, box)
    return jnp.sum(m[None, :] * CUBIC.value(safe_norm(dx), h[:, None], x.shape[1]), axis=1)


def _clustered(n, dim, seed=1):
    """Positions spread over ~3 decades of density, h following the density."""
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    x = jax.random.normal(k1, (n, dim)) * jnp.exp(1.2 * jax.random.normal(k2, (n, 1)))
    m = jax.random.uniform(k3, (n,), minval=0.5, maxval=1.5)
    r = jnp.linalg.norm(x, axis=1)
    return x, m, 0.15 * (1.0 + r) ** 1.5


def _banded_density(x, m, h, box=None):
    bands = build_bands(x, 2.0 * h, box=box, n_bands=4)
    return pair_sum(_density_pair("cubic", x.shape[1]), bands, {"x": x, "m": m, "h": h}, 1)[:, 0]


def _banded_direction(x, m, h, e, box=None):
    """The relaxation step's direction: the gather form of dL/dx at fixed h."""
    bands = build_bands(x, 2.0 * h, box=box, n_bands=4)
    return pair_sum(
        _loss_gradient_pair("cubic", x.shape[1]), bands, _loss_gradient_features("cubic", x, m, h, e), x.shape[1]
    )


def _action_reaction_pair(a_i, a_j, dx):
    """dL/dx at fixed h in scatter form: the query gets e_i m_j F(r, h_i) dx,
    the neighbour minus that (exact for any h; exercises pair_sum's scatter)."""
    r = safe_distance(dx)
    coef = a_i["e"] * a_j["m"] * CUBIC.gradient_factor(r, a_i["h"], len(dx))
    to_i = tuple(coef * d for d in dx)
    return to_i, tuple(-t for t in to_i)


def _scatter_direction(x, m, h, e, box=None):
    bands = build_bands(x, 2.0 * h, box=box, n_bands=4)
    return pair_sum(_action_reaction_pair, bands, {"x": x, "m": m, "h": h, "e": e}, x.shape[1], scatter=True)


def _brute_gather_direction(x, m, h, e):
    """Σ_j [e_i m_j F(r, h_i) + e_j m_i F(r, h_j)] (x_i - x_j) over r < 2 h_i."""
    dim = x.shape[1]
    dx = x[:, None, :] - x[None, :, :]
    r = safe_norm(dx)
    coef = e[:, None] * m[None, :] * CUBIC.gradient_factor(r, h[:, None], dim) + e[None, :] * m[
        :, None
    ] * CUBIC.gradient_factor(r, h[None, :], dim)
    coef = jnp.where(r < 2.0 * h[:, None], coef, 0.0)
    return jnp.sum(coef[:, :, None] * dx, axis=1)


def _pair_magnitudes(x, m, h, cotangent):
    """Per-particle sums of the absolute pair terms of the density's pullback to
    x and h: float64 round-off in a sum of terms bounded by B is ~N eps B, and
    these sums cancel strongly for clustered particles, so B (not the result)
    sets the scale of the comparison."""
    dim = x.shape[1]
    dx = x[:, None, :] - x[None, :, :]
    r = safe_norm(dx)
    f_i = jnp.abs(CUBIC.gradient_factor(r, h[:, None], dim))  # F(r_ij, h_i)
    g = jnp.abs(cotangent)
    coef = g[:, None] * m[None, :] * f_i + g[None, :] * m[:, None] * f_i.T
    b_x = jnp.sum(coef[:, :, None] * jnp.abs(dx), axis=1)
    b_h = g * jnp.sum(m[None, :] * jnp.abs(CUBIC.h_derivative(r, h[:, None], dim)), axis=1)
    return b_x, b_h


# 2D is the slower compile and covered by the periodic test below: run by `make validate`.
@pytest.mark.parametrize("dim", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_banded_density_and_its_pullback_equal_brute_force(dim):
    x, m, h = _clustered(300, dim)
    np.testing.assert_allclose(_banded_density(x, m, h), _brute_density(x, m, h), rtol=1e-12)
    cotangent = jax.random.normal(jax.random.PRNGKey(7), (x.shape[0],))
    got = jax.vjp(_banded_density, x, m, h)[1](cotangent)
    want = jax.vjp(_brute_density, x, m, h)[1](cotangent)
    b_x, b_h = _pair_magnitudes(x, m, h, cotangent)
    # 300 terms: round-off <= 300 * 2.2e-16 * B ~ 7e-14 B; 1e-12 B leaves a margin of 15.
    assert bool(jnp.all(jnp.abs(got[0] - want[0]) <= 1e-12 * b_x + 1e-300))
    assert bool(jnp.all(jnp.abs(got[2] - want[2]) <= 1e-12 * b_h + 1e-300))
    # The mass pullback sums cotangent * W with W >= 0: bounded by the same
    # sum with |cotangent|, computed by the brute force itself.
    b_m = jax.vjp(_brute_density, x, m, h)[1](jnp.abs(cotangent))[1]
    assert bool(jnp.all(jnp.abs(got[1] - want[1]) <= 1e-12 * b_m))


def test_periodic_banded_density_equals_brute_force():
    key = jax.random.PRNGKey(3)
    x = jax.random.uniform(key, (400, 2)) * 4.0
    m = jnp.ones(400)
    h = 0.12 + 0.2 * x[:, 0] / 4.0  # h varies 2.7x across the box; periodic images matter at the edges
    box = jnp.full(2, 4.0)
    np.testing.assert_allclose(_banded_density(x, m, h, box), _brute_density(x, m, h, box), rtol=1e-12)


# End-to-end gradients through relax are checked against finite differences in
# the default suite (test_relax.py); this finer check runs in `make validate`.
@pytest.mark.slow
def test_loss_direction_and_its_derivative_equal_autodiff_of_brute_force():
    """Differentiating through the relaxation step's direction (what jax.grad
    through relax does) matches second-order autodiff of the brute-force sum."""
    x, m, h = _clustered(120, 3, seed=4)
    target = 0.05

    def brute_direction(x, m, h):
        return _brute_gather_direction(x, m, h, 2.0 * (_brute_density(x, m, h) - target))

    def banded(x, m, h):
        e = 2.0 * (_banded_density(x, m, h) - target)
        return _banded_direction(x, m, h, e)

    want = brute_direction(x, m, h)
    np.testing.assert_allclose(banded(x, m, h), want, rtol=1e-9, atol=1e-11 * float(jnp.max(jnp.abs(want))))
    weights = jnp.arange(x.shape[0], dtype=x.dtype)[:, None]
    got = jax.jit(jax.grad(lambda *a: jnp.sum(weights * banded(*a) ** 2), argnums=(0, 1, 2)))(x, m, h)
    ref = jax.jit(jax.grad(lambda *a: jnp.sum(weights * brute_direction(*a) ** 2), argnums=(0, 1, 2)))(x, m, h)
    for g, r in zip(got, ref):
        # Second-order sums cancel like the first-order ones (see _pair_magnitudes);
        # 1e-9 of the largest entry is ~1e4 times float64 round-off over 120^2 terms.
        np.testing.assert_allclose(g, r, rtol=1e-8, atol=1e-9 * float(jnp.max(jnp.abs(r))))


def test_gather_direction_equals_brute_force_and_is_the_gradient_at_uniform_h():
    """The step direction's gather form sums exactly what it says (against a
    brute-force sum over all pairs), and with one h everywhere, where no pair
    is in one ball but not the other, it is dL/dx at fixed h exactly."""
    x, m, h = _clustered(200, 3, seed=5)
    e = jax.random.normal(jax.random.PRNGKey(2), (200,))
    want = _brute_gather_direction(x, m, h, e)
    scale = float(jnp.max(jnp.abs(want)))
    np.testing.assert_allclose(_banded_direction(x, m, h, e), want, rtol=1e-10, atol=1e-12 * scale)
    h_one = jnp.full_like(h, float(jnp.median(h)))
    exact = jax.grad(lambda x: jnp.sum(e * _brute_density(x, m, h_one)))(x)
    np.testing.assert_allclose(
        _banded_direction(x, m, h_one, e), exact, rtol=1e-9, atol=1e-11 * float(jnp.max(jnp.abs(exact)))
    )


def test_scatter_pass_is_the_exact_gradient_for_any_h():
    x, m, h = _clustered(200, 3, seed=6)
    e = jax.random.normal(jax.random.PRNGKey(3), (200,))
    exact = jax.grad(lambda x: jnp.sum(e * _brute_density(x, m, h)))(x)
    np.testing.assert_allclose(
        _scatter_direction(x, m, h, e), exact, rtol=1e-9, atol=1e-11 * float(jnp.max(jnp.abs(exact)))
    )


def test_query_runs_listed_in_blocks_are_complete(monkeypatch):
    """A banded build lists runs for its queries only, in blocks: with blocks
    much smaller than N (many trips, a partial last one) every query's
    candidates hold every particle inside its own support, and the other
    particles have none."""
    from progenax.neighbours import cells

    x, _, h = _clustered(1000, 3)
    support = 2.0 * h
    query = jax.random.uniform(jax.random.PRNGKey(5), (1000,)) < 0.3
    reach = jnp.max(jnp.where(query, support, 0.0))
    monkeypatch.setattr(cells, "_QUERY_BLOCK", 37)  # read when traced
    blocked = jax.jit(
        lambda x: cells.build_cell_list(
            x, reach, cells_per_reach=2, x_cells_per_reach=8, query=query, query_reach=support
        )
    )(x)
    is_query = np.asarray(query[blocked.order])
    counts = np.asarray(cells.candidate_counts(blocked))
    assert np.all(counts[~is_query] == 0) and np.all(counts[is_query] > 0)
    sorted_x = np.asarray(blocked.positions.T)
    own_support = np.asarray(support[blocked.order])
    begin, length = np.asarray(blocked.run_begin), np.asarray(blocked.run_length)
    for t in np.flatnonzero(is_query):
        listed = np.concatenate([np.arange(b, b + n) for b, n in zip(begin[t], length[t])])
        inside = np.flatnonzero(np.linalg.norm(sorted_x - sorted_x[t], axis=1) < own_support[t])
        assert set(inside.tolist()) <= set(listed.tolist())
