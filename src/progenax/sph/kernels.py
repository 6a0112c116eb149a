r"""SPH smoothing kernels with compact support $2h$.

Every kernel is written as $W(r, h) = \sigma_d\, h^{-d} f(q)$ with $q = r/h$,
$f(q) = 0$ for $q \ge 2$ and $\int W\, d^d x = 1$ in $d = 1, 2, 3$ dimensions.
Alongside $f$ each kernel provides $f'(q)/q$ as a polynomial, so the pair force
direction never divides by $r$:

$$\nabla_{x_i} W(|x_i - x_j|, h) = \sigma_d\, h^{-d-2}\,\frac{f'(q)}{q}\,(x_i - x_j),
\qquad \partial_h W = -\sigma_d\, h^{-d-1}\,\bigl(d\, f(q) + q f'(q)\bigr).$$

Both are finite at $r = 0$ (all three kernels are flat there) and continuous at
the support edge $q = 2$ (cubic spline: $f, f', f''$ vanish; Wendland C2 and C4
vanish to third and fifth order).

- `cubic`: the M4 B-spline of Monaghan & Lattanzio (1985):
  $f = 1 - \tfrac32 q^2 + \tfrac34 q^3$ for $q < 1$, $\tfrac14 (2 - q)^3$ for
  $1 \le q < 2$; $\sigma_d = 2/3,\ 10/(7\pi),\ 1/\pi$.
- `wendland_c2`, `wendland_c4`: Wendland (1995) functions as tabulated by Dehnen
  & Aly (2012), with $u = q/2$: C2 is $(1-u)^4(1+4u)$ in 2D and 3D and
  $(1-u)^3(1+3u)$ in 1D; C4 is $(1-u)^6(1 + 6u + \tfrac{35}{3}u^2)$ in 2D and 3D
  and $(1-u)^5(1 + 5u + 8u^2)$ in 1D.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax.numpy as jnp

from .._types import Array

SUPPORT = 2.0  # kernel support radius in units of h, for every kernel here


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A kernel's shape f(q), f'(q)/q and normalisation σ_d by dimension."""

    name: str
    shape: Callable[[Array], Array]
    slope_over_q: Callable[[Array], Array]
    norm: dict[int, float]

    def normalisation(self, dim: int) -> float:
        return self.norm[dim]

    def _fns(self, dim: int) -> tuple[Callable[[Array], Array], Callable[[Array], Array]]:
        return self.shape, self.slope_over_q

    def slope_over_q_in(self, dim: int) -> Callable[[Array], Array]:
        """f'(q)/q for `dim` dimensions (so that, with per-particle
        σ_d h^{-d-2} and 1/h computed once, a pair needs no powers of h)."""
        return self._fns(dim)[1]

    def value(self, r: Array, h: Array, dim: int) -> Array:
        """W(r, h) in units of h^-d (r and h in the same length unit)."""
        return self.norm[dim] * h ** (-dim) * self.shape(r / h)

    def gradient_factor(self, r: Array, h: Array, dim: int) -> Array:
        """(1/r) dW/dr, so that ∇_i W = gradient_factor * (x_i - x_j); finite at r = 0."""
        return self.norm[dim] * h ** (-dim - 2) * self.slope_over_q(r / h)

    def h_derivative(self, r: Array, h: Array, dim: int) -> Array:
        """∂W/∂h at fixed r."""
        q = r / h
        return -self.norm[dim] * h ** (-dim - 1) * (dim * self.shape(q) + q * q * self.slope_over_q(q))


def _cubic_shape(q: Array) -> Array:
    # (1/4)(2 - q)_+^3 - (1 - q)_+^3: the two pieces without a branch.
    a = jnp.maximum(2.0 - q, 0.0)
    b = jnp.maximum(1.0 - q, 0.0)
    return 0.25 * a * a * a - b * b * b


def _cubic_slope_over_q(q: Array) -> Array:
    # f' = -3/4 (2 - q)_+^2 + 3 (1 - q)_+^2; divided by q with the removable
    # singularity at 0 taken out: -3 + 9/4 q for q < 1.
    a = jnp.maximum(2.0 - q, 0.0)
    q_safe = jnp.where(q < 1.0, 1.0, q)
    return jnp.where(q < 1.0, -3.0 + 2.25 * q, -0.75 * a * a / q_safe)


def _wendland(power: int, poly: Callable[[Array], Array], poly_slope: Callable[[Array], Array]):
    """f(q) = (1-u)^p P(u), u = q/2, and f'(q)/q, with P' divisible as needed."""

    def shape(q):
        u = q / 2.0
        t = jnp.maximum(1.0 - u, 0.0)
        return t**power * poly(u)

    def slope_over_q(q):
        # d/du [(1-u)^p P] = (1-u)^(p-1) [ (1-u) P' - p P ] = -(1-u)^(p-1) u R(u);
        # f'(q)/q = (1/2) d/du / (2u) = -(1-u)^(p-1) R(u) / 4.
        u = q / 2.0
        t = jnp.maximum(1.0 - u, 0.0)
        return -(t ** (power - 1)) * poly_slope(u) / 4.0

    return shape, slope_over_q


