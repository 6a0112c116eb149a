r"""Rotation in equilibrium: Lynden-Bell's flip of the azimuthal velocity.

A spherical (or any axisymmetric) equilibrium $f(\mathcal E, L)$ stays an
equilibrium when only the part of its DF that is odd in $L_z$ changes
(Lynden-Bell 1960): the density, the speed distribution at each radius and every
even moment are those of the non-rotating model. Following AGAMA's
$f(\mathcal E, L)\,(1 + k\tanh(L_z/L_0))$, each star's $L_z$ (about the $z$ axis
through the model centre) is made positive with probability

$$p_+ = \tfrac12\,\big(1 + k \tanh(|L_z|/L_0)\big)\qquad(L_0 = 0:\ p_+ = \tfrac12(1 + k)),$$

and negative otherwise, by reversing the azimuthal component of its velocity
only: $\mathbf v \to \mathbf v - 2 v_\phi \hat{\boldsymbol\phi}$ with
$v_\phi = L_z/R$. Positions, $|\mathbf v|$, $v_R$, $v_z$ and $|L_z|$ are those of the
non-rotating draw; with $L_0 = 0$ the mean azimuthal velocity at any place is
$k\,\langle |v_\phi| \rangle$. $k = 1$ puts every star on a prograde orbit (the
maximally rotating model of the given even part).

**Random stream.** One uniform per star from `fold_in(key, ROTATION_STREAM)` of
the builder's key, so every other stream (masses, radii, speeds, directions,
segregation, binaries) is untouched by the option.

**Gradients.** The flips are discrete decisions ($u < p_+$): the velocities are
differentiable in everything that shaped the orbits (through the values, the
signs held fixed), but only **partially in `rotation` ($k$) and `rotation_scale`
($L_0$)**, whose pathwise gradient is exactly 0 (registered as partial in the
audit).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..sampling import safe_divide
from ..validation import ParameterChecks, check_scalar

ROTATION_STREAM = 13
"""`fold_in` constant of the rotation's uniforms (segregation uses 7, binaries 11)."""


def check_rotation_arguments(
    checks: ParameterChecks, rotation: ArrayLike | None, rotation_scale: ArrayLike
) -> tuple[Array | None, Array | None]:
    """`rotation` k in [-1, 1] (or None: no rotation) and `rotation_scale` L_0 >= 0
    (pc km/s), checked eagerly or through `checks` under jit; (None, None) without
    rotation, where a `rotation_scale` other than 0 is a `ValueError`."""
    if rotation is None:
        # It was ignored: a cluster that did not rotate, with nothing recorded.
        given = rotation_scale is not None and not isinstance(rotation_scale, jax.core.Tracer)
        if given and np.any(np.asarray(rotation_scale) != 0):
            raise ValueError("rotation_scale applies to a rotating cluster: give rotation too (k in [-1, 1])")
        return None, None
    check_scalar("rotation", rotation)
    check_scalar("rotation_scale", rotation_scale)
    k = checks.range("rotation", rotation, lower=-1.0, upper=1.0, lower_inclusive=True, upper_inclusive=True)
    scale = checks.range("rotation_scale", rotation_scale, lower=0.0, lower_inclusive=True)
    return k, scale


def prograde_probability(L_z: Array, rotation: ArrayLike, rotation_scale: ArrayLike) -> Array:
    r"""$p_+ = \frac12(1 + k\tanh(|L_z|/L_0))$, and $\frac12(1 + k)$ at $L_0 = 0$ (module docstring)."""
    scale = jnp.asarray(rotation_scale, L_z.dtype)
    positive = scale > 0  # double where: L_z / 0 never reaches a gradient
    shape = jnp.where(positive, jnp.tanh(jnp.abs(L_z) / jnp.where(positive, scale, 1.0)), 1.0)
    return 0.5 * (1.0 + jnp.asarray(rotation, L_z.dtype) * shape)


def apply_rotation(
    key: Array, positions: Array, velocities: Array, rotation: ArrayLike, rotation_scale: ArrayLike = 0.0
) -> Array:
    r"""Velocities with the sign of each star's $v_\phi$ drawn as in the module docstring.

    **Arguments:** `key` (already the rotation stream's), `positions` (n, 3) about
    the model centre, `velocities` (n, 3), `rotation` $k \in [-1, 1]$,
    `rotation_scale` $L_0 \ge 0$ (units of $|\mathbf x||\mathbf v|$, e.g. pc km/s).

    **Returns:** the velocities (n, 3); only $v_x, v_y$ change, and only by the flip.
    """
    x, y = positions[:, 0], positions[:, 1]
    vx, vy = velocities[:, 0], velocities[:, 1]
    L_z = x * vy - y * vx
    u = jax.random.uniform(key, L_z.shape, L_z.dtype)
    prograde = u < jax.lax.stop_gradient(prograde_probability(L_z, rotation, rotation_scale))
    flip = prograde != (L_z > 0)
    flip = flip & (L_z != 0)  # L_z = 0 has no sign to choose
    c = 2.0 * safe_divide(L_z, x * x + y * y)  # 2 v_phi / R (R = 0 gives L_z = 0: no flip)
    vx_new = jnp.where(flip, vx + c * y, vx)
    vy_new = jnp.where(flip, vy - c * x, vy)
    return velocities.at[:, 0].set(vx_new).at[:, 1].set(vy_new)


def rotate(key: Array, positions: Array, velocities: Array, params: dict, rotation, rotation_scale) -> Array:
    """A builder's step: `apply_rotation` with `fold_in(key, ROTATION_STREAM)` of the
    builder's key (skipped when `rotation` is None), recording k and L_0 in `params`."""
    if rotation is None:
        return velocities
    params["rotation"] = rotation
    params["rotation_scale"] = rotation_scale
    k_rot = jax.random.fold_in(key, ROTATION_STREAM)
    return apply_rotation(k_rot, positions, velocities, rotation, rotation_scale)
