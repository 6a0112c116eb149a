r"""Nested-mesh P3M estimate of the potential energy of clumpy clusters.

For clumpy (fractal, gravoturbulent) clusters above `EXACT_MAX_N` stars, where
the spherical shell estimate is wrong by tens of per cent (|W| 35% low for a
D = 1.6 fractal), `potential_energy(method="mesh")` estimates

$$W = -G\,U, \qquad U = \sum_{i<j} \frac{m_i m_j}{r_{ij}}$$

in any units (positions L, masses M, W in G M^2 / L) with a particle-particle /
particle-mesh (P3M) split on nested meshes.

**Nested cubes.** K cubes (`mesh_levels(n)`, static) share a centre, the
coordinate-wise median of the positions; the outer one has the half-side
(Chebyshev distance) that leaves a fraction `quantile` (1e-3) of the stars
outside, and each next one half the side of the previous. A star's level is
the deepest cube that holds it. Cube k carries an $N_g^3$ mesh
(`mesh_cells(n)`, static) of spacing $H_k$ and a split scale
$s_k = \text{split}\,H_k$. With $g_k(r) = \operatorname{erf}(r/2s_k)/r$,

$$\frac1r = g_0(r) + \sum_{k=1}^{K-1} \bigl[g_k(r) - g_{k-1}(r)\bigr] + \frac{\operatorname{erfc}(r/2s_L)}{r}
\quad\text{for a pair whose shallower star has level } L:$$

- **meshes:** the term k of every pair with both stars in cube k is summed on
  cube k's mesh: TSC assignment, zero padding to $M^3$ (isolated
  boundaries: $M = 2N_g$ for the long kernel $g_0$, and $N_g$ + 32 cells
  for the short differences $g_k - g_{k-1}$, `padded_cells`), the sampled
  kernel deconvolved by the squared TSC window, and Parseval with one real FFT:
  $U_k = \frac{1}{2M^3}\sum_\mathbf{k} |\hat\rho|^2 \hat g / W^2 - \frac12 g(0)\sum_i m_i^2$,
  the last term removing each star's self-interaction. The kernels are smooth
  on the scale $s_k$, so the mesh resolves them;
- **pairs:** the rest, $\operatorname{erfc}(r/2s_L)/r$ with $L$ the pair's
  shallower level, is summed over pairs closer than `cutoff` $\times s_L$ with
  the overflow-free cell list and pair-sum engine of `progenax.neighbours`
  (farther candidates it offers are left out, so that the sum does not
  depend on the cells it reads: the same on one device or many); one cell list
  per level, in half shells (`build_cell_list(half=True)`: each close pair
  listed once, from one of its stars), of the stars of that level and the
  deeper ones within reach of the next cube's faces, every pair weighted by
  whether one of its stars is of the level (two deeper stars pair on a
  deeper level). The erfc is one polynomial fitted at trace time
  (`_ErfcFit`, 3e-7 absolute: U within 1e-6 of itself). The list's
  grid spans its stars only (their bounding box and the reach); the other
  stars are parked, massless, at one point beyond it, so they are never read
  and do not widen the grid (which would coarsen its cells: parked on a
  lattice beside the cube, as before, they read 1.74 times the candidates
  of a 1e5-star fractal). The short kernel fades to 0 over the last 10% of the
  cutoff (4.5 $s$; where the fade starts it is 0.42% of $1/r$).
  Its gradient is the engine's reverse pass (one more pass over the same
  candidates, O(n) residuals): plain reverse mode through the cell list's
  data-sized `while_loop` is not possible.
- **outside the outer cube** (≤ `quantile` n stars, the far halo): the monopole
  of the inside mass about its centre of mass, and the shell-theorem estimate
  among themselves.

Refining the cubes toward the centre keeps the number of neighbours within
the cutoff bounded in a centrally concentrated cluster, where one uniform mesh
would put most of the cluster in each core star's pair list.

**Over a device mesh** (`ring_mesh_pair_energy`, inside `jax.shard_map`,
each device an equal share): the same estimate of the whole set, with every
reduction over the shares (`_Shares`). The median and the quantile that set
the cubes are found exactly, bit by bit, by counts summed over the devices
(`order_statistics`); each device assigns its own stars to the meshes,
which are summed by `psum` and transformed on every device; the short-range
pairs of its own stars are read against every share passed once around the
ring (`_ring_pairs`, shares out of reach skipped); the far halo's shells
come from the ring too (`diagnostics.ring`). It equals the one-device
estimate to round-off (measured 5e-16 and 2.6e-16, gradients below 1e-15,
for 12,000 and 24,000 fractal stars on 4 and 8 devices), with O(n/D + N_g^3) memory per device.

**Differentiability.** Differentiable in positions and masses; the levels
(which cube holds a star) are piecewise constant. The cubes, spacings and
split scales follow the data (median, quantile) with their gradients, so the
estimate is homogeneous of degree -1 in the positions like the exact W:
$\sum_i x_i\cdot\partial W/\partial x_i = -W$ (to 1e-5, measured 2e-6), which
keeps a builder's r_h gradient consistent. Fixed shapes, jit-able; the pair
loop's trip count is data-sized inside the graph (see `progenax.neighbours.cells`).

**Accuracy** (float64, against the exact pair sum; fractal = `fractal_builder`
D = 1.6, Plummer = `plummer_builder`, Kroupa IMF, key 0; measured 2026-12-03):

| n | fractal D = 1.6 | Plummer |
|---|---|---|
| 2,000 | -0.16% | |
| 20,000 | -0.11% | -0.003% |
| 100,000 | -0.09% | |

(With the fade of the short kernel over the last 10% of the reach: -0.158%,
-0.108% and -0.0034%, against -0.152%, -0.104% and -0.0029% before it; at
100,000 stars it moved U by -2.7e-5.)

Gradient against the exact one at n = 2000 (fractal): 1.1% in norm for the
positions (P3M forces carry errors star by star, and the few stars that set
the median and the quantile carry the estimate's dependence on the cubes; the
energy, a sum, is better) and 0.08% for the masses. Directional derivatives
agree with central differences of the estimate to 1e-5. `fractal_builder(n=30_000, D=1.6, Q=0.5)` gives an
exact Q of 0.49991 (key 0) and 0.49989 (key 1), against 0.363 with the
spherical estimate.

(The half-shell lists, the fitted erfc and the narrow padding of the deeper
meshes moved U of a 1e5-star equal-mass fractal by 6e-10 of itself, from
-0.0797% to -0.0797% against the exact sum.)

**Cost.** Two real FFTs of $(2N_g)^3$ (the outer cube and its kernel), K
of $(N_g + 32)^3$ (the deeper cubes and their kernel), TSC scatters of 27
per star and cube holding it (`_assign` reads only those stars), and K
pair sums whose work grows with the clumpiness of the cluster at each
level's scale (`benchmarks/builders.py --fractal-only` prints the times).
At n = 1e6 the pairs dominate for a D = 1.6 fractal (3.6 billion
candidates, most of them at levels 2-6: off-centre clumps, which cubes
nested about the median do not refine; U took 25.8 s, 3.5 s of it without
the pairs, with the degree-22 erfc of before, 2026-12-05; see `_ErfcFit`
for the degree-10 one's 19-20 s); for gravoturbulent
stars U took 5.7 s and its gradient 18.8 s (`jax.jit(jax.grad)`, key 0).
For a 1e5-star D = 1.6 fractal (8 levels, $N_g$ = 112) U took 1.33-1.65 s
(two runs), against 4.19 s with full lists,
`jax.scipy.special.erfc`, 32 groups and $(2N_g)^3$ meshes at every level:
about 0.75 s of pairs (90 million candidates; 48 million pairs with an own
star within the reach) and 0.8 s of meshes, cubes and halo. Memory is
O(n + N_g^3).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf

from .._mesh import ring_permutation, vary_like
from .._sort import float_order, largest_passing, sortable
from .._types import Array, Masses, Positions, Scalar
from ..neighbours import build_cell_list, candidate_counts, layout_for, make_pair_sum, safe_distance
from .ring import held_value, ring_mass_inside

DEFAULT_SPLIT = 1.0
DEFAULT_CUTOFF = 4.5
DEFAULT_QUANTILE = 1e-3
_MARGIN_CELLS = 2  # empty cells around each cube: the TSC stencil reaches 1.5 H
_SQRT_PI = math.sqrt(math.pi)


def mesh_levels(n: int) -> int:
    """Static number of nested cubes for n stars: ceil(log2(n) / 2) - 1, in [4, 10]."""
    return int(min(10, max(4, math.ceil(math.log2(max(n, 2)) / 2.0) - 1)))


MAX_MESH_CELLS = 192
"""The most mesh cells per axis `mesh_cells` gives: the outer cube's padded
mesh, $(2 N_g)^3$, is then 56.6 million cells (about 1.5 GB in float64 with
its transform and spectrum). At n = 1e6 (D = 1.6 fractal, 9 levels) U took
28.2 s on 192 cells, against 46.3 s on 128 and 27.8 s on 240 (one process,
compile apart), and U grew by 1.8e-4 (192) and 2.9e-4 (240) of itself; at
n = 3e5 (`mesh_cells` 160, above the old cap of 128) 4.94 s and -0.066%
against the exact sum, against 5.65 s and -0.072% on 128. The pairs' work
falls with the spacing while the deeper cubes' meshes, $(N_g + 32)^3$,
stay cheap."""


def mesh_cells(n: int) -> int:
    """Static mesh cells per axis of each cube: about 64 (n / 20,000)^(1/3), a
    multiple of 16 in [64, `MAX_MESH_CELLS`]."""
    return int(min(MAX_MESH_CELLS, max(64, 16 * round(4.0 * (max(n, 1) / 20_000) ** (1.0 / 3.0)))))


class _Levels:
    """Cube centre, half-sides, mesh spacings, split scales and pair reaches of
    the nested levels (from the data, with their gradients: median and
    quantile) and each star's level (piecewise constant)."""

    def __init__(self, positions, n_levels, n_grid, split, cutoff, quantile, across):
        x = positions
        # The coordinate-wise median stays in the core of heavy-tailed clusters.
        self.centre = across.median(x)
        dist = jnp.max(jnp.abs(x - self.centre), axis=1)  # Chebyshev distance
        half0 = across.quantile(dist, 1.0 - quantile)
        tiny = jnp.finfo(x.dtype).eps * (1.0 + jnp.max(jnp.abs(self.centre)))
        half0 = jnp.maximum(half0 * (1.0 + 1e-6), tiny)
        shrink = 2.0 ** -jnp.arange(n_levels, dtype=x.dtype)
        self.half = half0 * shrink
        self.spacing = 2.0 * self.half / (n_grid - 2 * _MARGIN_CELLS)
        self.r_s = split * self.spacing
        self.reach = cutoff * self.r_s
        self.dist = jax.lax.stop_gradient(dist)
        # Deepest cube holding each star; -1 outside the outermost one.
        self.level = jnp.sum(self.dist[:, None] <= jax.lax.stop_gradient(self.half)[None, :], axis=1)
        self.level = self.level.astype(jnp.int32) - 1
        self.n_levels, self.n_grid = n_levels, n_grid


