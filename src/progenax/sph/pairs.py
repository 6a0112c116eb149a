r"""Differentiable pair sums over banded cell lists (adaptive smoothing lengths).

A pair sum gives every particle

$$S_i = \sum_{j:\ |x_i - x_j| < s_i} t^{\to i}(a_i, a_j)
      + \sum_{k:\ |x_k - x_i| < s_k} t^{\to j}(a_k, a_i),$$

with $a$ the per-particle features (positions, masses, smoothing lengths...),
$s_i$ each particle's own support radius (2h_i for the kernels here), and a
pair function returning the part that goes to the particle whose ball holds
the pair ($t^{\to i}$, gathered) and the part that goes to its neighbour
($t^{\to j}$, scattered). The SPH density is a pure gather; the gradient of a
density loss has both parts (action and reaction).

**Bands.** With smoothing lengths varying 100x across a cluster, one grid
sized for the largest support would give core particles thousands of
candidates. `build_bands` sorts the particles into `n_bands` bands of support,
each a factor `band_ratio` apart from the smallest up (the last band takes
everything above), and
builds one cell list per band: cells sized for the band's largest support,
only the band's particles as queries (runs trimmed to each one's own ball),
every particle as a source, the grid limited to the band's bounding box. Every
pair inside a query's own support is a candidate: exact for any data, and
efficient when the support spans up to `band_ratio ** n_bands`.

**Gradients.** `pair_sum` has a custom reverse pass: the cotangent $\bar S$
pulls back to the features through one more pass over the same candidates,
differentiating the pair function with autodiff inside the loop (gather to
$a_i$, scatter-add to $a_j$), so the residuals are O(N) whatever the number of
pairs. The reverse pass is itself made of plain array code, so a pair sum can
sit inside a `lax.scan` that is differentiated end to end (`progenax.relax`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from .cells import CellList, build_cell_list

PairFunction = Callable[[dict, dict, list], tuple[Array, Array | None]]
"""`pair_fn(a_i, a_j, dx) -> (to_i, to_j)`: features of the query (M, 1, ...)
and of its candidates (M, C, ...), the separations x_i - x_j (d arrays (M, C),
minimum image), and the pair's contributions (M, C, K) to the query and to the
candidate (None when there is none). Must be finite for coincident particles."""


class Bands(eqx.Module):
    """One cell list per band of support radius, stacked along a leading axis."""

    cells: CellList
    n_bands: int = eqx.field(static=True)
    chunk: int = eqx.field(static=True)
    groups: int = eqx.field(static=True)


def band_index(support: Array, n_bands: int, band_ratio: float, query: Array | None = None) -> Array:
    """Band of each support radius: 0 for the smallest (among the queries),
    counting up by factors of `band_ratio`; the last band takes everything
    larger (a few far-out particles of a cluster's halo, each reading many
    candidates, but few). Particles that are not queries get -1 (no band)."""
    bottom = jnp.min(support if query is None else jnp.where(query, support, jnp.inf))
    level = jnp.floor(jnp.log(support / bottom) / np.log(band_ratio)).astype(jnp.int32)
    band = jnp.clip(level, 0, n_bands - 1)
    return band if query is None else jnp.where(query, band, -1)


def build_bands(
    positions: Array,
    support: Array,
    *,
    box: Array | None = None,
    n_bands: int = 8,
    band_ratio: float = 2.0,
    cells_per_reach: int = 2,
    x_cells_per_reach: int = 4,
    chunk: int = 16,
    groups: int = 128,
    query: Array | None = None,
) -> Bands:
    """Banded cell lists for `positions` (N, d) with per-particle `support` (N,).

    Not differentiated (build it from `jax.lax.stop_gradient` values). `groups`
    workload groups per band (equal sizes, by candidate count): particles
    outside a band have no work and a group costs its largest count times its
    size, so many small groups keep a band's padding small; empty groups cost
    a loop test. `query` (N,) bool: only these particles get candidates (their
    pair sums); every particle is a source. Default: all.
    """
    positions = jax.lax.stop_gradient(positions)
    support = jax.lax.stop_gradient(jnp.broadcast_to(support, positions.shape[:1]))
    band = band_index(support, n_bands, band_ratio, query)

    def one_band(b):
        # The band's largest support (its members' own maximum: exact and tight).
        reach = jnp.max(jnp.where(band == b, support, 0.0))
        reach = jnp.maximum(reach, jnp.finfo(positions.dtype).tiny)
        return build_cell_list(
            positions, reach, box=box, cells_per_reach=cells_per_reach,
            x_cells_per_reach=x_cells_per_reach, chunk=chunk,
            query=band == b, query_reach=support,
        )

    cells = jax.lax.map(one_band, jnp.arange(n_bands))
    return Bands(cells, n_bands, int(chunk), int(groups))


def _band(bands: Bands, b) -> CellList:
    return jax.tree_util.tree_map(lambda leaf: leaf[b], bands.cells)


def separation(x_i: Array, x_j: Array, box: Array | None) -> list[Array]:
    """x_i - x_j per axis, minimum image in a periodic box; x (..., d)."""
    out = []
    for axis in range(x_i.shape[-1]):
        dx = x_i[..., axis] - x_j[..., axis]
        if box is not None:
            dx = dx - box[axis] * jnp.floor(dx / box[axis] + 0.5)
        out.append(dx)
    return out


def safe_distance(dx: list[Array]) -> Array:
    """|dx|, with a zero (not NaN) derivative for coincident particles."""
    r2 = sum(d * d for d in dx)
    positive = r2 > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, r2, 1.0)), 0.0)


# -- the slot loop with gather and scatter accumulators -------------------------
def _fold(cells: CellList, terms, gather_init, scatter_init, chunk: int, groups: int):
    """Sum `terms(i, j, valid) -> (to_i, to_j)` over every candidate slot.

    to_i: tuple of (M, C, ...) summed over C into the query; to_j: tuple of
    (M, C, ...) scatter-added to the candidate's sorted index. Returns the
    accumulators (sorted order). Groups and trip counts as in
    `cells.fold_candidates`.
    """
    n = cells.size
    groups = max(1, min(int(groups), n))
    size = -(-n // groups)
    lanes = jnp.arange(chunk, dtype=jnp.int32)[None, :]
    ends = jnp.cumsum(cells.run_length, axis=1)
    run_start = ends - cells.run_length
    jump = jnp.diff(cells.run_begin - run_start, axis=1, prepend=jnp.zeros_like(run_start[:, :1]))
    pad = groups * size - n
    members = jnp.concatenate([cells.by_workload, jnp.zeros(pad, jnp.int32)])
    targets = jnp.concatenate([cells.by_workload, jnp.full(pad, n, jnp.int32)])
    source = cells.source

    def one_group(g, acc):
        gathered, scattered = acc
        i = jax.lax.dynamic_slice(members, (g * size,), (size,))
        # Padding rows (copies of particle 0) get no slots: their scatter
        # would otherwise add particle 0's reactions again.
        real = g * size + jnp.arange(size) < n
        total = jnp.where(real, ends[i, -1], 0)
        starts, jumps = run_start[i].T[:, :, None], jump[i].T[:, :, None]
        self_index = cells.self_index[i]
        n_steps = (jnp.max(total) + chunk - 1) // chunk
        rows = i[:, None]

        def body(state):
            c, local, scattered = state
            slot = c * chunk + lanes
            j = slot + jnp.sum(jnp.where(slot[None] >= starts, jumps, 0), axis=0)
            valid = slot < total[:, None]
            j = jnp.where(valid, j, self_index[:, None])
            to_i, to_j = terms(rows, j, valid)
            local = tuple(a + jnp.sum(t, axis=1) for a, t in zip(local, to_i))
            target = (j if source is None else source[j]).reshape(-1)
            scattered = tuple(
                a.at[target].add(t.reshape((-1,) + t.shape[2:])) for a, t in zip(scattered, to_j)
            )
            return c + 1, local, scattered

        local0 = tuple(jnp.zeros((size,) + a.shape[1:], a.dtype) for a in gathered)
        _, local, scattered = jax.lax.while_loop(
            lambda s: s[0] < n_steps, body, (jnp.int32(0), local0, scattered)
        )
        target = jax.lax.dynamic_slice(targets, (g * size,), (size,))
        gathered = tuple(a.at[target].set(v, mode="drop") for a, v in zip(gathered, local))
        return gathered, scattered

    return jax.lax.fori_loop(0, groups, one_group, (gather_init, scatter_init))


def _sorted_features(features: dict, cells: CellList):
    """Features in the cell list's sorted order, and their candidate layout."""
    own = {k: v[cells.order] for k, v in features.items()}
    cand = {k: (v if cells.source is None else v[cells.source]) for k, v in own.items()}
    return own, cand


