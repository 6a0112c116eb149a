r"""Projections of a relaxation step: constraints applied to each proposed
displacement, in order (`progenax.sph.relaxation`).

A projection maps the positions $x$ (N, d), a proposed displacement
$\Delta x$ (N, d) and each particle's trust radius $s_i$ (N,) (the largest
step the optimiser allows it, `max_step` local spacings) to the displacement
actually taken. They compose: a spherical cluster uses
`(KeepRadii, LimitStep, KeepCentreOfMass)`, a periodic box `(LimitStep,)`.
Each is differentiable (no hard decision on a traced value but the cap's
own, whose derivative is that of the capped vector).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..diagnostics.radii import lagrangian_radii
from ..sampling import safe_divide, safe_norm

# KeepRadii holds the Lagrangian radii at the mass fractions k / 8. The
# stars' masses make each radius noisy (a Kroupa IMF is an effective sample of
# N/15 stars), and with 63 of them (1/64-mass shells, thinner than a kernel)
# that noise was pinned into the relaxed density. Measured at N = 100,000,
# 100 steps, rms error inside 3 r_h for seeds 0 and 1: Plummer 3.6% with 63
# radii, 2.3% and 2.8% with 7; King W0 = 9 5.7% and 7.1% with 63, 5.8% and
# 8.0% with 7 (16 radii: Plummer 2.5%, King 7.8%, seed 0).
PROFILE_KNOTS = 8
# Below SMALL_N stars, 16 knots: the live region (`smoothing_lengths`) ends
# inside the cluster (Plummer: at 0.9 r_h for N = 2,000, 1.7 r_h for 10,000),
# and its edge, where the kernel's smoothing of the steepening profile makes
# the SPH density high, pulls its outer layer inwards. Plummer, 200 steps,
# rms inside 3 r_h and the fewest stars a 0.2 r_h shell keeps: N = 2,000
# 53.1% and 64% with 8 knots, 52.5% and 82% with 16; N = 10,000 22.5% with
# the 1.4-1.6 r_h shell emptied (516 stars to 0) with 8, 20.2% and 86% with 16.
SMALL_N = 50_000
SMALL_N_KNOTS = 16


class Projection(eqx.Module):
    """A constraint on a step: `projection(x, dx, trust) -> dx`."""

    @abc.abstractmethod
    def __call__(self, x: Array, dx: Array, trust: Array) -> Array:
        raise NotImplementedError


def project(projections: tuple[Projection, ...], x: Array, dx: Array, trust: Array) -> Array:
    """`dx` through every projection in turn."""
    for p in projections:
        dx = p(x, dx, trust)
    return dx


class LimitStep(Projection):
    r"""$\Delta x_i$ scaled down to $|\Delta x_i| \le s_i$ (the trust radius):
    without it, steps large enough to converge quickly in the bulk diverge
    where the gradient is steep."""

    def __call__(self, x, dx, trust):
        speed2 = jnp.sum(dx * dx, axis=1)
        moving = speed2 > 0  # double where: the norm's gradient at 0
        speed = jnp.sqrt(jnp.where(moving, speed2, 1.0))
        return dx * jnp.where(moving & (speed > trust), trust / speed, 1.0)[:, None]


def centre_of_mass(x: Array, w: Array) -> Array:
    """The `w`-weighted mean position, (d,)."""
    return jnp.sum(w[:, None] * x, axis=0) / jnp.sum(w)


class KeepCentreOfMass(Projection):
    r"""Keep the centre of mass (weights `weights`, the stars' masses): take
    out the mean displacement, from each particle in proportion to its trust
    radius, $\Delta x_i \leftarrow \Delta x_i - s_i \sum_j w_j \Delta x_j /
    \sum_j w_j s_j$. A uniform shift instead (the mean is mostly the halo's
    large, noisy moves) jolted a King core, whose spacings are 30 times
    smaller, by up to a spacing per step; without any, the pair forces' small
    net sum made the cluster drift by 0.05 r_h in 60 steps, away from the
    target's centre."""

    weights: Array

    def __call__(self, x, dx, trust):
        w = self.weights
        # No particle free to move (a cluster too small to resolve: every trust 0): no drift to take out.
        drift = safe_divide(jnp.sum(w[:, None] * dx, axis=0), jnp.sum(w * trust))
        return dx - trust[:, None] * drift


class KeepHalfMassRadius(Projection):
    """Scale every particle's offset from `centre` so that the `weights`-weighted
    half-mass radius is `radius` (the input's, `of`): one uniform stretch, so
    it adds no radial structure. With `KeepRadii` holding the profile the
    density loss sees (the tracer masses), this keeps the stars' own
    half-mass radius: the two profiles differ by the IMF's noise (a Plummer
    sample of 10,000 Kroupa stars had its mass-weighted r_h 5% beyond its
    number-weighted one), and holding every knot of the mass-weighted profile
    against a target that wants the number profile emptied a shell between
    two knots (583 stars to 0)."""

    radius: Array
    weights: Array
    centre: Array

    @classmethod
    def of(cls, x: Array, weights: Array) -> KeepHalfMassRadius:
        centre = centre_of_mass(x, weights)
        return cls(profile_knots(x, weights, 2, centre)[0], weights, centre)

    def __call__(self, x, dx, trust):
        d = x + dx - self.centre
        now = profile_knots(x + dx, self.weights, 2, self.centre)[0]
        return self.centre + d * (self.radius / now) - x


def profile_knots(x: Array, w: Array, knots: int, centre: Array) -> Array:
    """Lagrangian radii about `centre` (weights `w`) at the mass fractions
    k / knots, k = 1 .. knots - 1 (the half-mass radius among them when
    `knots` is even)."""
    return lagrangian_radii(x, w, knot_fractions(knots, x.dtype), centre=centre)


def knot_fractions(knots: int, dtype) -> Array:
    """The mass fractions k / knots, k = 1 .. knots - 1."""
    return jnp.asarray(np.arange(1, knots) / knots, dtype)


class KeepRadii(Projection):
    """Move every particle along its ray from `centre` by the one smooth,
    monotonic map of radius that puts the Lagrangian radii of `x + dx` back on
    `knots` (the input's, `profile_knots`): piecewise linear between them,
    proportional inside the first and shifted beyond the last. The radial mass
    profile is the input's at every knot, the half-mass radius included, while
    the particles rearrange freely at smaller scales, radially too. (Holding
    every rank's radius instead pins the random sample's radial Poisson noise
    in place: at N = 20,000 that left 9% to 16% error in the relaxed
    interior.) Applied before `LimitStep`: where the target is steep (a King
    core) the step's coherent radial part is large, and capped first it would
    shrink the rest with it."""

    knots: Array
    weights: Array
    centre: Array

    @classmethod
    def of(cls, x: Array, weights: Array, knots: int | None = None) -> KeepRadii:
        """The hold of the profile of `x` about its centre of mass at `knots`
        (even) mass fractions: default `PROFILE_KNOTS`, `SMALL_N_KNOTS` below
        `SMALL_N` stars; never fewer than 32 stars a knot."""
        n = x.shape[0]
        if knots is None:
            knots = SMALL_N_KNOTS if n < SMALL_N else PROFILE_KNOTS
        knots = 2 * max(1, min(knots // 2, n // 32))  # even: r_h is a knot
        centre = centre_of_mass(x, weights)
        return cls(profile_knots(x, weights, knots, centre), weights, centre)

    def now_knots(self, y: Array) -> Array:
        """The Lagrangian radii of `y` at the knots' mass fractions."""
        return profile_knots(y, self.weights, self.knots.shape[0] + 1, self.centre)

    def __call__(self, x, dx, trust):
        y = x + dx
        d = y - self.centre
        r = safe_norm(d)
        knots = self.knots
        now = self.now_knots(y)
        inner = r * (knots[0] / now[0])
        outer = r + (knots[-1] - now[-1])  # not a stretch: that would swing the far halo
        new_r = jnp.where(r < now[0], inner, jnp.where(r > now[-1], outer, jnp.interp(r, now, knots)))
        scale = jnp.where(r > 0, new_r / jnp.where(r > 0, r, 1.0), 1.0)
        return self.centre + d * scale[:, None] - x
