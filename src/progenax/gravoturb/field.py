r"""Gaussian random fields on a periodic grid, and their rank-copula log-density.

*Experimental.* A field on a periodic cube of `grid`$^3$ cells is made in Fourier
space: white noise $w(\mathbf x)$ (unit variance per cell) is transformed with
`rfftn`, multiplied by $\sqrt{P(k)} = k^{-\beta/2}$ with $k = |\mathbf k|$ in
integer wavenumbers ($\mathbf k \in \{-g/2, \dots, g/2 - 1\}^3$), the $k = 0$
mode is set to zero (zero mean), and transformed back. The multiplier is real
and even in $\mathbf k$, so the result is exactly real. Its power spectrum (power
per mode, averaged over shells) is $\propto k^{-\beta}$.

**Rank copula.** The log-density is the Gaussian field $z$ mapped through its
own empirical CDF and then through the inverse CDF of the target PDF:

$$s_c = s\!\left(u_c\right), \qquad u_c = \frac{\mathrm{rank}(z_c) + 1/2}{g^3},$$

so the $g^3$ cell values are exactly the model's mid-rank quantiles (the
measured PDF is the model, up to the grid's $g^3$ quantiles), while the spatial
structure (which cells are dense, which are neighbours) is that of $z$. The
ranks do not depend on the PDF's parameters, so derivatives with respect to the
Mach number, $b$ and $\alpha$ flow through $s(u)$ alone (sorting only decides who
gets which quantile; no gradient through the permutation). The spectral slope
$\beta$ enters only through the ranks, so its gradient is zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._sort import float_order, inverse_permutation
from .._types import Array, ArrayLike, Key

GRID_MIN = 8


def check_grid(grid: int) -> int:
    """A static grid size: a power-of-two int >= 8 (FFT-friendly, even Nyquist plane)."""
    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)):
        raise ValueError(f"grid must be a power-of-two int >= {GRID_MIN} (static), got {grid!r}")
    grid = int(grid)
    if grid < GRID_MIN or grid & (grid - 1):
        raise ValueError(f"grid must be a power of two >= {GRID_MIN} (8, 16, 32, 64, 128, ...), got {grid}")
    return grid


def wavevectors(grid: int, dtype=None) -> tuple[Array, Array, Array]:
    """Integer wavevector components on the `rfftn` half-grid, shapes broadcasting to (g, g, g//2+1)."""
    dtype = dtype or jnp.result_type(float)
    k_full = jnp.asarray(np.fft.fftfreq(grid, 1.0 / grid), dtype)
    k_half = jnp.asarray(np.fft.rfftfreq(grid, 1.0 / grid), dtype)
    return k_full[:, None, None], k_full[None, :, None], k_half[None, None, :]


def wavenumber(grid: int, dtype=None) -> Array:
    """|k| on the `rfftn` half-grid, shape (g, g, g//2+1)."""
    kx, ky, kz = wavevectors(grid, dtype)
    return jnp.sqrt(kx**2 + ky**2 + kz**2)


def power_law_amplitude(grid: int, beta: ArrayLike, dtype=None) -> Array:
    r"""$k^{-\beta/2}$ on the half-grid, 0 at $k = 0$ (double-where: no NaN in gradients)."""
    k = wavenumber(grid, dtype)
    positive = k > 0
    k_safe = jnp.where(positive, k, 1.0)
    return jnp.where(positive, k_safe ** (-0.5 * jnp.asarray(beta, k.dtype)), 0.0)


def white_noise_modes(key: Key, grid: int, dtype=None, shape: tuple[int, ...] = ()) -> Array:
    """`rfftn` of unit white noise on the grid (leading `shape` for several fields)."""
    dtype = dtype or jnp.result_type(float)
    noise = jax.random.normal(key, shape + (grid, grid, grid), dtype)
    return jnp.fft.rfftn(noise, axes=(-3, -2, -1))


def gaussian_random_field(key: Key, grid: int, beta: ArrayLike, dtype=None) -> Array:
    r"""A zero-mean Gaussian random field on a periodic `grid`$^3$ with $P(k) \propto k^{-\beta}$.

    **Returns:** (g, g, g) real values (unnormalised; only ranks are used by the builders).
    """
    grid = check_grid(grid)
    modes = white_noise_modes(key, grid, dtype)
    amplitude = power_law_amplitude(grid, beta, modes.real.dtype)
    return jnp.fft.irfftn(modes * amplitude, s=(grid, grid, grid))


def mid_rank_uniforms(values: Array) -> tuple[Array, Array]:
    r"""Empirical-CDF uniforms of `values`: $u = (\mathrm{rank} + 1/2)/N$ and $1 - u$ exactly.

    Ties are broken by position (a Gaussian field has none). Both arrays have the
    shape of `values` and no gradient (ranks are piecewise constant).
    """
    flat = jax.lax.stop_gradient(values).reshape(-1)
    size = flat.shape[0]
    ranks = inverse_permutation(float_order(flat))
    dtype = values.dtype
    u = (ranks.astype(dtype) + 0.5) / size
    u_complement = ((size - ranks).astype(dtype) - 0.5) / size
    return u.reshape(values.shape), u_complement.reshape(values.shape)


def shell_power_spectrum(field: Array, n_bins: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Shell-averaged power per mode of a real periodic field (or of a vector field, summed).

    `field` is (g, g, g) or (g, g, g, 3). Shells are integer-width bins in |k|
    from 1 to g/2 (the zero mode excluded). A measurement tool (numpy, not traced).

    **Returns:** `(k, power)`: the mean |k| and the mean |f_k|^2 of each shell.
    """
    f = np.asarray(field, dtype=np.float64)
    if f.ndim == 3:
        f = f[..., None]
    if f.ndim != 4 or not (f.shape[0] == f.shape[1] == f.shape[2]):
        raise ValueError(f"field must be (g, g, g) or (g, g, g, c) on a cubic grid, got shape {np.shape(field)}")
    grid = f.shape[0]
    modes = np.fft.rfftn(f, axes=(0, 1, 2))
    power = np.sum(np.abs(modes) ** 2, axis=-1)
    # Modes on the kz = 0 and Nyquist planes of the half-grid stand for one mode
    # each; the others for a mode and its conjugate. Weight accordingly.
    weight = np.full(power.shape, 2.0)
    weight[..., 0] = 1.0
    weight[..., -1] = 1.0
    k = np.asarray(wavenumber(grid, jnp.float32), dtype=np.float64)
    n_bins = n_bins or grid // 2
    shell = np.floor(k + 0.5).astype(int)
    keep = (shell >= 1) & (shell <= n_bins)
    counts = np.bincount(shell[keep], weights=weight[keep], minlength=n_bins + 1)[1:]
    total_power = np.bincount(shell[keep], weights=(weight * power)[keep], minlength=n_bins + 1)[1:]
    total_k = np.bincount(shell[keep], weights=(weight * k)[keep], minlength=n_bins + 1)[1:]
    good = counts > 0
    return total_k[good] / counts[good], total_power[good] / counts[good]


def spectral_slope(field: Array, k_min: float = 2.0, k_max: float | None = None) -> float:
    """Least-squares slope of log P(k) against log k over shells in [k_min, k_max] (default g/4)."""
    k, p = shell_power_spectrum(field)
    k_max = k_max or np.asarray(field).shape[0] / 4
    use = (k >= k_min) & (k <= k_max)
    return float(np.polyfit(np.log(k[use]), np.log(p[use]), 1)[0])
