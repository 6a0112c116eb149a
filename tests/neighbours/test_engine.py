"""The neighbour engine: one minimum image, one safe norm, one pair-sum engine.

Exactness against brute-force sums at 1e-12 (float64): both compute the same
pair terms in a different order, so they agree to a few ulps times the number
of terms (N = 240 here).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax._sort import small_key_order
from progenax.neighbours import (
    BAND_GROUPS,
    BAND_LAYOUTS,
    LAYOUTS,
    MAX_GROUP_SIZE,
    build_cell_list,
    group_count,
    layout_for,
    make_pair_sum,
    minimum_image,
    safe_distance,
    separation,
    slots_per_particle,
)
from progenax.neighbours import cells as cells_module

N, DIM, L = 240, 3, 3.0
REACH = 0.8


def _pair(a_i, a_j, dx):
    """A smooth pair term with compact support REACH, a gathered part with two
    components and a scattered one, weighted by per-particle and shared
    features (so every cotangent path of the engine is used)."""
    r = safe_distance(dx)
    bump = jnp.where(r < REACH, (1.0 - (r / REACH) ** 2) ** 3, 0.0)
    to_i = (a_j["m"] * a_i["s"] * bump, a_i["m"] * bump * dx[0])
    to_j = (a_i["m"] * a_j["q"] * bump,)
    return to_i, to_j + (jnp.zeros_like(bump),)


def _brute(x, m, q, s, box):
    dx = x[:, None, :] - x[None, :, :]
    dx = dx if box is None else minimum_image(dx, box)
    r = jnp.where(jnp.sum(dx * dx, -1) > 0, jnp.sqrt(jnp.maximum(jnp.sum(dx * dx, -1), 1e-300)), 0.0)
    bump = jnp.where(r < REACH, (1.0 - (r / REACH) ** 2) ** 3, 0.0)
    gathered0 = jnp.sum(m[None, :] * s * bump, axis=1)
    gathered1 = jnp.sum(m[:, None] * bump * dx[..., 0], axis=1)
    # Scattered: pair (k, i) with k the query adds m_k q_i bump to i.
    scattered = jnp.sum(m[:, None] * q[None, :] * bump, axis=0)
    return jnp.stack([gathered0 + scattered, gathered1], axis=1)


@pytest.fixture(scope="module")
def data():
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(11), 3)
    x = jax.random.uniform(k1, (N, DIM)) * L
    m = jax.random.uniform(k2, (N,), minval=0.5, maxval=1.5)
    q = jax.random.uniform(k3, (N,), minval=-1.0, maxval=1.0)
    return x, m, q, jnp.asarray(0.7)


# One compiled (value, pullback) per form: the scatter form on a periodic box,
# the symmetric form on open boundaries. The other two combinations are the
# density tests (symmetric, both) and the banded tests (scatter, both).
FORMS = {"scatter": True, "symmetric": False}


def _pair_pullback(a_i, a_j, dx, g_i, g_j, wanted):
    """`_pair`'s VJP per pair in the scatter form, by autodiff of the weighted
    pair (the engine's analytic-pullback path, with a pullback known to be
    right): the separation enters as +dx for the query, -dx for the candidate."""

    def phi(a_i, a_j, dx):
        to_i, to_j = _pair(a_i, a_j, dx)
        return sum(jnp.sum(t * g) for t, g in zip(to_i + to_j, g_i + g_j))

    d_i, d_j, d_dx = jax.grad(phi, argnums=(0, 1, 2))(a_i, a_j, dx)
    d_i["x"], d_j["x"] = d_dx, [-d for d in d_dx]
    return {k: v for k, v in d_i.items() if k in wanted}, {k: v for k, v in d_j.items() if k in wanted and k != "s"}


def _engine_sum(symmetric, periodic, pullback=None):
    layout = layout_for(DIM)
    engine = make_pair_sum(_pair, layout, symmetric=symmetric, pullback=pullback)
    box = jnp.full(DIM, L) if periodic else None

    def total(x, m, q, s):
        cells = build_cell_list(
            jax.lax.stop_gradient(x),
            jnp.asarray(REACH),
            box=box,
            cells_per_reach=layout.cells_per_reach,
            x_cells_per_reach=layout.x_cells_per_reach,
        )
        return engine(cells, {"x": x, "m": m, "q": q, "s": s})

    return total, box


def test_minimum_image_at_exactly_half_a_box():
    # +L/2 and -L/2 are the same image: both map to -L/2, the convention of
    # every pair sum ([-L/2, L/2)); anything else maps inside, by whole boxes.
    length = jnp.asarray(4.0)
    dx = jnp.array([2.0, -2.0, 1.999, -1.999, 6.0, -6.0, 0.0, 10.5])
    got = np.asarray(minimum_image(dx, length))
    np.testing.assert_array_equal(got[:2], [-2.0, -2.0])
    assert np.all((got >= -2.0) & (got < 2.0))
    np.testing.assert_allclose(np.mod(np.asarray(dx) - got, 4.0), 0.0, atol=1e-12)
    # separation applies it per axis and leaves open axes alone.
    xi, xj = jnp.array([[3.0], [0.5]]), jnp.array([[1.0], [0.25]])
    np.testing.assert_array_equal(np.asarray(separation(xi, xj, jnp.array([4.0, 4.0])))[:, 0], [-2.0, 0.25])
    np.testing.assert_array_equal(np.asarray(separation(xi, xj, None))[:, 0], [2.0, 0.25])


def test_safe_distance_has_finite_zero_gradient_at_coincidence():
    value, grad = jax.value_and_grad(lambda d: safe_distance([d[0], d[1]]))(jnp.zeros(2))
    assert float(value) == 0.0 and np.all(np.asarray(grad) == 0.0)
    grad = jax.grad(lambda d: safe_distance([d[0], d[1]]))(jnp.array([3.0, 4.0]))
    np.testing.assert_allclose(grad, [0.6, 0.8], rtol=1e-15)


@pytest.mark.parametrize("form", sorted(FORMS) + ["analytic"])
def test_pair_sum_and_its_pullback_equal_brute_force(data, form):
    """Both forms with autodiff inside the reverse loop, and the scatter form
    with the pair's own pullback (`analytic`, periodic; the symmetric form's
    analytic path is the SPH density's, tests/sph/test_density.py)."""
    x, m, q, s = data
    if form == "analytic":
        total, box = _engine_sum(False, True, _pair_pullback)
    else:
        total, box = _engine_sum(form == "symmetric", FORMS[form])
    cotangent = jax.random.normal(jax.random.PRNGKey(3), (N, 2))

    @jax.jit
    def value_and_pullback(*args):
        out, pull = jax.vjp(total, *args)
        return out, pull(cotangent)

    got, pull = value_and_pullback(x, m, q, s)
    want, ref = jax.vjp(lambda *a: _brute(*a, box), x, m, q, s)
    ref = ref(cotangent)
    # Each entry sums about 60 terms (the neighbours within REACH) of size at
    # most max|want|, in another order: round-off ~60 eps max|want| = 1.3e-14.
    assert float(jnp.max(jnp.abs(got - want))) <= 1e-12 * float(jnp.max(jnp.abs(want)))
    for g, r in zip(pull, ref):
        # The pullbacks are sums of signed terms that cancel; the scale is the
        # largest entry, and for the shared scalar s a sum over all N x 60 pairs.
        scale = float(jnp.max(jnp.abs(r))) * (N if r.ndim == 0 else 1)
        assert np.all(np.isfinite(np.asarray(g)))
        assert float(jnp.max(jnp.abs(g - r))) <= 1e-12 * scale


