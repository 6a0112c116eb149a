r"""Banded cell lists: one cell list per band of support radius.

With smoothing lengths varying 100x across a cluster, one grid sized for the
largest support would give core particles thousands of candidates.
`build_bands` sorts the particles into `n_bands` bands of support, each a
factor `band_ratio` apart from the smallest up (the last band takes everything
above), and builds one cell list per band: cells sized for the band's largest
support, only the band's particles as queries (runs trimmed to each one's own
ball), every particle as a source, the grid limited to the band's bounding
box. Every pair inside a query's own support is a candidate: exact for any
data, and efficient when the support spans up to `band_ratio ** n_bands`.
A band's candidate relation is not symmetric: sum over it with the engine's
scatter form (`make_pair_sum(..., symmetric=False)`).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from .cells import CellList, build_cell_list
from .layout import Layout, layout_for


class Bands(eqx.Module):
    """One cell list per band of support radius, stacked along a leading axis."""

    cells: CellList
    members: Array  # queries per band, (n_bands,): empty bands are skipped
    n_bands: int = eqx.field(static=True)
    layout: Layout = eqx.field(static=True)

    @property
    def chunk(self) -> int:
        return self.layout.chunk

    @property
    def groups(self) -> int:
        return self.layout.groups


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
    layout: Layout | None = None,
    query: Array | None = None,
) -> Bands:
    """Banded cell lists for `positions` (N, d) with per-particle `support` (N,).

    Not differentiated (built from `jax.lax.stop_gradient` values). `query`
    (N,) bool: only these particles get candidates (their pair sums); every
    particle is a source. Default: all. `layout`: default
    `layout_for(d, banded=True)`, `BAND_LAYOUTS[d]`, with `BAND_GROUPS` (128)
    groups: particles outside a band have no work and a group costs its
    largest count times its size, so many small groups keep a band's padding
    small (empty groups cost a loop test).
    """
    layout = layout_for(positions.shape[1], banded=True) if layout is None else layout
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
            cells_per_reach=layout.cells_per_reach,
            x_cells_per_reach=layout.x_cells_per_reach,
            chunk=layout.chunk,
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
    return Bands(cells, members, n_bands, layout)


def _empty_cells(shapes: CellList) -> CellList:
    """A cell list with no runs (identity order), shaped like `shapes`."""
    cells = jax.tree_util.tree_map(lambda leaf: jnp.zeros(leaf.shape, leaf.dtype), shapes)
    n = cells.order.shape[0]
    identity = jnp.arange(n, dtype=cells.order.dtype)
    return eqx.tree_at(lambda c: (c.order, c.self_index, c.by_workload), cells, (identity, identity, identity))
