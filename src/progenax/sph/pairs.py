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
from ..neighbours.cells import CellList, build_cell_list

# (cells_per_reach, x_cells_per_reach, chunk) per dimension. Measured on one
# core, N = 1e5, one relaxation step (8 bands built, density and loss-gradient
# passes), seconds and pair slots per particle (padding included):
#
#   layout       Plummer         King W0 = 9
#   (2, 8, 16)   1.03 s  174     1.24 s  174   (exact neighbours 59)
#   (2, 8, 32)   1.03 s  182     1.25 s  182
#   (1, 8, 32)   0.99 s  340     0.97 s  328
#   (2, 4, 16)   1.11 s  194     1.31 s  193
#
# Two rows of cells each side keep the slots within 3x the neighbours; one
# row (9 runs a particle instead of 25) builds faster but examines 5.5x.
# (Since bands list runs for their members only and passes skip the groups
# before them, the (2, 8, 16) step takes 0.74 s (Plummer) and 0.77 s (King).)
DEFAULT_LAYOUT = {1: (1, 4, 16), 2: (2, 4, 16), 3: (2, 8, 16)}

PairFunction = Callable[[dict, dict, list], tuple[Array, Array | None]]
"""`pair_fn(a_i, a_j, dx) -> (to_i, to_j)`: features of the query (scalars
(M, 1), positions "x" (d, M, 1)) and of its candidates ((M, C), (d, M, C)),
the separations x_i - x_j (a list of d arrays (M, C), minimum image), and the
pair's contributions to the query and to the candidate: each a tuple of K
arrays (M, C) (or one array (M, C, K)), the second None when there is none.
Features are (N,) scalars, except the positions "x" (N, d). Must be finite
for coincident particles."""


class Bands(eqx.Module):
    """One cell list per band of support radius, stacked along a leading axis."""

    cells: CellList
    members: Array  # queries per band, (n_bands,): empty bands are skipped
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
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int = 128,
    query: Array | None = None,
) -> Bands:
    """Banded cell lists for `positions` (N, d) with per-particle `support` (N,).

    Not differentiated (build it from `jax.lax.stop_gradient` values). `groups`
    workload groups per band (equal sizes, by candidate count): particles
    outside a band have no work and a group costs its largest count times its
    size, so many small groups keep a band's padding small; empty groups cost
    a loop test. `query` (N,) bool: only these particles get candidates (their
    pair sums); every particle is a source. Default: all. `cells_per_reach`,
    `x_cells_per_reach`, `chunk`: as in `cells.build_cell_list`, default
    `DEFAULT_LAYOUT` for the dimension.
    """
    default = DEFAULT_LAYOUT[positions.shape[1]]
    cells_per_reach = default[0] if cells_per_reach is None else int(cells_per_reach)
    x_cells_per_reach = default[1] if x_cells_per_reach is None else int(x_cells_per_reach)
    chunk = default[2] if chunk is None else int(chunk)
    positions = jax.lax.stop_gradient(positions)
    support = jax.lax.stop_gradient(jnp.broadcast_to(support, positions.shape[:1]))
    band = band_index(support, n_bands, band_ratio, query)

    def build(b):
        # The band's largest support (its members' own maximum: exact and tight).
        reach = jnp.max(jnp.where(band == b, support, 0.0))
        reach = jnp.maximum(reach, jnp.finfo(positions.dtype).tiny)
        return build_cell_list(
            positions,
            reach,
            box=box,
            cells_per_reach=cells_per_reach,
            x_cells_per_reach=x_cells_per_reach,
            chunk=chunk,
            query=band == b,
            query_reach=support,
        )

    members = jnp.sum(band[None, :] == jnp.arange(n_bands)[:, None], axis=1)
    shapes = jax.eval_shape(build, jnp.int32(0))

    def one_band(b):
        # A band nobody is in (a cluster whose h spans fewer bands than
        # n_bands) costs no sort: an empty list of the same shapes.
        return jax.lax.cond(members[b] > 0, build, lambda _: _empty_cells(shapes), b)

    cells = jax.lax.map(one_band, jnp.arange(n_bands))
    return Bands(cells, members, n_bands, int(chunk), int(groups))