# A second compile of the symmetric form (gradient in one feature only):
# `make validate`; the mesh and relaxation tests take subsets by default.
@pytest.mark.slow
def test_only_wanted_cotangents_and_float32(data):
    x, m, q, s = data
    total, _ = _engine_sum(True, False)
    g_s = jax.jit(jax.grad(lambda s: jnp.sum(total(x, m, q, s))))(s)
    ref = jax.grad(lambda s: jnp.sum(_brute(x, m, q, s, None)))(s)
    np.testing.assert_allclose(g_s, ref, rtol=1e-12)
    args32 = [a.astype(jnp.float32) for a in (x, m, q, s)]
    out = jax.jit(total)(*args32)
    assert out.dtype == jnp.float32
    # float32: about 60 terms per particle of size <= 1.5, eps 1.2e-7.
    np.testing.assert_allclose(out, _brute(x, m, q, s, None), rtol=1e-4, atol=1e-4)


def test_large_inputs_get_more_groups_and_the_same_sums(data, monkeypatch):
    # No group holds more than MAX_GROUP_SIZE particles; below that the table's groups stand.
    for n in (1, 240, 131_072, 131_073, 10**6, 10**7):
        groups = group_count(n, 8)
        assert -(-n // groups) <= MAX_GROUP_SIZE and groups <= n
        assert groups == 8 or n > 8 * MAX_GROUP_SIZE or n < 8
    assert group_count(10**6, 8) == 62 and group_count(10**6, 128) == 128
    # 8 groups of 30 particles against 15 of 16 (the cap lowered to 16 for
    # N = 240). A gathered sum keeps its order (padded slots add exact zeros):
    # the same bits. Scattered parts are added in group order: round-off.
    x, m, q, s = data
    total, _ = _engine_sum(False, True)
    want = jax.jit(total)(x, m, q, s)
    monkeypatch.setattr("progenax.neighbours.layout.MAX_GROUP_SIZE", 16)
    assert group_count(N, 8) == 15
    total, _ = _engine_sum(False, True)
    got = jax.jit(total)(x, m, q, s)
    np.testing.assert_array_equal(got[:, 1], want[:, 1])
    # About 60 terms per entry in another order: ~60 eps of the largest.
    assert float(jnp.max(jnp.abs(got - want))) <= 1e-13 * float(jnp.max(jnp.abs(want)))


def test_one_layout_table_per_dimension():
    assert set(LAYOUTS) == {1, 2, 3}
    assert layout_for(3, chunk=32).chunk == 32 and layout_for(3, chunk=32).groups == LAYOUTS[3].groups
    assert layout_for(3, banded=True, chunk=32)[:3] == (LAYOUTS[3].cells_per_reach, LAYOUTS[3].x_cells_per_reach, 32)
    assert layout_for(3, banded=True).groups == BAND_GROUPS
    assert all(layout_for(d, banded=True) == BAND_LAYOUTS[d] for d in LAYOUTS)
    assert {layout.groups for layout in BAND_LAYOUTS.values()} == {BAND_GROUPS}
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        layout_for(2, chunk=0)


def test_2d_layout_pays_little_padding():
    # The 2D layout's slots per particle (padding included) are at most 1.6
    # times the neighbours inside the kernel support (31.4 expected), on the
    # seed's workload (uniform, number density 10, h = 0.5). Counted, not
    # timed. The mean moves between keys only when a group's trip count does
    # (by 0.5 slot here: 16 groups of 625, chunks of 8): 49.0-49.5 over keys
    # 0-5, against 50.3 allowed.
    n, h = 10_000, 0.5
    side = (n / 10.0) ** 0.5
    x = jax.random.uniform(jax.random.PRNGKey(0), (n, 2), jnp.float64) * side
    layout = LAYOUTS[2]
    cells = build_cell_list(
        x,
        2.0 * h,
        box=jnp.full((2,), side),
        cells_per_reach=layout.cells_per_reach,
        x_cells_per_reach=layout.x_cells_per_reach,
        chunk=layout.chunk,
    )
    slots = float(slots_per_particle(cells, layout.chunk, layout.groups))
    neighbours = np.pi * (2.0 * h) ** 2 * 10.0  # expected particles inside the support, self included
    assert slots <= 1.6 * neighbours


def _listed_pairs(cells):
    """Every (query, candidate) pair of an open-boundary list, original indices."""
    order = np.asarray(cells.order)
    begin, length = np.asarray(cells.run_begin), np.asarray(cells.run_length)
    pairs = []
    for i in range(order.size):
        for b, n in zip(begin[i], length[i]):
            pairs.extend((order[i], order[j]) for j in range(b, b + n))
    return pairs


@pytest.mark.parametrize("dim,k", [(2, 2), (3, 1)])
def test_half_shells_list_every_close_pair_once(dim, k):
    # Clumped points (half of them in a small ball), so that runs and rows
    # differ in length; a query subset checks the pairs of two queries.
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(3), 3)
    x = jax.random.uniform(k1, (N, dim)) * L
    x = x.at[: N // 2].set(1.0 + 0.3 * jax.random.normal(k2, (N // 2, dim)))
    query = np.asarray(jax.random.uniform(k3, (N,)) < 0.7)
    xs = np.asarray(x)
    close = np.sqrt(np.sum((xs[:, None] - xs[None]) ** 2, -1)) < REACH
    for q in (None, query):
        cells = build_cell_list(x, jnp.asarray(REACH), cells_per_reach=k, x_cells_per_reach=4, half=True, query=q)
        listed = _listed_pairs(cells)
        unordered = [tuple(sorted(p)) for p in listed]
        assert len(set(unordered)) == len(unordered)  # no pair twice, none with itself
        assert all(a != b for a, b in listed)
        wanted = close & ~np.eye(N, dtype=bool)
        if q is not None:
            wanted &= q[:, None] & q[None, :]
        got = np.zeros((N, N), bool)
        for a, b in unordered:
            got[a, b] = got[b, a] = True
        assert np.array_equal(got & wanted, wanted)


def test_half_shells_refuse_periodic_boxes():
    with pytest.raises(ValueError, match="open boundaries"):
        build_cell_list(jnp.zeros((4, 3)), jnp.asarray(1.0), box=jnp.ones(3), half=True)


def test_gathered_components_share_loops_in_pairs():
    # Two components of one shape and dtype share a loop as one complex
    # accumulator; a lane-summed (M, 1) part is never paired with an (M, C)
    # one; no gathered part still gets its loop (scattered and summed parts).
    from progenax.neighbours.engine import _passes

    wide, narrow = jax.ShapeDtypeStruct((4, 16), jnp.float64), jax.ShapeDtypeStruct((4, 1), jnp.float64)
    acc = [jnp.zeros(4)] * 3
    assert _passes([wide, wide, wide], acc) == [(0, 1), (2,)]
    assert _passes([narrow, wide, wide], acc) == [(0,), (1, 2)]
    assert _passes([wide, wide], [jnp.zeros(4), jnp.zeros(4, jnp.float32)]) == [(0,), (1,)]
    assert _passes([wide, jax.ShapeDtypeStruct((4, 16), jnp.float32)], acc) == [(0,), (1,)]
    assert _passes([], []) == [()]


@pytest.mark.parametrize("x64", [True, False])
def test_small_key_order_is_a_stable_argsort(x64):
    # The counting order against NumPy's stable sort: packed words of 8 fields
    # (uint64) or 4 (uint32, x64 off), so 16 keys take 2 or 4 words; sizes
    # around the 255-element blocks, and keys with no element.
    rng = np.random.default_rng(3)
    with jax.enable_x64(x64):
        for n_keys in (1, 5, 16):
            for n in (1, 254, 255, 256, 5000):
                keys = rng.integers(0, n_keys, n)
                keys[keys == n_keys // 2] = 0
                got = jax.jit(small_key_order, static_argnums=1)(jnp.asarray(keys, jnp.int32), n_keys)
                np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("span", [4, 15, 16, 40])
def test_workload_order_counts_or_sorts_to_the_same_order(span, monkeypatch):
    # Counted when the positive steps span at most 15 values, sorted when
    # more: the same stable order by steps either way, with a band's
    # particles of no candidate (steps 0) first.
    monkeypatch.setattr(cells_module, "_COUNTING_MIN_SIZE", 1)
    rng = np.random.default_rng(span)
    steps = rng.integers(3, 3 + span, 3000)
    steps[rng.random(steps.size) < 0.2] = 0
    got = jax.jit(cells_module._workload_order, static_argnums=1)(jnp.asarray(steps, jnp.int32), 3 + span)
    np.testing.assert_array_equal(got, np.argsort(steps, kind="stable"))


def test_slots_per_particle_does_not_overflow_on_crowded_lists(data):
    # 2^28 candidates each (a dense core at a fixed reach): a group of 30
    # pays 30 * 2^28 slots, past int32; the mean is still 2^28 (a multiple
    # of the chunk: no padding).
    x = data[0]
    cells = build_cell_list(x, REACH, cells_per_reach=1, x_cells_per_reach=4, chunk=16)
    crowded = eqx.tree_at(lambda c: c.total, cells, jnp.full_like(cells.total, 2**28))
    assert float(slots_per_particle(crowded, 16, 8)) == 2.0**28


@pytest.mark.parametrize("symmetric", [False, True])
def test_pair_function_parts_of_different_widths_are_refused(symmetric):
    # Two components to the query and one to the candidate: the one was added
    # into both columns (scatter form), or a scan carry mismatch surfaced later.
    def pair(a_i, a_j, dx):
        w = jnp.ones_like(dx[0])
        return (w, 2.0 * w), (w,)

    layout = layout_for(DIM)
    x = jax.random.uniform(jax.random.PRNGKey(0), (50, DIM)) * L
    cells = build_cell_list(x, jnp.asarray(REACH), cells_per_reach=layout.cells_per_reach)
    with pytest.raises(ValueError, match="the same K to the candidate; got 2 and 1"):
        make_pair_sum(pair, layout, symmetric=symmetric)(cells, {"x": x})
