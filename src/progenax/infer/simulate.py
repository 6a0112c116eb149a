r"""Simulated observations of a Plummer cluster that follow the likelihood's model.

`plummer_builder(..., Q=q)` rescales the velocities so that the realised virial
ratio $T/|W|$ of the N stars equals q *exactly*. That rescaling is a data-dependent
factor: the realised $T/|W|$ of N independent draws from the DF scatters about 1/2
(mass-weighted, so a few massive stars dominate T; about 5 % at N = 2,000 with
Kroupa masses), and the exact rescaling moves every velocity by that scatter. The
unbinned likelihood instead treats stars as independent draws from the DF with
velocity scale $\sqrt{2Q}$, whose posterior on Q is narrower (about 1.5 % at
N = 2,000). Data drawn with `exact_virial=False` (the default) follow the
likelihood's model: `plummer_builder(..., Q=None)` (the equilibrium DF, velocities
in the centre-of-mass frame) with velocities multiplied by $\sqrt{2Q}$.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import ArrayLike, Key
from ..builders import model_builder, plummer_builder
from ..models import King
from .data import ObservedCluster, observe


def simulate_model(
    key: Key | int,
    model,
    *,
    n: int,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike = 0.5,
    projected: bool = False,
    velocities: bool | str = True,
    velocity_error: float | None = None,
    **parameters: ArrayLike,
) -> ObservedCluster:
    """An observed cluster of n stars drawn from any registered model (a name or a
    class, `progenax.model_builder`), following the likelihoods' model: the
    equilibrium DF velocities (`Q=None`) multiplied by sqrt(2Q). `**parameters`
    are the model's own (`r_h`, `W0`, ...); other arguments as for `simulate_plummer`.
    """
    if isinstance(key, int):
        key = jax.random.PRNGKey(key)
    k_err = jax.random.fold_in(key, 1)  # error draws; the build uses `key` itself
    ic = model_builder(key, model, n=n, alpha=alpha, Q=None, **parameters)
    ic = eqx.tree_at(lambda c: c.state.velocities, ic, ic.state.velocities * jnp.sqrt(2.0 * jnp.asarray(Q)))
    return observe(ic, projected=projected, velocities=velocities, velocity_error=velocity_error, key=k_err)


def simulate_plummer(
    key: Key | int,
    *,
    n: int,
    r_h: ArrayLike = 1.0,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike = 0.5,
    exact_virial: bool = False,
    projected: bool = False,
    velocities: bool | str = True,
    velocity_error: float | None = None,
) -> ObservedCluster:
    """An observed Plummer cluster of n stars (pc, km/s, Msun) from `plummer_builder`.

    **Arguments:**

    - `key`: `jax.random` key or int seed; `n`: number of stars.
    - `r_h` (pc), `alpha` (Kroupa high-mass slope), `Q` (virial ratio).
    - `exact_virial`: False draws velocities from the DF scaled by sqrt(2Q), as
      the likelihood assumes; True uses the builder's exact T/|W| = Q rescaling
      (the realised Q is then exactly Q, which the likelihood does not model).
    - `projected`: observe only the (x, y) positions.
    - `velocities`, `velocity_error`: as for `observe` ("los" keeps the
      line-of-sight component; `velocity_error` adds Gaussian errors to it).

    **Returns:** an `ObservedCluster` with positions, velocities and masses.
    """
    observation = dict(projected=projected, velocities=velocities, velocity_error=velocity_error)
    if not exact_virial:
        return simulate_model(key, "plummer", n=n, r_h=r_h, alpha=alpha, Q=Q, **observation)
    if isinstance(key, int):
        key = jax.random.PRNGKey(key)
    ic = plummer_builder(key, n=n, r_h=r_h, alpha=alpha, Q=Q)
    return observe(ic, **observation, key=jax.random.fold_in(key, 1))


def simulate_king(
    key: Key | int,
    *,
    n: int,
    r_h: ArrayLike = 1.0,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike = 0.5,
    W0: ArrayLike = 6.0,
    projected: bool = False,
    velocities: bool | str = True,
    velocity_error: float | None = None,
) -> ObservedCluster:
    """An observed King cluster of n stars from `king_builder`, following the King likelihood's model.

    `king_builder(..., Q=None)` draws velocities from the equilibrium DF; they are
    multiplied by sqrt(2Q) (the likelihood's Q). Positions are about the model
    centre, velocities in the centre-of-mass frame (as the builder leaves them).
    Other arguments as for `simulate_plummer`.
    """
    return simulate_model(
        key,
        King,
        n=n,
        r_h=r_h,
        alpha=alpha,
        Q=Q,
        W0=W0,
        projected=projected,
        velocities=velocities,
        velocity_error=velocity_error,
    )
