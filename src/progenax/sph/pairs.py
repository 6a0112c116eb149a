r"""SPH pair functions on the neighbour engine, and banded pair sums.

The pair sums themselves (slot loop, gather and scatter parts, the reverse
pass) live in `progenax.neighbours`; this module holds the SPH pair functions
and the banded front end the relaxation uses:

- `density_pair(kernel, dim)`: $t^{\to i} = m_j W(|x_i - x_j|, h_i)$, a pure
  gather (the SPH density, self term included), and `density_pullback`, its
  analytic per-pair VJP for the engine's symmetric reverse pass.
- `build_bands`, `pair_sum`: banded cell lists for per-particle smoothing
  lengths (`neighbours.bands`) and the engine's scatter-form sum over them.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp

from .._types import Array
from ..neighbours import Bands, PairFunction, PairPullback, layout_for, make_pair_sum, safe_distance
from ..neighbours import build_bands as _build_bands
from .kernels import get_kernel

__all__ = ["Bands", "PairFunction", "build_bands", "density_pair", "density_pullback", "pair_sum", "safe_distance"]


@functools.cache
def density_pair(kernel_name: str, dim: int) -> PairFunction:
    """The SPH density's pair function: $m_j W(r_{ij}, h_i)$ to the query
    (features "x", "m", "h"; m and h per particle or shared scalars)."""
    kernel = get_kernel(kernel_name)

    def pair(a_i, a_j, dx):
        return (a_j["m"] * kernel.value(safe_distance(dx), a_i["h"], dim),), None

    return pair


@functools.cache
def density_pullback(kernel_name: str, dim: int) -> PairPullback:
    r"""`density_pair`'s own VJP in the engine's symmetric form: with
    $g = \bar\rho$ and $F = W'(r)/r$, the query's cotangents from the pair
    and its mirror,

    $$\bar x_i \mathrel{+}= \bigl(g_i m_j F(r, h_i) + g_j m_i F(r, h_j)\bigr)(x_i - x_j),\quad
    \bar m_i \mathrel{+}= g_j W(r, h_j),\quad \bar h_i \mathrel{+}= g_i m_j \partial_h W(r, h_i)$$

    (shared m or h: $g_i W(r, h_i)$ and the same $\bar h$ summed over every
    pair; one kernel evaluation per pair when h is shared). The distance is a
    plain square root: nothing differentiates it here."""
    kernel = get_kernel(kernel_name)

    def pullback(a_i, a_j, dx, g_i, g_j, wanted):
        (g_i,), (g_j,) = g_i, g_j
        m_i, m_j, h_i, h_j = a_i["m"], a_j["m"], a_i["h"], a_j["h"]
        r = jnp.sqrt(sum(d * d for d in dx))
        out = {}
        if "x" in wanted:
            f_i = kernel.gradient_factor(r, h_i, dim)
            if jnp.ndim(h_i) == 0:
                coef = (g_i * m_j + g_j * m_i) * f_i
            else:
                coef = g_i * m_j * f_i + g_j * m_i * kernel.gradient_factor(r, h_j, dim)
            out["x"] = [coef * d for d in dx]
        if "m" in wanted:
            out["m"] = g_i * kernel.value(r, h_i, dim) if jnp.ndim(m_i) == 0 else g_j * kernel.value(r, h_j, dim)
        if "h" in wanted:
            out["h"] = g_i * m_j * kernel.h_derivative(r, h_i, dim)
        return out, None

    return pullback


@functools.cache
def density_pair_sum(kernel_name: str, dim: int, layout):
    """The SPH density's pair sum on one cell list: `density_pair` in the engine's
    symmetric (gather-only) form with its analytic pullback, built once per
    kernel, dimension and layout (`sph.density`, `progenax.sharding`)."""
    return make_pair_sum(
        density_pair(kernel_name, dim), layout, symmetric=True, pullback=density_pullback(kernel_name, dim)
    )


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
    groups: int | None = None,
    query: Array | None = None,
) -> Bands:
    """`neighbours.build_bands` with the layout given field by field
    (None: `neighbours.layout_for(d, banded=True)`)."""
    layout = layout_for(
        positions.shape[1],
        cells_per_reach=cells_per_reach,
        x_cells_per_reach=x_cells_per_reach,
        chunk=chunk,
        groups=groups,
        banded=True,
    )
    return _build_bands(positions, support, box=box, n_bands=n_bands, band_ratio=band_ratio, layout=layout, query=query)


@functools.cache
def _banded_sum(pair_fn: PairFunction, layout):
    return make_pair_sum(pair_fn, layout)


def pair_sum(
    pair_fn: PairFunction, bands: Bands, features: dict[str, Array], width: int, *, scatter: bool = False
) -> Array:
    """S (N, width) for `pair_fn` over the candidates of `bands`
    (`neighbours.make_pair_sum`, scatter form). `features` maps names to (N,)
    arrays or scalars and holds the positions as "x" (N, d). `width` and
    `scatter` are checked against what `pair_fn` returns. `pair_fn` must be
    hashable and defined once (module level or cached per configuration)."""
    out = _banded_sum(pair_fn, bands.layout)(bands, features)
    if out.shape[1] != int(width):
        raise ValueError(f"width must be the number of components pair_fn returns ({out.shape[1]}), got {width}")
    del scatter  # the engine reads the to-neighbour part from pair_fn itself
    return out