def _unsort(values: Array, cells: CellList) -> Array:
    return jnp.zeros_like(values).at[cells.order].set(values, unique_indices=True)


def _pair_inputs(own, cand, i, j, box):
    a_i = {k: v[i] for k, v in own.items()}
    a_j = {k: v[j] for k, v in cand.items()}
    dx = separation(a_i["x"], a_j["x"], box)
    return a_i, a_j, dx


def _masked(t, valid):
    return jnp.where(valid.reshape(valid.shape + (1,) * (t.ndim - 2)), t, 0.0)


def _forward(pair_fn, width, bands: Bands, features: dict):
    n = features["x"].shape[0]
    dtype = features["x"].dtype

    def one_band(b, total):
        cells = _band(bands, b)
        own, cand = _sorted_features(features, cells)

        def terms(i, j, valid):
            to_i, to_j = pair_fn(*_pair_inputs(own, cand, i, j, cells.box))
            out_i = (_masked(to_i, valid),)
            out_j = () if to_j is None else (_masked(to_j, valid),)
            return out_i, out_j

        scatter0 = () if width[1] is None else (jnp.zeros((n, width[1]), dtype),)
        (gathered,), scattered = _fold(
            cells, terms, (jnp.zeros((n, width[0]), dtype),), scatter0, bands.chunk, bands.groups
        )
        result = gathered + (scattered[0] if scattered else 0.0)
        return total + _unsort(result, cells)

    return jax.lax.fori_loop(0, bands.n_bands, one_band, jnp.zeros((n, width[0]), dtype))


