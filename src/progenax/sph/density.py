r"""SPH density and density loss, differentiable with O(N) gradient memory.

$$\rho_i = \sum_j m_j\, W(|x_i - x_j|, h_i), \qquad
\mathcal{L} = \sum_i (\rho_i - \rho_{0,i})^2,$$

the sum including the self term $j = i$, with $h_i$ the smoothing length of the
particle whose density is measured (the "gather" form). Units: positions and h
in any one length unit L, masses in M, densities in M L^-d.

The default backend, `"cells"`, is the pair function `pairs.density_pair` on
the neighbour engine (`progenax.neighbours.make_pair_sum`, symmetric form):
one cell list of reach $2\max_i h_i$, and the engine's reverse pass, which
pulls the cotangent $\bar\rho$ back to

$$\bar x_i = \sum_j \bigl(\bar\rho_i m_j F(r_{ij}, h_i) + \bar\rho_j m_i F(r_{ij}, h_j)\bigr)(x_i - x_j),\quad
\bar m_i = \sum_j \bar\rho_j W(r_{ij}, h_j),\quad
\bar h_i = \bar\rho_i \sum_j m_j \partial_h W(r_{ij}, h_i),$$

with $F = W'(r)/r$ (`pairs.density_pullback`, the pair's analytic VJP), in
one more pass over the same candidates, gather only:
the residuals kept for the gradient are O(N) (the features, the cell list),
where autodiff through the padded arrays would store every pair slot. Only the
cotangents that are asked for are computed. Forward mode (`jax.jvp`) is not
defined for this backend; use `backend="brute"` for that.

`"brute"` is the O(N^2) sum (plain autodiff, small N) and `"jax_md"` is
jax-md's neighbour list with its overflow check and reallocation, which needs
concrete positions (it cannot run inside `jit`); both are references for tests
and benchmarks.

**Checks.** Bad shapes, kernels and backends raise `ValueError` at once; h
and the box must be positive and finite, a periodic box at least 4 max h long
(twice the support radius: below it the minimum image misses a neighbour's
second image), and the positions finite: eagerly a
`ValueError` naming the argument, under `jit` an `equinox.error_if` with the
same message (never a silent NaN or a density of the wrong size).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..neighbours import build_cell_list, layout_for, minimum_image
from ..sampling import safe_norm
from ..validation import check_finite, check_range, error_if, testable
from .kernels import SUPPORT, get_kernel
from .pairs import density_pair_sum

BACKENDS = ("cells", "brute", "jax_md")


# -- argument handling --------------------------------------------------------
def checked_positions(positions: ArrayLike, dims: tuple[int, ...] = (1, 2, 3), *, traced: bool = True) -> Array:
    """Positions as a float (N, d) array, N >= 1 and d in `dims`, all finite:
    a `ValueError` naming them eagerly (the first bad row), an `error_if`
    under jit (one NaN would otherwise make every density NaN through the
    cell grid; `traced=False` skips it, for positions laid out over a device
    mesh, which the check would gather). The one check of every SPH entry
    point's positions."""
    positions = jnp.asarray(positions)
    if positions.ndim != 2 or positions.shape[1] not in dims:
        shown = ", ".join(map(str, dims))
        raise ValueError(f"positions must have shape (N, d) with d in {shown}; got {positions.shape}")
    if positions.shape[0] == 0:
        raise ValueError("positions must hold at least one particle, got shape (0, d)")
    if not jnp.issubdtype(positions.dtype, jnp.floating):
        positions = positions.astype(jnp.result_type(float))
    check_finite("positions", positions)
    if not traced:
        return positions
    bad = jnp.any(~jnp.isfinite(positions))
    if isinstance(bad, jax.core.Tracer):
        return error_if(positions, bad, "positions must be finite (NaN or inf found)")
    return positions


BOX_SUPPORT_MESSAGE = (
    "box must be at least twice the kernel's support radius (2h, so 4 max h) along every axis: in a "
    "smaller box a particle's support holds two images of a neighbour, and the minimum image counts one"
)


def checked_box(box: ArrayLike | None, dim: int, dtype, h: ArrayLike | None = None) -> Array | None:
    """None (open boundaries), or the periodic lengths (dim,) from a scalar or
    one per axis, positive and finite; with `h` (scalar or per particle), at
    least twice the support radius 2 max h along every axis (`BOX_SUPPORT_MESSAGE`:
    a 4x4 lattice in a unit box with h = 0.45 came out 13% light). `ValueError`
    eagerly, `error_if` under jit."""
    if box is None:
        return None
    if jnp.ndim(box) not in (0, 1) or jnp.size(box) not in (1, dim):
        raise ValueError(f"box must be a scalar or one length per axis ({dim}), got shape {jnp.shape(box)}")
    box = jnp.broadcast_to(check_range("box", box, lower=0.0).astype(dtype), (dim,))
    if h is None:
        return box
    xp, (lengths, widths) = testable(box, h)
    too_small = xp.any(xp.asarray(lengths) < 2.0 * SUPPORT * xp.max(xp.asarray(widths)))
    if xp is np:
        if too_small:
            raise ValueError(f"{BOX_SUPPORT_MESSAGE}; got box {np.asarray(lengths)} for max h {np.max(widths):.6g}")
        return box
    return error_if(box, too_small, BOX_SUPPORT_MESSAGE)


