r"""A turbulent velocity field: Gaussian, power-law spectrum, solenoidal/compressive mix.

*Experimental.* Three white-noise components are transformed to Fourier space
and given the amplitude $k^{-\beta_v/2}$ (power per mode $P(k) \propto k^{-\beta_v}$;
the default $\beta_v = 4$ is Burgers' $E(k) \propto k^{-2}$); the Nyquist modes (a
wavevector component $= \pm g/2$) are set to zero. Each mode is split by
the Helmholtz projections

$$\hat{\mathbf v}_c = \hat{\mathbf k}(\hat{\mathbf k}\cdot\hat{\mathbf v}), \qquad
\hat{\mathbf v}_s = \hat{\mathbf v} - \hat{\mathbf v}_c,$$

into a compressive (curl-free) and a solenoidal (divergence-free) field. Each is
normalised to unit rms and they are mixed with amplitudes $\sqrt{1-\chi}$ and
$\sqrt{\chi}$, $\chi$ the compressive fraction of the kinetic power. The two
fields are orthogonal on the periodic grid (Parseval: the projections are
orthogonal mode by mode), so the mix has unit rms; it is then multiplied by
$\mathcal M c_s$, so the **volume-weighted rms velocity of the grid is exactly
$\mathcal M c_s$** (it is divided by its measured rms, not by the expected one).

**Forcing parameter.** $b$ is tied to $\chi$ by the linear model of Federrath,
Klessen & Schmidt (2008), $b = 1 + (1/D - 1)(1 - \chi)$ in $D = 3$ dimensions:
$b = 1/3$ purely solenoidal, $b = 1$ purely compressive, so
$\chi = (3b - 1)/2$; $b < 1/3$ is taken as purely solenoidal ($\chi = 0$, no
gradient in b through the velocities there). At $b = 1$ exactly the slope of
$\sqrt{1-\chi}$ is infinite; the double-where gives it 0 there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array, ArrayLike, Key
from ..validation import check_range
from .field import check_grid, power_law_amplitude, wavevectors, white_noise_modes


def compressive_fraction(b: ArrayLike) -> Array:
    r"""$\chi = \mathrm{clip}((3b - 1)/2, 0, 1)$: the compressive share of the kinetic power."""
    return jnp.clip((3.0 * jnp.asarray(b) - 1.0) / 2.0, 0.0, 1.0)


def _safe_sqrt(x: Array) -> Array:
    positive = x > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1.0)), 0.0)


def _unit_rms(v: Array) -> Array:
    """v / rms|v| over the grid (0 if v vanishes)."""
    ms = jnp.mean(jnp.sum(v**2, axis=-1))
    return v * jnp.where(ms > 0, jax.lax.rsqrt(jnp.where(ms > 0, ms, 1.0)), 0.0)


def helmholtz_components(key: Key, grid: int, beta: ArrayLike, dtype=None) -> tuple[Array, Array]:
    """Unit-rms solenoidal and compressive fields, each (g, g, g, 3), spectrum k^-beta."""
    modes = white_noise_modes(key, grid, dtype, shape=(3,))
    real_dtype = modes.real.dtype
    kx, ky, kz = wavevectors(grid, real_dtype)
    k2 = kx**2 + ky**2 + kz**2
    positive = k2 > 0
    inv_k = jnp.where(positive, jax.lax.rsqrt(jnp.where(positive, k2, 1.0)), 0.0)
    unit = [kx * inv_k, ky * inv_k, kz * inv_k]
    # Nyquist modes (a component at -g/2) have no partner of opposite wavevector on
    # the grid, so their projection is not Hermitian: leave them out.
    nyquist = (jnp.abs(kx) == grid // 2) | (jnp.abs(ky) == grid // 2) | (jnp.abs(kz) == grid // 2)
    modes = modes * jnp.where(nyquist, 0.0, power_law_amplitude(grid, beta, real_dtype))
    along = unit[0] * modes[0] + unit[1] * modes[1] + unit[2] * modes[2]
    compressive = jnp.stack([u * along for u in unit])
    solenoidal = modes - compressive

    def to_real(m):
        return jnp.moveaxis(jnp.fft.irfftn(m, s=(grid, grid, grid), axes=(-3, -2, -1)), 0, -1)

    return _unit_rms(to_real(solenoidal)), _unit_rms(to_real(compressive))


def velocity_field(
    key: Key,
    grid: int,
    mach: ArrayLike,
    sound_speed: ArrayLike,
    b: ArrayLike,
    beta: ArrayLike = 4.0,
) -> Array:
    r"""The turbulent velocity field (g, g, g, 3) with grid rms $\mathcal M c_s$ (see the module docstring).

    **Arguments:** `key`; `grid` (static); `mach` ($\mathcal M$ > 0); `sound_speed`
    ($c_s$, km/s); `b` (forcing, sets $\chi$); `beta` (spectral slope $\beta_v$).

    **Returns:** velocities in the units of `sound_speed`.
    """
    grid = check_grid(grid)
    mach = check_range("mach", mach, lower=0.0)
    sound_speed = check_range("sound_speed", sound_speed, lower=0.0)
    b = check_range("b", b, lower=0.0, upper=1.0, upper_inclusive=True)
    dtype = jnp.result_type(jnp.asarray(mach), float)
    solenoidal, compressive = helmholtz_components(key, grid, beta, dtype)
    chi = compressive_fraction(b)
    mixed = _safe_sqrt(1.0 - chi) * solenoidal + _safe_sqrt(chi) * compressive
    return jnp.asarray(mach) * jnp.asarray(sound_speed) * _unit_rms(mixed)
