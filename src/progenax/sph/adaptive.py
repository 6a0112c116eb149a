r"""SPH density with per-particle smoothing lengths, and the pair function of
the density loss's gradient that relaxation descends (`progenax.sph.relax`).

Both are pair functions of `sph.pairs.pair_sum` over banded cell lists
(`sph.pairs.build_bands`): exact for any h, efficient where h varies by up to
`band_ratio ** n_bands` across the particles.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._types import Array
from .density import prepare_density_arguments
from .kernels import SUPPORT, get_kernel
from .pairs import build_bands, density_pair, pair_sum, safe_distance


@functools.cache
def loss_gradient_pair(kernel_name: str, dim: int):
    r"""The gradient of $\mathcal{L} = \sum_i (\rho_i - \rho_{t,i})^2$ at fixed
    h, gathered over each particle's own ball:

    $$\partial\mathcal{L}/\partial x_i = \sum_j \bigl[e_i m_j F(r, h_i)
    + e_j m_i F(r, h_j)\bigr] (x_i - x_j),$$

    with $e = 2(\rho - \rho_t)$ and $F = W'(r)/r = \sigma_d h^{-d-2} f'(q)/q$
    (the first term from $\rho_i$, the second from the neighbours' $\rho_j$),
    over $|x_i - x_j| < 2h_i$.

    One pass, no scatter: the exact gradient's reaction terms come from every j
    whose own ball holds i, and a ball larger than i's reaches past i's
    candidates. The pairs missed, $2h_i < r < 2h_j$, sit where $F(r, h_j)$ and
    its slope vanish (the kernel's edge), so with h varying smoothly the
    difference is small: for a Plummer sphere of 100,000 particles the
    direction differs from the exact gradient by 4e-4 in norm (0.16% for the
    median particle, 3.8% for the 99th percentile), and by nothing where h is
    uniform. It costs half the exact scatter form (one core, same sphere:
    0.50 s against 0.91 s per pass). Features: `loss_gradient_features`
    ("a" = $e\,\sigma_d h^{-d-2}$ and "inv_h" = 1/h per particle, so a pair
    costs no powers)."""
    slope = get_kernel(kernel_name).slope_over_q_in(dim)

    def pair(a_i, a_j, dx):
        r = safe_distance(dx)
        q_i = r * a_i["inv_h"]
        # A candidate list holds whole cells, some of them outside i's ball,
        # where F(r, h_i) is 0 but F(r, h_j) need not be: the ball's edge
        # is explicit so that the sum does not depend on the cell layout.
        reaction = jnp.where(q_i < SUPPORT, a_j["a"] * a_i["m"] * slope(r * a_j["inv_h"]), 0.0)
        coef = a_i["a"] * a_j["m"] * slope(q_i) + reaction
        return tuple(coef * d for d in dx), None

    return pair


def loss_gradient_features(kernel_name: str, x: Array, m: Array, h: Array, e: Array) -> dict:
    """Features of `loss_gradient_pair`: positions, masses, e σ_d h^{-d-2} and 1/h."""
    dim = x.shape[1]
    norm = get_kernel(kernel_name).normalisation(dim)
    return {"x": x, "m": m, "a": e * norm * h ** (-dim - 2), "inv_h": 1.0 / h}


def adaptive_density(
    positions: Array,
    masses: Array,
    h: Array,
    *,
    box: Array | None = None,
    kernel: str = "cubic",
    query: Array | None = None,
    n_bands: int = 8,
    band_ratio: float = 2.0,
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int = 128,
) -> Array:
    r"""SPH density $\rho_i = \sum_j m_j W(|x_i - x_j|, h_i)$ with per-particle h
    (mass / length^d), on banded cell lists (`sph.pairs`): efficient when h
    varies by up to `band_ratio ** n_bands` across the particles, exact for
    any h.

    Arguments and checks as in `progenax.sph.density` (masses and h scalars or
    per particle, (N,)); `query` (N,) bool limits the work to those particles
    (the others' densities come out 0). Differentiable in positions, masses
    and h, also inside a `lax.scan` that is itself differentiated (its reverse
    pass is plain array code). Jitted once per static configuration.
    """
    positions, masses, _, h, _, box, _ = prepare_density_arguments(positions, masses, h, box, kernel)
    n = positions.shape[0]
    masses, h = jnp.broadcast_to(masses, (n,)), jnp.broadcast_to(h, (n,))
    fn = _adaptive_density_fn(
        kernel, int(n_bands), float(band_ratio), cells_per_reach, x_cells_per_reach, chunk, int(groups)
    )
    return fn(positions, masses, h, box, None if query is None else jnp.asarray(query, bool))


@functools.cache
def _adaptive_density_fn(kernel, n_bands, band_ratio, cells_per_reach, x_cells_per_reach, chunk, groups):
    @jax.jit
    def fn(positions, masses, h, box, query):
        bands = build_bands(
            positions,
            SUPPORT * h,
            box=box,
            n_bands=n_bands,
            band_ratio=band_ratio,
            cells_per_reach=cells_per_reach,
            x_cells_per_reach=x_cells_per_reach,
            chunk=chunk,
            groups=groups,
            query=query,
        )
        features = {"x": positions, "m": masses, "h": h}
        return pair_sum(density_pair(kernel, positions.shape[1]), bands, features, 1)[:, 0]

    return fn