# (1-u)^4 (1+4u): derivative = -20 u (1-u)^3, so R = 20.
_c2_shape, _c2_slope = _wendland(4, lambda u: 1.0 + 4.0 * u, lambda u: 20.0 + 0.0 * u)
# (1-u)^3 (1+3u): derivative = -12 u (1-u)^2, so R = 12.
_c2_1d_shape, _c2_1d_slope = _wendland(3, lambda u: 1.0 + 3.0 * u, lambda u: 12.0 + 0.0 * u)
# (1-u)^6 (1+6u+35/3 u^2): derivative = -(56/3) u (1-u)^5 (1+5u), so R = 56/3 (1+5u).
_c4_shape, _c4_slope = _wendland(6, lambda u: 1.0 + 6.0 * u + 35.0 / 3.0 * u**2, lambda u: 56.0 / 3.0 * (1.0 + 5.0 * u))
# (1-u)^5 (1+5u+8u^2): derivative = -14 u (1-u)^4 (1+4u), so R = 14 (1+4u).
_c4_1d_shape, _c4_1d_slope = _wendland(5, lambda u: 1.0 + 5.0 * u + 8.0 * u**2, lambda u: 14.0 * (1.0 + 4.0 * u))


@dataclasses.dataclass(frozen=True)
class _WendlandKernel(Kernel):
    """A kernel whose polynomial differs in 1D (the Wendland functions)."""

    shape_1d: Callable[[Array], Array] = None  # type: ignore[assignment]
    slope_over_q_1d: Callable[[Array], Array] = None  # type: ignore[assignment]

    def _fns(self, dim):
        return (self.shape_1d, self.slope_over_q_1d) if dim == 1 else (self.shape, self.slope_over_q)

    def value(self, r, h, dim):
        shape, _ = self._fns(dim)
        return self.norm[dim] * h ** (-dim) * shape(r / h)

    def gradient_factor(self, r, h, dim):
        _, slope = self._fns(dim)
        return self.norm[dim] * h ** (-dim - 2) * slope(r / h)

    def h_derivative(self, r, h, dim):
        shape, slope = self._fns(dim)
        q = r / h
        return -self.norm[dim] * h ** (-dim - 1) * (dim * shape(q) + q * q * slope(q))


# Dehnen & Aly (2012) normalisations for support H: 1D C2 5/4, C4 3/2; 2D C2 7/π,
# C4 9/π; 3D C2 21/(2π), C4 495/(32π), each over H^d. With H = 2h, σ_d = that / 2^d.
KERNELS: dict[str, Kernel] = {
    "cubic": Kernel(
        "cubic", _cubic_shape, _cubic_slope_over_q, {1: 2.0 / 3.0, 2: 10.0 / (7.0 * math.pi), 3: 1.0 / math.pi}
    ),
    "wendland_c2": _WendlandKernel(
        "wendland_c2",
        _c2_shape,
        _c2_slope,
        {1: 5.0 / 4.0 / 2.0, 2: 7.0 / math.pi / 4.0, 3: 21.0 / (2.0 * math.pi) / 8.0},
        _c2_1d_shape,
        _c2_1d_slope,
    ),
    "wendland_c4": _WendlandKernel(
        "wendland_c4",
        _c4_shape,
        _c4_slope,
        {1: 3.0 / 2.0 / 2.0, 2: 9.0 / math.pi / 4.0, 3: 495.0 / (32.0 * math.pi) / 8.0},
        _c4_1d_shape,
        _c4_1d_slope,
    ),
}


def get_kernel(name: str) -> Kernel:
    """The kernel called `name`; a ValueError lists the choices otherwise."""
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {name!r}")
    return KERNELS[name]


def kernel_value(r: Array, h: Array, *, dim: int, kernel: str = "cubic") -> Array:
    r"""$W(r, h)$ of the named kernel in `dim` dimensions (support $2h$).

    Safe to differentiate in r at r = 0 (the slope is zero there) and at the
    support edge. For the gradient with respect to a separation vector use
    `kernel_gradient`, which avoids the $r = |x|$ square root at zero.
    """
    if dim not in (1, 2, 3):
        raise ValueError(f"dim must be 1, 2 or 3, got {dim}")
    return get_kernel(kernel).value(jnp.asarray(r), jnp.asarray(h), dim)


def kernel_gradient(dx: Array, h: Array, *, kernel: str = "cubic") -> Array:
    r"""$\nabla W(|dx|, h)$ with respect to the separation vector `dx` (..., d).

    Computed as $(f'(q)/q)\,\sigma_d h^{-d-2}\,dx$: finite (zero) at dx = 0.
    """
    dx = jnp.asarray(dx)
    dim = dx.shape[-1]
    if dim not in (1, 2, 3):
        raise ValueError(f"the last axis of dx must have length 1, 2 or 3, got {dim}")
    r = jnp.sqrt(jnp.sum(dx**2, axis=-1))
    factor = get_kernel(kernel).gradient_factor(r, jnp.asarray(h), dim)
    return factor[..., None] * dx
