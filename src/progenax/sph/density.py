r"""SPH density and density loss, differentiable with O(N) gradient memory.

$$\rho_i = \sum_j m_j\, W(|x_i - x_j|, h_i), \qquad
\mathcal{L} = \sum_i (\rho_i - \rho_{0,i})^2,$$

the sum including the self term $j = i$, with $h_i$ the smoothing length of the
particle whose density is measured (the "gather" form). Units: positions and h
in any one length unit L, masses in M, densities in M L^-d.

The default backend, `"cells"`, sums over the exact cell list of `cells.py`
and has a hand-written reverse pass: the cotangent of $\rho$, $\bar\rho$, pulls
back to

$$\bar x_i = \sum_j \bigl(\bar\rho_i m_j F(r_{ij}, h_i) + \bar\rho_j m_i F(r_{ij}, h_j)\bigr)(x_i - x_j),\quad
\bar m_i = \sum_j \bar\rho_j W(r_{ij}, h_j),\quad
\bar h_i = \bar\rho_i \sum_j m_j \partial_h W(r_{ij}, h_i),$$

with $F = W'(r)/r$: one more pass over the same candidates, so the residuals
kept for the gradient are O(N) (sorted positions, the cell list), where
autodiff through the padded arrays would store every pair slot. Only the
cotangents that are asked for are computed. Forward-mode (`jax.jvp`) is not
defined for this backend; use `backend="brute"` for that.

`"brute"` is the O(N^2) sum (plain autodiff, small N) and `"jax_md"` is
jax-md's neighbour list with its overflow check and reallocation, which needs
concrete positions (it cannot run inside `jit`); both are references for tests
and benchmarks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._types import Array, ArrayLike
from ..neighbours.cells import CellList, build_cell_list, fold_candidates
from .kernels import SUPPORT, get_kernel

BACKENDS = ("cells", "brute", "jax_md")
DEFAULT_CHUNK = 16
DEFAULT_GROUPS = 8
# Cells of side reach / k along y and z and reach / kx along x (see cells.py);
# chosen by measurement in benchmarks/sph.py.
DEFAULT_CELLS_PER_REACH = {1: 1, 2: 2, 3: 1}
DEFAULT_X_CELLS_PER_REACH = {1: 4, 2: 4, 3: 4}


# -- argument handling --------------------------------------------------------
def _prepare(positions, masses, h, box, kernel, backend):
    positions = jnp.asarray(positions)
    if positions.ndim != 2 or positions.shape[1] not in (1, 2, 3):
        raise ValueError(f"positions must have shape (N, d) with d in 1, 2, 3; got {positions.shape}")
    if not jnp.issubdtype(positions.dtype, jnp.floating):
        positions = positions.astype(jnp.result_type(float))
    n, dim = positions.shape
    dtype = positions.dtype
    kern = get_kernel(kernel)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    m_uniform = jnp.ndim(masses) == 0
    masses = jnp.asarray(masses, dtype) if m_uniform else _per_particle("masses", masses, n, dtype)
    h_uniform = jnp.ndim(h) == 0
    h = jnp.asarray(h, dtype)
    if not h_uniform:
        h = _per_particle("h", h, n, dtype)
    # Test the comparison, not h: under jit a closed-over constant h is
    # concrete while the comparison built from it is traced.
    positive = jnp.all(h > 0)
    if not isinstance(positive, jax.core.Tracer) and not bool(positive):
        raise ValueError("h must be positive")
    if box is not None:
        if jnp.ndim(box) not in (0, 1) or jnp.size(box) not in (1, dim):
            raise ValueError(f"box must be a scalar or one length per axis ({dim}), got shape {jnp.shape(box)}")
        box = jnp.broadcast_to(jnp.asarray(box, dtype), (dim,))
    return positions, masses, m_uniform, h, h_uniform, box, kern


def _per_particle(name, value, n, dtype):
    value = jnp.asarray(value, dtype)
    if value.ndim == 0:
        return jnp.broadcast_to(value, (n,))
    if value.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got {value.shape}")
    return value


# -- the cell-list backend with its hand-written reverse pass ------------------
@functools.cache
def _cells_density_fn(kernel_name: str, m_uniform: bool, h_uniform: bool, k: int, kx: int, chunk: int, groups: int):
    """ρ(positions, masses, h, box) for one static configuration, with a custom VJP.

    `m_uniform` / `h_uniform`: masses / h are scalars shared by all particles
    (no per-pair gather, one kernel evaluation per pair in the reverse pass).
    """
    kernel = get_kernel(kernel_name)

    def per_particle(values, uniform, cells):
        """(sorted values, their candidate-space copy) or the scalar twice."""
        if uniform:
            return values, values
        sorted_values = values[cells.order]
        return sorted_values, cells.candidates(sorted_values)

    def forward(positions, masses, h, box):
        reach = SUPPORT * (h if h_uniform else jnp.max(h))
        cells = build_cell_list(
            jax.lax.stop_gradient(positions),
            jax.lax.stop_gradient(reach),
            box=box,
            cells_per_reach=k,
            x_cells_per_reach=kx,
            chunk=chunk,
        )
        dim = cells.dim
        _, m_c = per_particle(masses, m_uniform, cells)
        h_s, _ = per_particle(h, h_uniform, cells)
        x_c = cells.candidates(cells.positions)

        def terms(i, j, valid):
            r = _distance(cells.separation(cells.positions[:, i], x_c, j))
            m_j = m_c if m_uniform else m_c[j]
            h_i = h_s if h_uniform else h_s[i]
            return (jnp.sum(jnp.where(valid, m_j * kernel.value(r, h_i, dim), 0.0), axis=1),)

        (rho_s,) = fold_candidates(cells, terms, 1, positions.dtype, chunk=chunk, groups=groups)
        return _unsort(rho_s, cells), cells

    @jax.custom_vjp
    def density(positions, masses, h, box):
        return forward(positions, masses, h, box)[0]

    def density_fwd(positions, masses, h, box):
        # Which cotangents are wanted, kept in the residuals' tree structure
        # (() for yes, None for no) so the reverse pass can skip the others.
        want = tuple(() if p.perturbed else None for p in (positions, masses, h))
        rho, cells = forward(positions.value, masses.value, h.value, None if box is None else box.value)
        return rho, (cells, masses.value, h.value, want)

    def density_bwd(residuals, rho_bar):
        cells, masses, h, want = residuals
        want_x, want_m, want_h = (w is not None for w in want)
        dim = cells.dim
        g_s = rho_bar[cells.order]
        g_c = cells.candidates(g_s)
        m_s, m_c = per_particle(masses, m_uniform, cells)
        h_s, h_c = per_particle(h, h_uniform, cells)
        x_c = cells.candidates(cells.positions)

        def terms(i, j, valid):
            g_i = g_s[i]
            m_i = m_s if m_uniform else m_s[i]
            h_i = h_s if h_uniform else h_s[i]
            dx = cells.separation(cells.positions[:, i], x_c, j)
            r = _distance(dx)
            g_j = g_c[j]
            m_j = m_c if m_uniform else m_c[j]
            h_j = h_c if h_uniform else h_c[j]
            out = []
            if want_x:
                f_i = kernel.gradient_factor(r, h_i, dim)
                if h_uniform:
                    coef = (g_i * m_j + g_j * m_i) * f_i
                else:
                    coef = g_i * m_j * f_i + g_j * m_i * kernel.gradient_factor(r, h_j, dim)
                coef = jnp.where(valid, coef, 0.0)
                out += [jnp.sum(coef * d, axis=1) for d in dx]
            if want_m:
                w_j = kernel.value(r, h_j, dim)
                out.append(jnp.sum(jnp.where(valid, g_j * w_j, 0.0), axis=1))
            if want_h:
                dw = jnp.where(valid, m_j * kernel.h_derivative(r, h_i, dim), 0.0)
                out.append(g_i[:, 0] * jnp.sum(dw, axis=1))
            return tuple(out)

        n_out = dim * want_x + want_m + want_h
        sums = list(fold_candidates(cells, terms, n_out, g_s.dtype, chunk=chunk, groups=groups))
        x_bar = m_bar = h_bar = None
        if want_x:
            x_bar = _unsort(jnp.stack(sums[:dim], axis=1), cells)
            sums = sums[dim:]
        if want_m:
            m_sorted_bar = sums.pop(0)
            m_bar = jnp.sum(m_sorted_bar) if m_uniform else _unsort(m_sorted_bar, cells)
        if want_h:
            h_sorted_bar = sums.pop(0)
            h_bar = jnp.sum(h_sorted_bar) if h_uniform else _unsort(h_sorted_bar, cells)
        box_bar = None if cells.box is None else jnp.zeros_like(cells.box)
        return x_bar, m_bar, h_bar, box_bar

    density.defvjp(density_fwd, density_bwd, symbolic_zeros=True)
    # Jitted once per configuration: eager calls (and eager jax.grad) reuse the
    # compiled loops instead of tracing and compiling them at every call.
    return jax.jit(density)


def _distance(dx: list[Array]) -> Array:
    # The primal sqrt at r = 0 is fine: gradients come from the hand-written
    # reverse pass, which never differentiates this sqrt.
    return jnp.sqrt(sum(d * d for d in dx))


def _unsort(values: Array, cells: CellList) -> Array:
    return jnp.zeros_like(values).at[cells.order].set(values, unique_indices=True)


# -- reference backends -------------------------------------------------------
def _pair_density(dx, masses, h, h_uniform, kern, dim):
    """ρ_i from separations dx (N, M, d) to M candidates with masses (M,),
    gradient-safe at r = 0 (double where: r is never sqrt(0) under autodiff)."""
    r2 = jnp.sum(dx * dx, axis=-1)
    nonzero = r2 > 0.0
    r = jnp.sqrt(jnp.where(nonzero, r2, 1.0))
    h_i = h if h_uniform else h[:, None]
    w = jnp.where(nonzero, kern.value(r, h_i, dim), kern.value(jnp.zeros_like(r), h_i, dim))
    return jnp.sum(masses * w, axis=-1)


def _minimum_image(dx, box):
    return dx if box is None else dx - box * jnp.round(dx / box)


def _brute_density(positions, masses, h, h_uniform, box, kern):
    dim = positions.shape[1]
    dx = _minimum_image(positions[:, None, :] - positions[None, :, :], box)
    return _pair_density(dx, masses[None, :], h, h_uniform, kern, dim)


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
    dx = _minimum_image(positions[i_safe] - positions[j_safe], box)
    r2 = jnp.sum(dx * dx, axis=-1)
    r = jnp.sqrt(jnp.where(real & (r2 > 0), r2, 1.0))
    h_pair = h if h_uniform else h[i_safe]
    w = jnp.where(real, masses[j_safe] * kern.value(r, h_pair, dim), 0.0)
    w = jnp.where(real & (r2 == 0), masses[j_safe] * kern.value(0.0 * r, h_pair, dim), w)
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
    chunk: int = DEFAULT_CHUNK,
    groups: int = DEFAULT_GROUPS,
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
    - `cells_per_reach`, `chunk`: static tuning of the cell list (defaults:
      2 in 2D, 1 in 3D; 16 slots per loop step).

    **Returns:** ρ (N,) in M L^-d. Differentiable (reverse mode) in positions,
    masses and h; runs under `jit` and `vmap`, in float32 and float64.

    ```python
    rho = progenax.sph.density(x, 1.0, 0.5, box=100.0)
    ```
    """
    positions, masses, m_uniform, h, h_uniform, box, kern = _prepare(positions, masses, h, box, kernel, backend)
    if backend != "cells":
        masses = jnp.broadcast_to(masses, positions.shape[:1])
    if backend == "brute":
        return _brute_density(positions, masses, h, h_uniform, box, kern)
    if backend == "jax_md":
        return _jax_md_density(positions, masses, h, h_uniform, box, kern)
    dim = positions.shape[1]
    k = DEFAULT_CELLS_PER_REACH[dim] if cells_per_reach is None else int(cells_per_reach)
    kx = DEFAULT_X_CELLS_PER_REACH[dim] if x_cells_per_reach is None else int(x_cells_per_reach)
    if min(k, kx, int(chunk)) < 1:
        raise ValueError(
            f"cells_per_reach, x_cells_per_reach and chunk must be positive integers, got {k}, {kx}, {chunk}"
        )
    fn = _cells_density_fn(kern.name, m_uniform, h_uniform, k, kx, int(chunk), int(groups))
    return fn(positions, masses, h, box)


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
    chunk: int = DEFAULT_CHUNK,
    groups: int = DEFAULT_GROUPS,
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
    return jnp.sum((rho - jnp.asarray(rho0, rho.dtype)) ** 2)