def _backward(pair_fn, bands: Bands, features: dict, s_bar: Array):
    n = features["x"].shape[0]

    def one_band(b, total):
        cells = _band(bands, b)
        own, cand = _sorted_features(features, cells)
        g_own, g_cand = _sorted_features({"g": s_bar}, cells)

        def terms(i, j, valid):
            g_i, g_j = g_own["g"][i], g_cand["g"][j]

            def weighted(a_i, a_j):
                dx = separation(a_i["x"], a_j["x"], cells.box)
                to_i, to_j = pair_fn(a_i, a_j, dx)
                total = jnp.sum(to_i * g_i, axis=-1)
                if to_j is not None:
                    total = total + jnp.sum(to_j * g_j, axis=-1)
                return jnp.sum(jnp.where(valid, total, 0.0))

            a_i = {k: v[i] for k, v in own.items()}
            a_j = {k: v[j] for k, v in cand.items()}
            d_i, d_j = jax.grad(weighted, argnums=(0, 1))(a_i, a_j)
            keys = sorted(features)
            # d_i[k] is (M, 1, ...): `_fold` sums it over its one lane.
            return tuple(d_i[k] for k in keys), tuple(d_j[k] for k in keys)

        keys = sorted(features)
        zeros = tuple(jnp.zeros_like(features[k]) for k in keys)
        gathered, scattered = _fold(
            cells, terms, zeros, zeros,
            bands.chunk, bands.groups,
        )
        return tuple(t + _unsort(g + s, cells) for t, g, s in zip(total, gathered, scattered))

    keys = sorted(features)
    init = tuple(jnp.zeros_like(features[k]) for k in keys)
    grads = jax.lax.fori_loop(0, bands.n_bands, one_band, init)
    return dict(zip(keys, grads))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _pair_sum(pair_fn, width, bands, features):
    return _forward(pair_fn, width, bands, features)


def _pair_sum_fwd(pair_fn, width, bands, features):
    return _forward(pair_fn, width, bands, features), (bands, features)


def _pair_sum_bwd(pair_fn, width, residuals, s_bar):
    bands, features = residuals
    bands_bar = jax.tree_util.tree_map(_zero_cotangent, bands)
    return bands_bar, _backward(pair_fn, bands, features, s_bar)


def _zero_cotangent(leaf):
    if jnp.issubdtype(leaf.dtype, jnp.floating):
        return jnp.zeros_like(leaf)
    return np.zeros(leaf.shape, jax.dtypes.float0)


_pair_sum.defvjp(_pair_sum_fwd, _pair_sum_bwd)


def pair_sum(pair_fn: PairFunction, bands: Bands, features: dict[str, Array], width: int, *, scatter: bool = False) -> Array:
    """S (N, width) for `pair_fn` over the candidates of `bands` (see the module
    docstring). `features` maps names to (N, ...) arrays and must hold the
    positions as "x" (N, d); `scatter` says whether `pair_fn` returns a
    to-neighbour part. Differentiable (reverse mode) in every feature.

    `pair_fn` must be a hashable function defined once (a module-level function
    or one cached per configuration): it is a static argument of the custom VJP.
    """
    return _pair_sum(pair_fn, (int(width), int(width) if scatter else None), bands, features)