# -- long range: TSC meshes with isolated boundaries ---------------------------------
def _tsc_weights(u: Array):
    """The nearest cell i0 and the TSC weights of cells i0 - 1, i0, i0 + 1
    along each axis, (n, 3 axes, 3 offsets), at mesh coordinate u (cell
    centres at integers), and their derivatives in u."""
    i0 = jnp.floor(u + 0.5)
    d = u - i0
    weights = jnp.stack((0.5 * (0.5 - d) ** 2, 0.75 - d**2, 0.5 * (0.5 + d) ** 2), axis=-1)
    slopes = jnp.stack((d - 0.5, -2.0 * d, 0.5 + d), axis=-1)
    return i0.astype(jnp.int32), weights, slopes


# Stars per block of the TSC assignment (`_assign`).
_ASSIGN_BLOCK = 2**15


def _stencil_cell(i0, offset, n_grid):
    """Cell `offset` (0 to 26, traced) of the TSC stencil about i0: its offsets
    (a, b, c) from i0 - 1 along axes 0, 1, 2 (C order, a slowest) and its flat
    index (n,)."""
    a, b, c = offset // 9, (offset // 3) % 3, offset % 3
    return (a, b, c), ((i0[:, 0] + a - 1) * n_grid + i0[:, 1] + b - 1) * n_grid + i0[:, 2] + c - 1