def prepare_density_arguments(positions, masses, h, box, kernel, backend="cells"):
    """`density`'s arguments checked (shapes, ranges, finite positions, the box
    against the support) and converted; `adaptive_density` takes the same."""
    positions = checked_positions(positions)
    n, dim = positions.shape
    dtype = positions.dtype
    kern = get_kernel(kernel)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    m_uniform = jnp.ndim(masses) == 0
    masses = jnp.asarray(masses, dtype) if m_uniform else _per_particle("masses", masses, n, dtype)
    h_uniform = jnp.ndim(h) == 0
    if not h_uniform:
        h = _per_particle("h", h, n, dtype)
    h = check_range("h", h, lower=0.0).astype(dtype)
    return positions, masses, m_uniform, h, h_uniform, checked_box(box, dim, dtype, h), kern


def checked_masses(masses: ArrayLike, n: int, dtype) -> Array:
    """Particle masses (N,) from a scalar or (N,), >= 0 and finite (`relax`'s)."""
    return _per_particle("masses", check_range("masses", masses, lower=0.0, lower_inclusive=True), n, dtype)


def _per_particle(name, value, n, dtype):
    value = jnp.asarray(value, dtype)
    if value.ndim == 0:
        return jnp.broadcast_to(value, (n,))
    if value.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got {value.shape}")
    return value


# -- the cell-list backend: a pair function on the neighbour engine -------------
@functools.cache
def _cells_density_fn(kernel_name: str, dim: int, layout):
    """ρ(positions, masses, h, box) for one static configuration: one cell list
    of reach 2 max h (every pair inside either particle's support is a
    candidate both ways, so the engine's symmetric, gather-only form is exact).
    Jitted once per configuration: eager calls (and eager `jax.grad`) reuse
    the compiled loops."""
    pair_sum = density_pair_sum(kernel_name, dim, layout)

    def density(positions, masses, h, box):
        reach = jax.lax.stop_gradient(SUPPORT * jnp.max(h))
        cells = build_cell_list(
            jax.lax.stop_gradient(positions),
            reach,
            box=box,
            cells_per_reach=layout.cells_per_reach,
            x_cells_per_reach=layout.x_cells_per_reach,
            chunk=layout.chunk,
        )
        return pair_sum(cells, {"x": positions, "m": masses, "h": h})[:, 0]

    return jax.jit(density)


# -- reference backends -------------------------------------------------------
def _brute_density(positions, masses, h, h_uniform, box, kern):
    """The O(N^2) sum with plain autodiff (gradient-safe at r = 0)."""
    dim = positions.shape[1]
    dx = positions[:, None, :] - positions[None, :, :]
    dx = dx if box is None else minimum_image(dx, box)
    h_i = h if h_uniform else h[:, None]
    return jnp.sum(masses[None, :] * kern.value(safe_norm(dx), h_i, dim), axis=-1)


def _jax_md_density(positions, masses, h, h_uniform, box, kern):
    """jax-md's neighbour list, allocated from the concrete data, with its
    overflow check and reallocation (the seed's JAX reference)."""
    try:
        from jax_md import partition, space
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("backend='jax_md' needs jax-md: pip install 'progenax[jaxmd]'") from err
    n, dim = positions.shape
    # Under jax.grad (not jit) the primal values are concrete; under jit not.
    concrete_x, concrete_h = jax.lax.stop_gradient(positions), jax.lax.stop_gradient(h)
    if isinstance(concrete_x, jax.core.Tracer) or isinstance(concrete_h, jax.core.Tracer):
        raise ValueError("backend='jax_md' allocates its neighbour list from concrete data; call it outside jit")
    reach = float(SUPPORT * jnp.max(concrete_h))
    if box is None:
        lo = jnp.min(concrete_x, axis=0)
        shifted = concrete_x - lo
        side = jnp.max(shifted, axis=0) * 1.001 + 3.0 * reach
        displacement, _ = space.free()
    else:
        shifted, side = jnp.mod(concrete_x, box), box
        displacement, _ = space.periodic(box)
    neighbours = partition.neighbor_list(displacement, side, reach, dr_threshold=0.0, format=partition.Sparse).allocate(
        shifted
    )
    i, j = neighbours.idx
    # jax-md's pair list excludes i == j and pads with index n.
    real = i < n
    i_safe, j_safe = jnp.where(real, i, 0), jnp.where(real, j, 0)
    dx = positions[i_safe] - positions[j_safe]
    dx = dx if box is None else minimum_image(dx, box)
    h_pair = h if h_uniform else h[i_safe]
    w = jnp.where(real, masses[j_safe] * kern.value(safe_norm(dx), h_pair, dim), 0.0)
    self_term = masses * kern.value(jnp.zeros(n, positions.dtype), h, dim)
    return self_term + jax.ops.segment_sum(w, i_safe, num_segments=n)


