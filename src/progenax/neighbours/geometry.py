r"""Separations, the minimum image and the gradient-safe distance: one home each.

Positions are component-major inside the engine: a list or leading axis of d
arrays, one per axis, so that a block of pairs is d arrays (M, C) rather than
one (M, C, d) gather.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._types import Array
from ..sampling import safe_sqrt


def image_shift(dx: Array, length: Array) -> Array:
    r"""$L\,\lfloor \Delta x / L + \tfrac12 \rfloor$: the whole boxes between
    $\Delta x$ and its minimum image (`minimum_image`, `separation`).

    The one minimum-image convention of the library: exactly half a box,
    $\pm L/2$, maps to $-L/2$ (`jnp.round`, which rounds half to even, would
    leave $+L/2$). Either image is at the same distance, so every pair sum is
    unchanged; one convention keeps every code path the same. The shift is
    piecewise constant: its derivative is zero.
    """
    return length * jnp.floor(dx / length + 0.5)


def minimum_image(dx: Array, length: Array) -> Array:
    r"""$\Delta x - L\,\lfloor \Delta x / L + \tfrac12 \rfloor$, in $[-L/2, L/2)$
    (`image_shift`). The derivative in $\Delta x$ is 1."""
    return dx - image_shift(dx, length)


def separation(x_i: Array, x_j: Array, box: Array | None) -> list[Array]:
    r"""$x_i - x_j$ per axis (a list of d arrays), minimum image in a periodic box.

    `x_i`, `x_j`: component-major, (d, ...) arrays or lists of d arrays,
    broadcastable; `box`: None (open) or the box lengths (d,).

    In a box the candidate is moved to its nearest image first,
    $x_i - (x_j + \mathrm{shift})$ with the shift of `image_shift`: the same
    image as `minimum_image(x_i - x_j)`, rounded differently (in the last
    place, for pairs across the boundary). XLA's CPU backend fuses this form
    into a pair function that reads the separation twice (a gradient's
    $F(r)\,\Delta x$); written as $\Delta x$ − shift, the separation was
    stored to memory and read back, about 10% of a 3D density gradient.
    """
    out = []
    for axis in range(len(x_i)):
        dx = x_i[axis] - x_j[axis]
        if box is not None:
            dx = x_i[axis] - (x_j[axis] + image_shift(dx, box[axis]))
        out.append(dx)
    return out


def safe_distance(dx: list[Array]) -> Array:
    r"""$|dx| = \sqrt{\sum_a dx_a^2}$ for a list of components, 0 with a zero
    (never NaN) derivative for coincident particles (`sampling.safe_sqrt`).

    Summed component by component: stacking them first (one (d, M, C) array)
    keeps XLA from fusing the pair code and costs 5x in the slot loop."""
    return safe_sqrt(sum(d * d for d in dx))


def unsort(values: Array, order: Array) -> Array:
    """Values (N, ...) in sorted order back to the original order (`order`:
    sorted slot -> original index)."""
    return jnp.zeros_like(values).at[order].set(values, unique_indices=True)