def _mesh_blocks(on_mesh, block):
    """The stars `on_mesh` as blocks of `block` indices (padded with n, which
    names no star) and the number of blocks they fill (traced)."""
    n = on_mesh.shape[0]
    index = jnp.nonzero(on_mesh, size=n + block, fill_value=n)[0].astype(jnp.int32)
    return index, (jnp.sum(on_mesh, dtype=jnp.int32) + block - 1) // block


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _assign(u, weights, on_mesh, n_grid):
    r"""TSC mass per cell on an n_grid^3 mesh of the stars `on_mesh` (bool
    (n,); the others add nothing) at mesh coordinates `u` (n, 3), cell
    centres at integers ($u = (x - o)/H - 1/2$ for cell centres at
    $o + (i + 1/2) H$).

    Only the stars on the mesh are read, in blocks of `_ASSIGN_BLOCK` (a
    loop of as many trips as they fill, decided in the graph): a deeper
    cube holds a fraction of the stars (n = 1e6 gravoturbulent stars, 9
    cubes: 3.8 million assignments instead of 9 million). The 27 cells of
    the stencil are a loop too (`_stencil_cell`): unrolled, they were 27
    scatters, and 27 gathers in the VJP, each compiled apart. Its own VJP,
    the same blocks gathering the cotangent mesh:
    $\bar u_i = m_i \sum_{abc} \bar\rho_{abc}\,\nabla_u (w_a w_b w_c)$ and
    $\bar m_i = \sum_{abc} \bar\rho_{abc} w_a w_b w_c$ (0 off the mesh)."""
    return _assign_fwd(u, weights, on_mesh, n_grid)[0]


def _assign_fwd(u, weights, on_mesh, n_grid):
    n = u.shape[0]
    block = min(_ASSIGN_BLOCK, n)
    index, trips = _mesh_blocks(on_mesh, block)
    out_of_range = n_grid**3

    def one_block(k, grid):
        ids = jax.lax.dynamic_slice(index, (k * block,), (block,))
        real = ids < n
        at = jnp.minimum(ids, n - 1)
        i0, w, _ = _tsc_weights(u[at])
        mass = weights[at]

        def one_cell(offset, grid):
            (a, b, c), cell = _stencil_cell(i0, offset, n_grid)
            value = mass * w[:, 0, a] * w[:, 1, b] * w[:, 2, c]
            return grid.at[jnp.where(real, cell, out_of_range)].add(value, mode="drop")

        return jax.lax.fori_loop(0, 27, one_cell, grid)

    grid = vary_like(jnp.zeros(n_grid**3, u.dtype), u, weights)
    grid = jax.lax.fori_loop(0, trips, one_block, grid)
    return grid.reshape(n_grid, n_grid, n_grid), (u, weights, index, trips)


def _assign_bwd(n_grid, residuals, g):
    u, weights, index, trips = residuals  # the forward's blocks, not found again
    n = u.shape[0]
    block = min(_ASSIGN_BLOCK, n)
    g = g.reshape(-1)

    def one_block(k, acc):
        d_u, d_m = acc
        ids = jax.lax.dynamic_slice(index, (k * block,), (block,))
        at = jnp.minimum(ids, n - 1)
        i0, w, dw = _tsc_weights(u[at])
        mass = weights[at]

        def one_cell(offset, sums):
            (a, b, c), cell = _stencil_cell(i0, offset, n_grid)
            wa, wb, wc = w[:, 0, a], w[:, 1, b], w[:, 2, c]
            da, db, dc = dw[:, 0, a], dw[:, 1, b], dw[:, 2, c]
            value = g.at[cell].get(mode="fill", fill_value=0.0)
            d_mass, d_0, d_1, d_2 = sums
            return (
                d_mass + value * wa * wb * wc,
                d_0 + value * da * wb * wc,
                d_1 + value * wa * db * wc,
                d_2 + value * wa * wb * dc,
            )

        zero = jnp.zeros_like(mass)
        d_mass, *d_coords = jax.lax.fori_loop(0, 27, one_cell, (zero,) * 4)
        d_u = d_u.at[ids].set(jnp.stack(d_coords, axis=1) * mass[:, None], mode="drop")
        return d_u, d_m.at[ids].set(d_mass, mode="drop")

    zeros = vary_like((jnp.zeros_like(u), jnp.zeros_like(weights)), g, u, weights)
    d_u, d_m = jax.lax.fori_loop(0, trips, one_block, zeros)
    return d_u, d_m, None


_assign.defvjp(_assign_fwd, _assign_bwd)


def _erf_over_r(r, r_s):
    """erf(r/2 r_s)/r, finite at r = 0 (1 / (sqrt(pi) r_s))."""
    pos = r > 0
    rr = jnp.where(pos, r, 1.0)
    return jnp.where(pos, erf(rr / (2.0 * r_s)) / rr, 1.0 / (_SQRT_PI * r_s))


def _kernel(r, r_s, coarse=None):
    """erf(r/2 r_s)/r, minus erf(r/2 coarse)/r unless `coarse` is None; finite at r = 0."""
    return _erf_over_r(r, r_s) - (0.0 if coarse is None else _erf_over_r(r, coarse))


PAD_PER_SPLIT = 24
"""Zero padding of a deeper cube's mesh, in cells per unit of `split` (`padded_cells`)."""


def padded_cells(n_grid: int, split: float, difference: bool) -> int:
    r"""Cells per axis of a cube's zero-padded mesh, $m$ (static).

    The long kernel $g_0$ of the outer cube needs $m = 2 N_g$ (Hockney's
    isolated convolution: every separation inside the cube, up to
    $N_g - 1$ cells per axis, is read exactly). A deeper cube's kernel
    $g_k - g_{k-1}$ is short: $[\operatorname{erfc}(r/4s) -
    \operatorname{erfc}(r/2s)]/r$ in cells, below $\operatorname{erfc}(r /
    4\,\mathrm{split})/r$, 1e-17 at $r$ = 24 split. A padding of
    $P \ge$ 24 split cells (`PAD_PER_SPLIT`, rounded up to 16) then reads
    every separation up to $m/2$ exactly and the wrapped ones, at least
    $P + 1$ cells, as zero: $m = \min(2 N_g, N_g + P)$, 144 for the
    default $N_g$ = 112, split = 1, which makes each deeper cube's FFT 3.7
    times smaller than at $2 N_g$."""
    if not difference:
        return 2 * n_grid
    return min(2 * n_grid, n_grid + 16 * math.ceil(PAD_PER_SPLIT * split / 16))