# -- public API ---------------------------------------------------------------
def density(
    positions: ArrayLike,
    masses: ArrayLike,
    h: ArrayLike,
    *,
    box: ArrayLike | None = None,
    kernel: str = "cubic",
    backend: str = "cells",
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int | None = None,
) -> Array:
    r"""SPH density $\rho_i = \sum_j m_j W(|x_i - x_j|, h_i)$, self term included.

    **Arguments:**

    - `positions`: (N, d) with d = 2 or 3 (1 also works), any length unit L.
    - `masses`: scalar or (N,), mass unit M.
    - `h`: smoothing length, scalar or (N,) (L); the kernel support is 2h.
    - `box`: None for open boundaries (cells cover the data's bounding box), or
      the periodic box length, a scalar or one per axis (minimum image).
    - `kernel`: "cubic", "wendland_c2" or "wendland_c4".
    - `backend`: "cells" (default: exact cell list, O(N) memory gradient),
      "brute" (O(N^2) reference) or "jax_md" (reference; not inside jit).
    - `cells_per_reach`, `x_cells_per_reach`, `chunk`, `groups`: static
      layout of the cell list and its slot loop (None: `neighbours.LAYOUTS`).

    h and `box` must be positive and finite, the positions finite, and a
    periodic box at least twice the support radius 2h (4 max h) along every
    axis (the minimum image counts one image of each neighbour): a
    `ValueError` naming the argument eagerly, an `equinox.error_if` under jit.

    **Returns:** ρ (N,) in M L^-d. Differentiable (reverse mode) in positions,
    masses and h; runs under `jit` and `vmap`, in float32 and float64.

    ```python
    rho = progenax.sph.density(x, 1.0, 0.5, box=100.0)
    ```
    """
    positions, masses, m_uniform, h, h_uniform, box, kern = prepare_density_arguments(
        positions, masses, h, box, kernel, backend
    )
    if backend != "cells":
        masses = jnp.broadcast_to(masses, positions.shape[:1])
    if backend == "brute":
        return _brute_density(positions, masses, h, h_uniform, box, kern)
    if backend == "jax_md":
        return _jax_md_density(positions, masses, h, h_uniform, box, kern)
    layout = layout_for(
        positions.shape[1],
        cells_per_reach=cells_per_reach,
        x_cells_per_reach=x_cells_per_reach,
        chunk=chunk,
        groups=groups,
    )
    return _cells_density_fn(kern.name, positions.shape[1], layout)(positions, masses, h, box)


def density_loss(
    positions: ArrayLike,
    masses: ArrayLike,
    h: ArrayLike,
    rho0: ArrayLike,
    *,
    box: ArrayLike | None = None,
    kernel: str = "cubic",
    backend: str = "cells",
    cells_per_reach: int | None = None,
    x_cells_per_reach: int | None = None,
    chunk: int | None = None,
    groups: int | None = None,
) -> Array:
    r"""$\mathcal{L} = \sum_i (\rho_i - \rho_{0,i})^2$ with $\rho$ from `density`.

    `rho0` is a scalar or (N,) target in M L^-d; the other arguments are those of
    `density`. Differentiable in positions, masses, h and rho0.

    ```python
    loss, grad = jax.value_and_grad(progenax.sph.density_loss)(x, 1.0, 0.5, 10.0, box=L)
    ```
    """
    rho = density(
        positions,
        masses,
        h,
        box=box,
        kernel=kernel,
        backend=backend,
        cells_per_reach=cells_per_reach,
        x_cells_per_reach=x_cells_per_reach,
        chunk=chunk,
        groups=groups,
    )
    rho0 = jnp.asarray(rho0, rho.dtype)
    if rho0.ndim:  # an (N, 1) target broadcast against (N,) summed N^2 terms
        rho0 = _per_particle("rho0", rho0, rho.shape[0], rho.dtype)
    return jnp.sum((rho - rho0) ** 2)