def _empty_cells(shapes: CellList) -> CellList:
    """A cell list with no runs (identity order), shaped like `shapes`."""

    def blank(leaf):
        return jnp.zeros(leaf.shape, leaf.dtype)

    cells = jax.tree_util.tree_map(blank, shapes)
    n = cells.order.shape[0]
    identity = jnp.arange(n, dtype=cells.order.dtype)
    return eqx.tree_at(lambda c: (c.order, c.self_index, c.by_workload), cells, (identity, identity, identity))


def _band(bands: Bands, b) -> CellList:
    return jax.tree_util.tree_map(lambda leaf: leaf[b], bands.cells)


def separation(x_i: Array, x_j: Array, box: Array | None) -> list[Array]:
    """x_i - x_j per axis, minimum image in a periodic box; x component-major (d, ...)."""
    out = []
    for axis in range(x_i.shape[0]):
        dx = x_i[axis] - x_j[axis]
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
def _fold(cells: CellList, terms, gather_init, scatter_init, chunk: int, groups: int, queries=None):
    """Sum `terms(i, j, valid) -> (to_i, to_j)` over every candidate slot.

    to_i: tuple of (M, C, ...) summed over C into the query; to_j: tuple of
    (M, C, ...) scatter-added to the candidate's sorted index. Returns the
    accumulators (sorted order). Groups and trip counts as in
    `cells.fold_candidates`. `queries`: the number of particles with
    candidates (a band's members), if known: they come last in workload
    order, so the groups before theirs (no work) are skipped.
    """
    n = cells.size
    groups = max(1, min(int(groups), n))
    size = -(-n // groups)
    lanes = jnp.arange(chunk, dtype=jnp.int32)[None, :]
    first_group = 0 if queries is None else (n - queries) // size
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
        # Candidate index = slot + offset inside a run; offsets as jumps at run starts.
        lengths = cells.run_length[i]
        ends = jnp.cumsum(lengths, axis=1)
        run_start = ends - lengths
        jump = jnp.diff(cells.run_begin[i] - run_start, axis=1, prepend=jnp.zeros_like(run_start[:, :1]))
        total = jnp.where(real, ends[:, -1], 0)
        starts, jumps = run_start.T[:, :, None], jump.T[:, :, None]
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
            scattered = tuple(a.at[target].add(t.reshape((-1,) + t.shape[2:])) for a, t in zip(scattered, to_j))
            return c + 1, local, scattered

        local0 = tuple(jnp.zeros((size,) + a.shape[1:], a.dtype) for a in gathered)
        _, local, scattered = jax.lax.while_loop(lambda s: s[0] < n_steps, body, (jnp.int32(0), local0, scattered))
        target = jax.lax.dynamic_slice(targets, (g * size,), (size,))
        gathered = tuple(a.at[target].set(v, mode="drop") for a, v in zip(gathered, local))
        return gathered, scattered

    return jax.lax.fori_loop(first_group, groups, one_group, (gather_init, scatter_init))


def _sorted_features(features: dict, cells: CellList):
    """Features in the cell list's sorted order, and their candidate layout.

    Component-major: a scalar feature is (N,), the positions (d, N), so that
    a group's gathers are (M, C) arrays per component (an (M, C, d) gather
    with d minor costs about three times as much on the CPU)."""
    own = {k: (v[cells.order].T if v.ndim == 2 else v[cells.order]) for k, v in features.items()}
    cand = {k: (v if cells.source is None else v[..., cells.source]) for k, v in own.items()}
    return own, cand


def _unsort(values: Array, cells: CellList) -> Array:
    return jnp.zeros_like(values).at[cells.order].set(values, unique_indices=True)


def _at(features: dict, index: Array) -> dict:
    """Each feature at `index` (M, C): (M, C) scalars, (d, M, C) positions."""
    return {k: v[..., index] for k, v in features.items()}


def _components(t) -> tuple:
    """A pair function's output as a tuple of (M, C) arrays, one per component."""
    if isinstance(t, (tuple, list)):
        return tuple(t)
    return tuple(t[..., k] for k in range(t.shape[-1]))


def _flat(d: dict, keys) -> tuple:
    """A features' cotangent dict as a tuple of per-component arrays."""
    out = []
    for k in keys:
        out.extend(d[k] if k == "x" else [d[k]])
    return tuple(out)


def _forward(pair_fn, width, bands: Bands, features: dict):
    n = features["x"].shape[0]
    dtype = features["x"].dtype
    k_i, k_j = width

    def one_band(b, total):
        return jax.lax.cond(bands.members[b] > 0, add_band, lambda b, total: total, b, total)

    def add_band(b, total):
        cells = _band(bands, b)
        own, cand = _sorted_features(features, cells)

        def terms(i, j, valid):
            a_i, a_j = _at(own, i), _at(cand, j)
            dx = separation(a_i["x"], a_j["x"], cells.box)
            to_i, to_j = pair_fn(a_i, a_j, dx)
            out_i = tuple(jnp.where(valid, t, 0.0) for t in _components(to_i))
            out_j = () if to_j is None else tuple(jnp.where(valid, t, 0.0) for t in _components(to_j))
            return out_i, out_j

        zeros = lambda count: tuple(jnp.zeros(n, dtype) for _ in range(count))
        gathered, scattered = _fold(
            cells, terms, zeros(k_i), zeros(k_j or 0), bands.chunk, bands.groups, bands.members[b]
        )
        result = jnp.stack(gathered, axis=1)
        if scattered:
            result = result + jnp.stack(scattered, axis=1)
        return total + _unsort(result, cells)

    return jax.lax.fori_loop(0, bands.n_bands, one_band, jnp.zeros((n, k_i), dtype))


def _backward(pair_fn, bands: Bands, features: dict, s_bar: Array):
    n = features["x"].shape[0]
    keys = sorted(features)
    dim = features["x"].shape[1]

    def one_band(b, total):
        return jax.lax.cond(bands.members[b] > 0, add_band, lambda b, total: total, b, total)

    def add_band(b, total):
        cells = _band(bands, b)
        own, cand = _sorted_features(features, cells)
        g_own, g_cand = _sorted_features({"g": s_bar}, cells)  # (K, N) each

        def terms(i, j, valid):
            g_i, g_j = g_own["g"][:, i], g_cand["g"][:, j]

            def weighted(a_i, a_j):
                dx = separation(a_i["x"], a_j["x"], cells.box)
                to_i, to_j = pair_fn(a_i, a_j, dx)
                total = sum(t * g for t, g in zip(_components(to_i), g_i))
                if to_j is not None:
                    total = total + sum(t * g for t, g in zip(_components(to_j), g_j))
                return jnp.sum(jnp.where(valid, total, 0.0))

            d_i, d_j = jax.grad(weighted, argnums=(0, 1))(_at(own, i), _at(cand, j))
            # d_i's entries are (M, 1): `_fold` sums them over their one lane.
            return _flat(d_i, keys), _flat(d_j, keys)

        gathered, scattered = _fold(cells, terms, zeros, zeros, bands.chunk, bands.groups, bands.members[b])
        return tuple(t + _unsort(g + s, cells) for t, g, s in zip(total, gathered, scattered))

    zeros = _flat(
        {k: [jnp.zeros(n, features[k].dtype)] * dim if k == "x" else jnp.zeros(n, features[k].dtype) for k in keys},
        keys,
    )
    grads = jax.lax.fori_loop(0, bands.n_bands, one_band, zeros)
    out, at = {}, 0
    for k in keys:
        if k == "x":
            out[k] = jnp.stack(grads[at : at + dim], axis=1)
            at += dim
        else:
            out[k] = grads[at]
            at += 1
    return out


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


def pair_sum(
    pair_fn: PairFunction, bands: Bands, features: dict[str, Array], width: int, *, scatter: bool = False
) -> Array:
    """S (N, width) for `pair_fn` over the candidates of `bands` (see the module
    docstring). `features` maps names to (N, ...) arrays and must hold the
    positions as "x" (N, d); `scatter` says whether `pair_fn` returns a
    to-neighbour part. Differentiable (reverse mode) in every feature.

    `pair_fn` must be a hashable function defined once (a module-level function
    or one cached per configuration): it is a static argument of the custom VJP.
    """
    return _pair_sum(pair_fn, (int(width), int(width) if scatter else None), bands, features)