def _mesh_spectrum(m, split, difference, dtype):
    r"""A cube's kernel spectrum on its zero-padded mesh of $m$ cells
    (`padded_cells`), in units of $1/H$, deconvolved by the squared TSC
    window and weighted for the half spectrum: $\operatorname{erf}(r/2s)/r$
    with $s$ = `split` cells, minus $\operatorname{erf}(r/4s)/r$ if
    `difference`.

    Cube k's kernel is this spectrum (the difference for k > 0) over $H_k$:
    every cube has the same mesh in units of its own spacing, and the
    coarser cube's split scale is exactly twice its own, so two FFTs serve
    all levels. The grids are built from iotas in the graph: as constants
    they would put $m^3$ tables into the program.
    """
    i = jax.lax.iota(dtype, m)
    d = jnp.minimum(i, m - i)  # distance in cells, periodic image of the padding
    r = jnp.sqrt(d[:, None, None] ** 2 + d[None, :, None] ** 2 + d[None, None, :] ** 2)
    half = m // 2 + 1

    def window(k):  # TSC window sinc^3, squared (assignment and read-back)
        x = jnp.pi * k / m
        return jnp.where(k == 0, 1.0, jnp.sin(x) / jnp.where(k == 0, 1.0, x)) ** 6

    w_xy = window(d)
    w_z = window(i[:half])
    weight = jnp.where((i[:half] == 0) | (i[:half] == m // 2), 1.0, 2.0)  # interior planes twice
    factor = (weight / w_z)[None, None, :] / (w_xy[:, None, None] * w_xy[None, :, None])
    kernel = _erf_over_r(r, split)
    if difference:
        kernel = kernel - _erf_over_r(r, 2.0 * split)
    return jnp.fft.rfftn(kernel).real * factor


def _mesh_energy(positions, masses, on_mesh, centre, half, spacing, r_s, coarse, n_grid, spectrum, across):
    r"""$\frac12\sum_{i \ne j} m_i m_j k(r_{ij})$ over the stars `on_mesh`, with
    $k$ = `_kernel(r, r_s, coarse)` (coarse None for the outer cube), on a zero-padded mesh
    (isolated); `spectrum` from `_mesh_spectrum` (its mesh of $m$ cells
    read from its shape). Over a device mesh every device assigns its own
    stars and the meshes are summed."""
    m_on = jnp.where(on_mesh, masses, 0.0)
    origin = centre - half - _MARGIN_CELLS * spacing
    rho = across.total(_assign((positions - origin) / spacing - 0.5, masses, on_mesh, n_grid))
    m = spectrum.shape[0]
    rho_hat = jnp.fft.rfftn(jnp.pad(rho, ((0, m - n_grid),) * 3))
    power = rho_hat.real**2 + rho_hat.imag**2
    total = jnp.sum(power * spectrum) / (spacing * m**3)
    self_term = _kernel(jnp.zeros((), positions.dtype), r_s, coarse)
    return 0.5 * total - 0.5 * self_term * across.total(jnp.sum(m_on**2))


# -- short range: a pair function on the neighbour engine ----------------------------
_FADE = 0.1  # the short kernel fades to 0 over the last 10% of the reach


def _short_pair(a_i, a_j, dx, erfc_fit):
    r"""$w_{ij} \operatorname{erfc}(r\,c)\,S(r) / r$ with $c = 1 / 2 r_s$ (a shared
    scalar, so that a pair costs no division by it), $w_{ij}$ the pair
    weight (`_pair_weight`) and $S$ a smoothstep from 1 to 0 over the last
    `_FADE` of the reach $R$: $S = 1 - t^2 (3 - 2t)$,
    $t = (r - (1 - f) R) / (f R)$ clipped to [0, 1]. Beyond the reach a
    pair adds nothing, so the sum does not depend on which cells the list
    reads (one device or many), and the fade keeps it smooth in the
    positions (a hard cut would jump by erfc(2.25) = 0.15% of a pair's
    1/r as it crosses). erfc is `erfc_fit` (`_ErfcFit`). 0 for the self
    pair and coincident stars (gradient-safe)."""
    r = safe_distance(dx)
    use = r > 0
    rr = jnp.where(use, r, 1.0)
    c, start, rate = _kernel_scales(a_i)
    _, fade = _fade(rr, start, rate)
    return (jnp.where(use, _pair_weight(a_i, a_j) * erfc_fit(rr * c) * fade / rr, 0.0),), None


def _fade(r, start, rate):
    """The fade's t (clipped to [0, 1]) and smoothstep S = 1 - t^2 (3 - 2t) at r."""
    t = jnp.clip((r - start) * rate, 0.0, 1.0)
    return t, 1.0 - t * t * (3.0 - 2.0 * t)


def _short_pullback(a_i, a_j, dx, g_i, g_j, wanted, erfc_fit):
    r"""`_short_pair`'s own VJP (scatter form: the pair is listed once). With
    $\phi = w E S / r$, $E = \operatorname{erfc}(c r)$, $S(t)$ the fade and
    $g$ the query's cotangent,

    $$\bar x_i = -\bar x_j = g\,\partial_r\phi\,\frac{x_i - x_j}{r},\quad
    \partial_r\phi = w\Bigl[\frac{c E' S}{r} + \frac{E\,S'(t)\,\rho}{r} - \frac{E S}{r^2}\Bigr],$$

    $\bar w = g E S / r$ to the candidate's weight feature, and for the shared
    scale $s$ of c, the fade's start $t_0$ and its rate $\rho$
    (`_pair_features`; at s = 1),
    $\bar s = g(-c\,\partial_c + t_0\,\partial_{t_0} - \rho\,\partial_\rho)\phi
    = -g\,w\,(c E' S + E\,S'(t)\,\rho)$, with $S'(t) = -6t(1 - t)$ (0 where t
    is clipped). With autodiff of the pair inside the reverse loop instead,
    a clumpy cluster's gradient of U took 1.3 times as long (n = 1e6)."""
    (g,) = g_i
    r = jnp.sqrt(sum(d * d for d in dx))
    use = r > 0
    rr = jnp.where(use, r, 1.0)
    c, start, rate = _kernel_scales(a_i)
    t, fade = _fade(rr, start, rate)
    fade_slope = -6.0 * t * (1.0 - t)
    u = rr * c
    e, e_slope = erfc_fit(u), erfc_fit.derivative(u)
    name, factor = _pair_weight_parts(a_i, a_j)
    w = a_j[name] * factor
    inv_r = 1.0 / rr
    g_phi = jnp.where(use, g * inv_r, 0.0)  # g / r on real pairs, 0 on the rest
    value = e * fade  # phi = w e fade / r
    d_i, d_j = {}, {}
    if "x" in wanted:
        d_r = w * (c * e_slope * fade + e * fade_slope * rate - value * inv_r)
        coef = g_phi * d_r * inv_r
        d_i["x"] = [coef * d for d in dx]
        d_j["x"] = [-coef * d for d in dx]
    if name in wanted:
        d_j[name] = g_phi * factor * value
    if "scale" in wanted:
        d_i["scale"] = -g_phi * rr * w * (c * e_slope * fade + e * fade_slope * rate)
    return d_i, d_j


class _ErfcFit:
    r"""erfc on [0, `u_max`] as one polynomial, cheaper than
    `jax.scipy.special.erfc` (its rational branches, each computed and
    selected: the pairs of a 1e5-star fractal's U took 0.70 s against
    1.11 s with it): $\sum_k a_k t^k$ in $t = 2u / u_{\max} - 1$ (Horner), the
    least-squares Chebyshev fit at 200 Chebyshev nodes of the lowest degree whose
    largest error on 4001 points against `math.erfc` is below `TOLERANCE`
    (degree 10 for the default reach, u_max = 2.25: erfc within 3.0e-7 and
    its slope within 3.5e-5; erfc is entire, so the fit converges fast and
    its monomial coefficients stay small). Arguments beyond u_max are read
    as u_max (the pair kernel has faded to 0 there). Where no degree up to
    `MAX_DEGREE` meets the tolerance (a reach beyond about 45 r_s),
    `jax.scipy.special.erfc`.

    **Why 1e-6.** A pair's term $w\,\operatorname{erfc}(u)\,S / r$ is then
    within 1e-6 of its $w / r$, so U, a sum of positive terms, is within
    1e-6 of itself: a thousandth of the estimate's own error against the
    exact sum (0.09-0.16%, module notes), as its gradient's (slope within
    3.5e-5 against 1.1%). The pairs are most of U's time for a clumpy
    cluster, and each pair evaluates the polynomial (its derivative too in
    the reverse pass): at degree 10 instead of 22 (1e-14, before), U of a
    1e6-star D = 1.6 fractal took 19.0-20.0 s instead of 23.4-26.3 s (one
    process, fits alternated, two calls each; degree 12 took 23.2-25.1 s,
    14 22.4-23.3 s: the loop runs much faster once the polynomial is short),
    and moved by 8e-11 of itself."""

    TOLERANCE = 1e-6
    MAX_DEGREE = 40

    def __init__(self, u_max: float):
        self.u_max = float(u_max)
        self.coefficients = self._fit(self.u_max)

    @staticmethod
    @functools.cache
    def _fit(u_max: float):
        nodes = np.cos(np.pi * (np.arange(200) + 0.5) / 200)
        check = np.linspace(-1.0, 1.0, 4001)
        at_nodes = np.array([math.erfc(v) for v in (nodes + 1.0) * (u_max / 2)])
        at_check = np.array([math.erfc(v) for v in (check + 1.0) * (u_max / 2)])
        for degree in range(8, _ErfcFit.MAX_DEGREE + 1, 2):
            chebyshev = np.polynomial.chebyshev.chebfit(nodes, at_nodes, degree)
            coefficients = np.polynomial.chebyshev.cheb2poly(chebyshev)
            if np.max(np.abs(np.polynomial.polynomial.polyval(check, coefficients) - at_check)) < _ErfcFit.TOLERANCE:
                return tuple(float(a) for a in coefficients)
        return None

    def __call__(self, u):
        if self.coefficients is None:
            return jax.scipy.special.erfc(u)
        return self._horner(self.coefficients, u)

    def derivative(self, u):
        r"""d erfc / du as the fit gives it (the derivative of its polynomial,
        0 beyond u_max where the fit is held), or erfc's own,
        $-2 e^{-u^2}/\sqrt\pi$, where there is no fit."""
        if self.coefficients is None:
            return (-2.0 / _SQRT_PI) * jnp.exp(-u * u)
        slope = tuple(k * a * (2.0 / self.u_max) for k, a in enumerate(self.coefficients))[1:]
        return jnp.where(u < self.u_max, self._horner(slope, u), 0.0)

    def _horner(self, coefficients, u):
        t = jnp.minimum(u, self.u_max) * (2.0 / self.u_max) - 1.0
        value = jnp.full_like(t, coefficients[-1])
        for a in coefficients[-2::-1]:
            value = value * t + a
        return value


def _pair_weight_parts(a_i, a_j):
    r"""The pair weight as (the candidate's feature, its factor): $m_j$ times
    1 if the query i or its candidate j is one of the level's own stars, else
    0 (two deeper stars pair on a deeper level), from the features "m" and
    "own" (1.0 or 0.0); with "own" absent, the candidate's weight "w" as it
    is (`_ring_pairs`)."""
    if "own" not in a_j:
        return "w", 1.0
    return "m", jnp.maximum(a_i["own"], a_j["own"])


def _pair_weight(a_i, a_j):
    """The weight $w_{ij}$ of `_short_pair` (`_pair_weight_parts`)."""
    name, factor = _pair_weight_parts(a_i, a_j)
    return a_j[name] * factor


def _pair_features(r_s, reach) -> dict:
    r"""The shared scalars of `_short_pair`: c, and where and how fast the
    kernel fades, as constants, and the one that carries their gradient,
    "scale" = 1 (its derivative 1 / r_s): the reach is a fixed multiple of
    r_s, so all three move together, $c \propto 1/s$, the fade's start
    $\propto s$ and its rate $\propto 1/s$ (one summed cotangent a pair in the
    reverse pass instead of three)."""
    fixed_r_s, fixed_reach = jax.lax.stop_gradient(r_s), jax.lax.stop_gradient(reach)
    return {
        "c": 0.5 / fixed_r_s,
        "fade_start": (1.0 - _FADE) * fixed_reach,
        "fade_rate": 1.0 / (_FADE * fixed_reach),
        "scale": r_s / fixed_r_s,
    }


def _kernel_scales(a_i):
    """`_short_pair`'s c, fade start and fade rate at the features' scale."""
    s = a_i["scale"]
    return a_i["c"] / s, a_i["fade_start"] * s, a_i["fade_rate"] / s


# The 3D cells with 128 workload groups, not 8: a clumpy cluster's candidate
# counts spread over orders of magnitude, and a group runs to its largest
# count. Same sums; the pairs of a 1e5-star D = 1.6 fractal's U (half-shell
# lists) took 1.06 s against 1.41 s with 32 groups and 1.26 s with 512 (one
# process, calls interleaved, best of 4; full lists: 8.4-8.7 s with 32
# against 11.2-11.8 s with 8).
_LAYOUT = layout_for(3, groups=128)


@functools.cache
def _short_sum(cutoff: float):
    """The pair sum of `_short_pair` for a reach of `cutoff` r_s (so erfc's
    argument is at most cutoff / 2). Scatter form: a half-shell list holds
    each pair once, and a candidate list holds whole cells, so a pair beyond
    the reach may be listed one way only; the engine's reverse pass is exact
    for both."""
    erfc_fit = _ErfcFit(cutoff / 2.0)
    return make_pair_sum(
        functools.partial(_short_pair, erfc_fit=erfc_fit),
        _LAYOUT,
        pullback=functools.partial(_short_pullback, erfc_fit=erfc_fit),
    )


def _cell_list(positions, reach, query=None, half=False):
    """The cell list of one level's pair sum in `_LAYOUT` (no gradient: it
    only decides which candidates are read)."""
    return build_cell_list(
        jax.lax.stop_gradient(positions),
        jax.lax.stop_gradient(reach),
        cells_per_reach=_LAYOUT.cells_per_reach,
        x_cells_per_reach=_LAYOUT.x_cells_per_reach,
        chunk=_LAYOUT.chunk,
        query=query,
        half=half,
    )


def _pairs(positions, masses, own, take, r_s, reach, cutoff):
    r"""$\sum m_i m_j \phi(r_{ij})$ over the pairs of stars that `take` part
    with at least one `own` star, each pair once: $\sum_i m_i e_i$ with
    $e_i = \sum_j w_{ij} \phi(r_{ij})$ over i's candidates in a half-shell
    cell list of the stars taking part (every close pair listed once,
    `build_cell_list(half=True)`) and $w_{ij}$ = `_pair_weight`.
    Differentiable in the positions, masses, r_s and the reach (the
    kernel's fade) through the engine's reverse pass; the cell list is built
    at the reach without its gradient."""
    cells = _cell_list(positions, reach, take, half=True)
    own_f = own.astype(positions.dtype)
    features = {"x": positions, "m": masses, "own": own_f, **_pair_features(r_s, reach)}
    sums = _short_sum(cutoff)(cells, features)
    return jnp.sum(masses * sums[:, 0])


def _park(positions, take, centre, half, reach):
    """Positions for one level's cell list: stars not taking part are put,
    massless, at one point off the grid of the level's queries, so they are
    never candidates. The queries lie in the cube, so the grid ends less than
    one cell past half + reach from the centre along each axis, and no cell
    is wider than the grid's extent, 2 (half + reach)."""
    far = centre + 4.0 * (half + reach)
    return jnp.where(take[:, None], positions, jax.lax.stop_gradient(far))


def _outside(positions, masses, inside, across):
    """U of pairs with at least one star outside the outer cube: monopole of the
    inside mass, shell theorem among the outside stars (about the inside centre
    of mass)."""
    m_in = jnp.where(inside, masses, 0.0)
    m_out = jnp.where(inside, 0.0, masses)
    total_in = across.total(jnp.sum(m_in))
    c = across.total(jnp.sum(m_in[:, None] * positions, axis=0)) / jnp.where(total_in > 0, total_in, 1.0)
    r2 = jnp.sum((positions - c) ** 2, axis=-1)
    ok = (~inside) & (r2 > 0)
    r = jnp.sqrt(jnp.where(ok, r2, 1.0))
    monopole = jnp.sum(jnp.where(ok, m_out * total_in / r, 0.0))
    order, enclosed = across.shells(r2, inside, m_out)
    m_sorted, r_sorted, ok_sorted = m_out[order], r[order], ok[order]
    return across.total(monopole + jnp.sum(jnp.where(ok_sorted, m_sorted * enclosed / r_sorted, 0.0)))


# -- the reductions: one device, or the shares of a device mesh -----------------------
def _median(x, n: int, order_statistics):
    """`jnp.median(x, axis=0)` of a set of n stars from its order statistics
    (`order_statistics(values, ranks)`): the mean of its two middle values,
    in `jnp.median`'s arithmetic (the same bits)."""
    ranks = jnp.asarray([(n - 1) // 2, n // 2])
    return 0.5 * jnp.sum(order_statistics(x, ranks), axis=0)


def _quantile(values, q, n: int, order_statistics):
    """`jnp.quantile(values, q)` of a set of n stars from its order
    statistics: linear interpolation, in `jnp.quantile`'s arithmetic (the
    weights in the default float, then back to the values' dtype)."""
    q = jnp.asarray(q)
    at = q * jnp.asarray(n - 1, q.dtype)
    low = jnp.floor(at)
    high_weight = at - low
    ranks = jnp.stack([low, jnp.ceil(at)]).astype(jnp.int32)
    low_value, high_value = order_statistics(values[:, None], ranks)[:, 0].astype(q.dtype)
    return (low_value * (1.0 - high_weight) + high_value * high_weight).astype(values.dtype)


class _OneDevice:
    """The estimate's reductions over the stars of one array."""

    @staticmethod
    def total(value):
        return value

    @staticmethod
    def order_statistics(values, ranks):
        r"""The values of ranks `ranks` (R,) of each column of `values` (n, C):
        (R, C), exactly one of the values each, with a sort's gradient
        (`ring.held_value`). Each column's floats are sorted as ordered
        unsigned integers (`sortable`): XLA's CPU sort of one integer array
        is about four times faster than its sort of floats, which must order
        NaNs (n = 1e6, three columns: 150 ms against 670 ms for `jnp.median`)."""
        keys = sortable(jax.lax.stop_gradient(values))
        at = jnp.stack([jnp.sort(keys[:, c])[ranks] for c in range(values.shape[1])], axis=1)
        return held_value(keys, at, values, _OneDevice.total)

    def median(self, x):
        return _median(x, x.shape[0], self.order_statistics)

    def quantile(self, values, q):
        return _quantile(values, q, values.shape[0], self.order_statistics)

    @staticmethod
    def shells(r2, inside, m_out):
        """The outside stars' radial order (the inside ones first) and the
        outside mass strictly inside each, in that order (`float_order`:
        distinct radii within 2e-10 relative of each other may keep their
        index order, a change of W far below its round-off)."""
        order = float_order(jnp.where(inside, 0.0, r2))
        m_sorted = m_out[order]
        return order, jnp.cumsum(m_sorted) - m_sorted

    pairs = staticmethod(_pairs)


_ONE_DEVICE = _OneDevice()


def column_median(x: Array) -> Array:
    """`jnp.median(x, axis=0)` of an (n, C) array, the same bits and gradient
    (a tie shares it), about four times faster (`_OneDevice.order_statistics`)."""
    return _ONE_DEVICE.median(x)


class _Shares(NamedTuple):
    """The estimate's reductions over the shares of a set sharded over the
    mesh axis `axis_name` of `n_devices` (inside `jax.shard_map`, each
    device `rows` stars): sums by `psum`, order statistics by a bitwise
    search over counts (`order_statistics`), the outside stars' shells and
    the short-range pairs with the other shares passed around the ring
    (`ring_mass_inside`, `_ring_pairs`)."""

    axis_name: str
    n_devices: int
    rows: int

    def total(self, value):
        return jax.lax.psum(value, self.axis_name)

    def order_statistics(self, values, ranks):
        return order_statistics(values, ranks, self)

    def median(self, x):
        """`jnp.median(x, axis=0)` of the whole set: the mean of its two middle values."""
        return _median(x, self.rows * self.n_devices, self.order_statistics)

    def quantile(self, values, q):
        """`jnp.quantile(values, q)` of the whole set (linear interpolation, the same arithmetic)."""
        return _quantile(values, q, self.rows * self.n_devices, self.order_statistics)

    def shells(self, r2, inside, m_out):
        order, _, enclosed = ring_mass_inside(jnp.where(inside, 0.0, r2), m_out, self.axis_name, self.n_devices)
        return order, enclosed

    def pairs(self, positions, masses, own, take, r_s, reach, cutoff):
        return self.total(_ring_pairs(positions, masses, own, r_s, reach, cutoff, self.axis_name, self.n_devices))


def order_statistics(values, ranks, shares: _Shares):
    r"""The values of ranks `ranks` (R,) (0-based, ascending) of each column
    of `values` (n, C), over the whole set of `shares`: (R, C).

    Each one is the largest key $t$ with at most `rank` keys below it, found
    bit by bit from the top (`_sort.largest_passing`: one `psum` of a count
    per bit, 32 or 64), over the float's bits read as ordered unsigned
    integers, so the result is one of the values exactly. Its gradient goes
    to the stars holding it (shared equally among ties), as a sort's would
    (`ring.held_value`)."""
    keys = sortable(jax.lax.stop_gradient(values))
    ranks = ranks[:, None]

    def accept(t):
        return shares.total(jnp.sum(keys[:, None, :] < t[None], axis=0, dtype=jnp.int32)) <= ranks

    like = jnp.zeros((ranks.shape[0], values.shape[1]), keys.dtype)
    found = largest_passing(accept, 8 * values.dtype.itemsize, like)
    return held_value(keys, found, values, shares.total)


def _ring_pairs(positions, masses, own, r_s, reach, cutoff, axis_name: str, n_devices: int):
    r"""This device's part of `_pairs` over a mesh: $\sum_i m_i e_i$ over its
    own stars with $e_i$ summed over the candidates of every device's share,
    each share passed once around the ring by `ppermute` (the pair
    weights $w_j = m_j (1 - \frac12[\mathrm{own}_j])$ travel with it). A
    share is read through a cell list of this device's own stars (the
    queries, weight 0 as sources) and the visitors; one whose weighted stars
    are all beyond the reach of the queries' bounding box is skipped.
    Differentiable like `_pairs`: the ring's `ppermute` carries the
    visitors' cotangents back to their devices."""
    n = positions.shape[0]
    own_f = own.astype(positions.dtype)
    query = jnp.concatenate([own, jnp.zeros(n, bool)])
    inf = jnp.asarray(jnp.inf, positions.dtype)
    fixed = jax.lax.stop_gradient(positions)
    # The shared scalars vary over the mesh: the engine's reverse pass gives
    # each device its part of their cotangents, summed by the `psum` that
    # transposes this cast (outside the `cond`, which devices take apart).
    shared = vary_like(_pair_features(r_s, reach), positions)
    reach = jax.lax.stop_gradient(reach)  # which candidates are listed
    lo = jnp.min(jnp.where(own[:, None], fixed, inf), axis=0) - reach
    hi = jnp.max(jnp.where(own[:, None], fixed, -inf), axis=0) + reach
    receive_from_next = ring_permutation(n_devices, -1)

    def read(x_v, w_v):
        xs = jnp.concatenate([positions, x_v])
        cells = _cell_list(xs, reach, query)
        ws = jnp.concatenate([jnp.zeros_like(w_v), w_v])
        return _short_sum(cutoff)(cells, {"x": xs, "w": ws, **shared})[:n, 0].astype(masses.dtype)

    def visit(carry, _):
        x_v, w_v, e = carry
        seen = jax.lax.stop_gradient(x_v)
        near = jnp.any((w_v > 0) & jnp.all((seen >= lo) & (seen <= hi), axis=1))
        e = e + jax.lax.cond(near, read, lambda x_v, w_v: jnp.zeros_like(e), x_v, w_v)
        x_v = jax.lax.ppermute(x_v, axis_name, receive_from_next)
        w_v = jax.lax.ppermute(w_v, axis_name, receive_from_next)
        return (x_v, w_v, e), None

    start = (positions, masses * (1.0 - 0.5 * own_f), jnp.zeros_like(masses))
    (_, _, e), _ = jax.lax.scan(visit, start, None, length=n_devices)
    return jnp.sum(own_f * masses * e)


def _parts(positions, masses, n_levels, n_grid, split, cutoff, quantile, diagnose=False, across=None):
    across = _ONE_DEVICE if across is None else across
    lv = _Levels(positions, n_levels, n_grid, split, cutoff, quantile, across)
    dtype = positions.dtype
    outer = _mesh_spectrum(padded_cells(n_grid, split, False), split, False, dtype)
    deeper = _mesh_spectrum(padded_cells(n_grid, split, True), split, True, dtype)
    everyone = lv.level >= 0
    u_outer = _mesh_energy(
        positions, masses, everyone, lv.centre, lv.half[0], lv.spacing[0], lv.r_s[0], None, n_grid, outer, across
    )

    def deeper_mesh(_, xs):
        # One scan step per cube (k >= 1): the shapes are the same at every
        # level, so the mesh is compiled once.
        k, half, spacing, r_s, coarse = xs
        on_mesh = lv.level >= k
        u = _mesh_energy(positions, masses, on_mesh, lv.centre, half, spacing, r_s, coarse, n_grid, deeper, across)
        return None, u

    deeper_levels = (jnp.arange(1, n_levels), lv.half[1:], lv.spacing[1:], lv.r_s[1:], lv.r_s[:-1])
    _, u_meshes = jax.lax.scan(deeper_mesh, None, deeper_levels)
    u_meshes = jnp.concatenate([u_outer[None], u_meshes])

    def level_pairs(_, xs):
        # One scan step per level: one compiled cell list and pair sum.
        k, half, r_s, reach, next_half = xs
        own = lv.level == k
        # Deeper stars within reach of the next cube's faces pair with this level's.
        take = own | ((lv.level > k) & (lv.dist > jax.lax.stop_gradient(next_half - reach)))
        fixed_reach = jax.lax.stop_gradient(reach)
        x = _park(positions, take, jax.lax.stop_gradient(lv.centre), jax.lax.stop_gradient(half), fixed_reach)
        # The reach keeps its gradient for the kernel's fade (homogeneity in x).
        u_pairs = across.pairs(x, jnp.where(take, masses, 0.0), own, take, r_s, reach, cutoff)
        if diagnose:
            return None, (u_pairs, jnp.sum(candidate_counts(_cell_list(x, fixed_reach, take, half=True))))
        return None, u_pairs

    next_half = jnp.concatenate([lv.half[1:], lv.half[-1:] / 2])  # the next cube's half-side
    _, pairs = jax.lax.scan(level_pairs, None, (jnp.arange(n_levels), lv.half, lv.r_s, lv.reach, next_half))
    out = _outside(positions, masses, everyone, across)
    if diagnose:
        return u_meshes, pairs[0], out, jnp.sum(lv.level < 0), pairs[1]
    return jnp.sum(u_meshes) + jnp.sum(pairs) + out


def mesh_pair_energy(
    positions: Positions,
    masses: Masses,
    *,
    n_levels: int | None = None,
    n_grid: int | None = None,
    split: float = DEFAULT_SPLIT,
    cutoff: float = DEFAULT_CUTOFF,
    quantile: float = DEFAULT_QUANTILE,
) -> Scalar:
    r"""$U = \sum_{i<j} m_i m_j / r_{ij}$ (positive; $W = -G U$) by nested-mesh P3M.

    See the module docstring. Static: `n_levels` (default `mesh_levels(n)`),
    `n_grid` (mesh cells per axis of each cube). `split` = $r_s / H$, `cutoff`
    the pair reach in units of $r_s$, `quantile` the fraction of stars left
    outside the outer cube.
    """
    n = masses.shape[0]
    n_levels = mesh_levels(n) if n_levels is None else int(n_levels)
    n_grid = mesh_cells(n) if n_grid is None else int(n_grid)
    return _mesh_jit(positions, masses, n_levels, n_grid, float(split), float(cutoff), float(quantile))


# Jitted once per configuration: eager calls reuse the compiled program.
_mesh_jit = jax.jit(_parts, static_argnums=(2, 3, 4, 5, 6))


def ring_mesh_pair_energy(
    positions: Positions,
    masses: Masses,
    axis_name: str,
    n_devices: int,
    *,
    split: float = DEFAULT_SPLIT,
    cutoff: float = DEFAULT_CUTOFF,
    quantile: float = DEFAULT_QUANTILE,
) -> Scalar:
    r"""`mesh_pair_energy` of a set sharded over a device mesh, from one
    device's share (inside `jax.shard_map` over the mesh axis `axis_name` of
    `n_devices`, every device the same number of stars); the same U on every
    device. Differentiable in the positions and masses in a `shard_map`
    with its type check on (the default; with `check_vma=False` a `psum`
    transposes to another `psum` and every gradient comes out D times too
    large).

    The same estimate of the whole set (the levels and meshes of the whole
    n): the cubes' centre and half-side are the whole set's median and
    quantile (`order_statistics`: exact values, no gather), each device
    assigns its stars to the meshes, which are summed (`psum`, N_g^3 values
    per level) and transformed on every device, and the short-range pairs of
    its own stars with every share, passed around the ring (`_ring_pairs`).
    It equals the one-device estimate but for the order of the additions.
    Memory O(n / D + N_g^3) per device; the ring reads D cell lists of
    2 n / D stars per level (shares beyond the reach skipped).
    """
    rows = masses.shape[0]
    n = rows * n_devices
    shares = _Shares(axis_name, n_devices, rows)
    return _parts(
        positions, masses, mesh_levels(n), mesh_cells(n), float(split), float(cutoff), float(quantile), across=shares
    )
