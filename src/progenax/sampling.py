r"""Inverse-CDF sampling with fixed-iteration root finders.

No `while_loop`, no rejection: every sample costs the same fixed number of steps,
so the samplers vmap, jit and differentiate.

`solve_increasing(F, target, lo, hi)` finds $x$ with $F(x) = t$ for an increasing
$F$ by a safeguarded Newton iteration (Newton steps that leave the bracket fall back
to the secant of the bracket, which always stays inside it). The gradient with respect to
anything `F` closes over, and to `t`, is the implicit-function-theorem slope

$$\frac{\partial x}{\partial\theta} = -\frac{\partial_\theta F(x,\theta) - \partial_\theta t}{\partial_x F(x,\theta)},$$

given by a `custom_jvp` rule on the converged root (the iteration itself stays
outside autodiff, and the forward pass pays nothing for the gradient).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._fusion import materialize
from ._types import Array


def _value_and_slope(F: Callable[[Array], Array], x: Array) -> tuple[Array, Array]:
    """F(x) and dF/dx elementwise (F acts elementwise on x)."""
    f, df = jax.jvp(F, (x,), (jnp.ones_like(x),))
    return f, df


@jax.custom_jvp
def safe_divide(num: Array, den: Array) -> Array:
    r"""num / den, with 0 where den == 0 (double-where: no NaN in gradients).

    Its derivative is $(\dot n - q\,\dot d)/d$ with $q = n/d$: JAX's quotient
    rule multiplies by $d^{-2}$, which overflows float32 for $|d| < 10^{-19}$
    (the outer rows of a steep model's speed table: the float32 gradient in
    EFF's gamma was NaN from gamma = 5) where the quotient itself is fine.
    """
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


@safe_divide.defjvp
def _safe_divide_jvp(primals, tangents):
    num, den = primals
    d_num, d_den = tangents
    ok = den != 0
    den_safe = jnp.where(ok, den, 1.0)
    q = jnp.where(ok, num / den_safe, 0.0)
    return q, jnp.where(ok, (d_num - q * d_den) / den_safe, 0.0)


def safe_sqrt(r2: Array) -> Array:
    """sqrt(r2) for r2 >= 0, 0 (with a zero gradient, never NaN) where r2 = 0 (double
    where); NaN stays NaN (a NaN position must not read as a star at the centre)."""
    pos = r2 > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, r2, 1.0)), jnp.where(jnp.isnan(r2), r2, 0.0))


def safe_norm(x: Array, axis: int = -1) -> Array:
    """|x| along `axis`, 0 (with a zero gradient, never NaN) where x = 0 (double where)."""
    return safe_sqrt(jnp.sum(x * x, axis=axis))


def solve_increasing(
    F: Callable[[Array], Array],
    target: Array,
    lo: Array,
    hi: Array,
    *,
    num_steps: int = 40,
    F_lo: Array | None = None,
    F_hi: Array | None = None,
    x0: Array | None = None,
    unroll: bool | None = None,
) -> Array:
    r"""Solve $F(x) = t$ for increasing elementwise $F$ on the bracket [lo, hi].

    **Arguments:**

    - `F`: increasing elementwise function; may close over traced parameters.
    - `target`: the values $t$ (any shape broadcast with lo, hi).
    - `lo`, `hi`: bracket with $F(lo) \le t \le F(hi)$.
    - `F_lo`, `F_hi`: F at the bracket ends, when already known (saves two
      evaluations).
    - `x0`: first guess inside the bracket (default: the secant of the bracket).
    - `num_steps`: fixed number of safeguarded-Newton steps (static). Newton
      converges quadratically once inside its basin; the secant fallback at
      least linearly. From a table bracket a few steps reach machine precision
      (see the tests); from a wide bracket use more.
    - `unroll`: unroll the fixed loop (default: when `num_steps` <= 8, so XLA
      fuses it into one pass). Pass False when F holds a loop of its own (a
      series' Horner scan): each unrolled copy of it is compiled again; and
      when F is more than a few operations (a cubic Hermite cell, a
      smoothstep integral): XLA may then fuse each step with the steps before
      it and recompute them, in code and in run time (a 1e6-particle gas
      cloud took 3.3x as long with its placement's solve unrolled). Check the
      run time both ways: Plummer's 3-step speed solve is 10% faster unrolled.

    **Returns:** $x$ with the implicit-function gradient described in the module.
    """
    target = jnp.asarray(target)
    lo, hi, target = jnp.broadcast_arrays(jnp.asarray(lo), jnp.asarray(hi), target)
    t = jax.lax.stop_gradient(target)

    def secant(a, fa, b, fb):
        """Linear interpolation of the bracket: always inside it."""
        w = jnp.clip(safe_divide(t - fa, fb - fa), 0.0, 1.0)
        return a + w * (b - a)

    # The iteration sees F with its traced constants cut from differentiation:
    # its own derivative is discarded (the implicit-function rule supplies it),
    # and a rolled loop would otherwise carry tangents through every step.
    F_closed, consts = jax.closure_convert(F, lo)
    frozen = [jax.lax.stop_gradient(c) for c in consts]

    def F_frozen(x):
        return F_closed(x, *frozen)

    def step(carry, _):
        x, a, fa, b, fb = carry
        f, df = _value_and_slope(F_frozen, x)
        below = f < t
        a, fa = jnp.where(below, x, a), jnp.where(below, f, fa)
        b, fb = jnp.where(below, b, x), jnp.where(below, fb, f)
        newton = x - safe_divide(f - t, df)
        # Closed bracket: a converged x (f == t, newton == x == b) must stay put.
        inside = (newton >= a) & (newton <= b) & (df > 0)
        x = jnp.where(inside, newton, secant(a, fa, b, fb))
        return (x, a, fa, b, fb), None

    a0 = jax.lax.stop_gradient(lo)
    b0 = jax.lax.stop_gradient(hi)
    fa0 = jax.lax.stop_gradient(F(a0) if F_lo is None else F_lo)
    fb0 = jax.lax.stop_gradient(F(b0) if F_hi is None else F_hi)
    guess = secant(a0, fa0, b0, fb0) if x0 is None else jnp.clip(jax.lax.stop_gradient(x0), a0, b0)
    init = (guess, a0, fa0, b0, fb0)
    # A short fixed loop is unrolled so XLA fuses it into one elementwise pass
    # (a rolled scan writes the 5 carried arrays to memory every step).
    (root, *_), _ = jax.lax.scan(
        step, init, None, length=num_steps, unroll=(num_steps <= 8) if unroll is None else unroll
    )
    root = jax.lax.stop_gradient(root)
    return _implicit_root(F_closed, root, target, *consts)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _implicit_root(F_closed, root, target, *consts):
    """The root itself; its tangent is -(dF/dconsts . dconsts - dt) / F_x."""
    return root


@_implicit_root.defjvp
def _implicit_root_jvp(F_closed, primals, tangents):
    root, target, *consts = primals
    _, d_target, *d_consts = tangents
    _, F_x = jax.jvp(lambda x: F_closed(x, *consts), (root,), (jnp.ones_like(root),))
    _, dF = jax.jvp(lambda *c: F_closed(root, *c), tuple(consts), tuple(d_consts))
    d_target = jnp.zeros_like(root) if isinstance(d_target, jax.custom_derivatives.SymbolicZero) else d_target
    return root, safe_divide(d_target - dF, F_x)


def hermite_weights(t: Array, step: Array | float) -> tuple[Array, Array, Array, Array]:
    r"""The cubic Hermite basis at fraction `t` in [0, 1] of a cell of width
    `step` ($h$): the weights of $f_a$, $f'_a$, $f_b$, $f'_b$,

    $$(1 + 2t)(1 - t)^2,\quad t(1 - t)^2\,h,\quad t^2(3 - 2t),\quad t^2(t - 1)\,h.$$

    The one home of the cubic Hermite interpolant (`hermite_cell`)."""
    return (1 + 2 * t) * (1 - t) ** 2, t * (1 - t) ** 2 * step, t**2 * (3 - 2 * t), t**2 * (t - 1) * step


def hermite_cell(t: Array, step: Array | float, fa: Array, fb: Array, da: Array, db: Array) -> Array:
    """The cubic through (0, fa) and (1, fb) with slopes da, db per unit of the
    cell's width `step`, at fraction `t` of the cell (`hermite_weights`)."""
    w_fa, w_da, w_fb, w_db = hermite_weights(t, step)
    return w_fa * fa + w_da * da + w_fb * fb + w_db * db


def tabulated_bracket(grid: Array, values: Array, targets: Array) -> tuple[Array, Array]:
    """Bracket targets between consecutive nodes of an increasing table.

    `values[k] = F(grid[k])` increasing; returns (lo, hi) nodes around each target,
    clipped to the table's ends. The index choice is piecewise constant; gradients
    never flow through it (the root solve supplies them).
    """
    k = jnp.clip(jnp.searchsorted(values, targets, side="right"), 1, grid.shape[0] - 1)
    return grid[k - 1], grid[k]


def inverse_cdf(
    cdf: Callable[[Array], Array],
    u: Array,
    grid: Array,
    *,
    num_steps: int = 8,
) -> Array:
    """Sample $x = F^{-1}(u)$ of an increasing `cdf` using a table to bracket.

    The table `cdf(grid)` gives each target a bracket one grid cell wide, then
    `num_steps` safeguarded-Newton steps polish it to machine precision. Gradients
    with respect to what `cdf` closes over follow the implicit-function theorem.
    """
    table = jax.lax.stop_gradient(cdf(grid))
    lo, hi = tabulated_bracket(grid, table, jax.lax.stop_gradient(u))
    return solve_increasing(cdf, u, lo, hi, num_steps=num_steps)


def quantile_table(cdf_numpy: Callable[[np.ndarray], np.ndarray], lo: float, hi: float, size: int) -> np.ndarray:
    """x_k = F^{-1}(k / size) for k = 0..size, by bisection in NumPy float64.

    For a parameter-free CDF the table is built once (microseconds) and then
    every sample finds its bracket by `floor(u * size)`, with no search.
    """
    targets = np.linspace(0.0, 1.0, size + 1)
    a = np.full_like(targets, lo)
    b = np.full_like(targets, hi)
    for _ in range(64):
        mid = 0.5 * (a + b)
        below = cdf_numpy(mid) < targets
        a = np.where(below, mid, a)
        b = np.where(below, b, mid)
    x = 0.5 * (a + b)
    x[0], x[-1] = lo, hi
    return x


def inverse_cdf_from_quantiles(
    cdf: Callable[[Array], Array],
    u: Array,
    quantiles: np.ndarray,
    *,
    num_steps: int = 3,
    end_guess: Callable[[Array, Array, Array, Array], Array] | None = None,
) -> Array:
    """x = F^{-1}(u) for a fixed CDF with a `quantile_table` to bracket.

    u in [k/K, (k+1)/K] lies between quantiles k and k+1, whose CDF values are
    known exactly, so the bracket costs one multiply and two gathers. Inside a
    cell the first guess is the secant. In the two end cells, where a CDF
    typically behaves as a power law and the secant is far off,
    `end_guess(k, w, lo, hi)` (w in [0, 1] the position of u inside cell k)
    can replace it; it is evaluated only for the u in those cells
    (`where_sparse`: 2/K of uniform draws), so its transcendentals cost the
    other stars nothing.
    """
    size = quantiles.shape[0] - 1
    table = jnp.asarray(quantiles, dtype=u.dtype)
    k = jnp.clip(jnp.floor(u * size).astype(jnp.int32), 0, size - 1)
    f_lo = k.astype(u.dtype) / size
    lo, hi = table[k], table[k + 1]
    w = u * size - k
    x0 = lo + (hi - lo) * w
    if end_guess is not None:
        ends = (k == 0) | (k == size - 1)
        x0 = where_sparse(ends, end_guess, (k, w, lo, hi), x0, expected_fraction=min(1.0, 2.0 / size))
    return solve_increasing(cdf, u, lo, hi, num_steps=num_steps, F_lo=f_lo, F_hi=f_lo + 1.0 / size, x0=x0)


SPARSE_SIGMAS = 10.0
"""`where_sparse` sizes its buffer for the expected count plus this many
Poisson standard deviations (and 16): for the Plummer speeds' 2/1024 of the
stars it overflows with probability below 1e-23 at any n from 1e5 to 1e8
(binomial tail), and even then the answer is exact, by evaluating everywhere."""

SPARSE_MIN_SIZE = 100_000
"""Below this many elements `where_sparse` evaluates everywhere: the sparse
program costs about 0.3 s more to compile (2 cores), more than it saves on
fewer elements (the Plummer speeds' end-cell guess: 5-9 ms per 1e5 stars)."""


def where_sparse(
    mask: Array,
    fn: Callable[..., Array],
    operands: tuple[Array, ...],
    default: Array,
    *,
    expected_fraction: float,
    min_size: int = SPARSE_MIN_SIZE,
) -> Array:
    """`where(mask, fn(*operands), default)`, with the elementwise `fn`
    evaluated only where `mask` holds when that is a small random fraction.

    The True positions (about `expected_fraction` of the elements, a static
    float) are gathered into a fixed buffer of
    $\\mu + 10\\sqrt\\mu + 16$ slots ($\\mu$ the expected count, see
    `SPARSE_SIGMAS`) by a running count, `fn` runs on the buffer and the
    results are scattered back. More True elements than slots (or a mask that
    is not sparse at all) take the dense path instead (`lax.cond`), so the
    result never depends on the buffer's size; either path gives `fn`'s values
    (to the last bit, but for XLA contracting a multiply-add of `fn` into an
    FMA in one program and not in the other).

    Worth it where `fn` is costly (a few transcendentals), rare, and the
    arrays large: below `min_size` elements (`SPARSE_MIN_SIZE`) it is the
    dense `where`. The gather costs about one cumulative sum over the
    elements. All arrays share `mask`'s shape; gradients flow through `fn` at
    the masked elements, as through the dense `where`.
    """
    shape = mask.shape
    size = mask.size
    mu = expected_fraction * size
    slots = int(np.ceil(mu + SPARSE_SIGMAS * np.sqrt(mu) + 16))
    flat_mask = mask.reshape(-1)
    flat_ops = tuple(a.reshape(-1) for a in operands)
    flat_default = default.reshape(-1)

    def dense(_):
        return jnp.where(flat_mask, fn(*flat_ops), flat_default)

    def sparse(_):
        # Each True element's rank among the True ones is its slot; the
        # others (and any rank past the buffer) write nowhere.
        rank = jnp.cumsum(flat_mask, dtype=jnp.int32) - 1
        slot = jnp.where(flat_mask, rank, slots)
        index = jnp.full(slots, size, jnp.int32).at[slot].set(jnp.arange(size, dtype=jnp.int32), mode="drop")
        picked = tuple(a.at[index].get(mode="fill", fill_value=0) for a in flat_ops)
        return flat_default.at[index].set(fn(*picked), mode="drop")

    if size < min_size or 2 * slots > size:
        return dense(None).reshape(shape)
    overflow = jnp.sum(flat_mask, dtype=jnp.int32) > slots
    return jax.lax.cond(overflow, dense, sparse, None).reshape(shape)


@jax.custom_jvp
def ndtri(p: Array) -> Array:
    r"""The standard normal quantile $x = \Phi^{-1}(p)$ (`jax.scipy.special.ndtri`'s
    values), with its derivative in closed form, $dx/dp = \sqrt{2\pi}\,e^{x^2/2}$.

    Differentiating `jax.scipy.special.ndtri` differentiates its piecewise
    rational approximation, branch by branch: about an eighth of a gas
    cloud's gradient program (`gravoturb.pdf`). The one home of the normal
    quantile (IMFs, binary distributions, the gravoturbulent PDF).
    """
    return jax.scipy.special.ndtri(p)


@ndtri.defjvp
def _ndtri_jvp(primals, tangents):
    (p,), (dp,) = primals, tangents
    x = ndtri(p)
    return x, dp * (float(np.sqrt(2.0 * np.pi)) * jnp.exp(0.5 * x * x))


def uniform_open(key: Array, shape: tuple[int, ...], dtype=None) -> Array:
    """Uniform variates in the open interval (0, 1): never exactly 0 or 1.

    Inverse CDFs with infinite support (radii of untruncated profiles) diverge at
    u = 1; shifting by half a unit in the last place keeps them finite.
    """
    dtype = dtype or jnp.result_type(float)
    tiny = jnp.finfo(dtype).eps
    return jax.random.uniform(key, shape, dtype, minval=tiny, maxval=1.0 - tiny)


def _scaled_uniform(unit: Array, lo: float, hi: float) -> Array:
    """U(0, 1) variates moved to U(lo, hi) exactly as `jax.random.uniform` moves
    them: max(lo, u (hi - lo) + lo), in the variates' dtype."""
    lo, hi = jnp.asarray(lo, unit.dtype), jnp.asarray(hi, unit.dtype)
    return jnp.maximum(lo, unit * (hi - lo) + lo)


def isotropic_directions(key: Array, n: int, dtype=None, *, stored: bool = False) -> Array:
    r"""n unit vectors uniform on the sphere: $\cos\theta \sim U(-1,1)$, $\phi \sim U(0,2\pi)$.

    XLA fuses $\cos\phi$ and $\sin\phi$ into every consumer of the directions:
    a builder's positions feed the centre of mass, the radii and the output, so
    the trigonometry runs in each. `stored=True` computes them once and keeps
    them in memory (`progenax._fusion.materialize`): the same bits here
    (tests/test_sampling.py, and every builder's output hashes). It pays where
    the directions are among a build's main costs: a Plummer build of 1e6
    stars (2 cores, float64, best of 9 interleaved calls) took 277 ms against
    316 ms (XLA's defaults) and 280 ms against 299 ms (the builders' run-once
    options). Where they are not, the stores cost more than they save: the
    King builder at 1e5 stars, whose time goes mostly to its serial profile
    solve, took 39.5 ms with them against 30.0 ms (XLA's defaults).
    """
    dtype = dtype or jnp.result_type(float)
    # The two uniforms (one per key split from `key`) in one draw: one counter
    # hash in the program, where two made every builder's program longer.
    # Scaled as `jax.random.uniform(k, shape, dtype, lo, hi)` scales: the same bits.
    unit = jax.vmap(lambda k: jax.random.uniform(k, (n,), dtype))(jax.random.split(key))
    cos_t = _scaled_uniform(unit[0], -1.0, 1.0)
    phi = _scaled_uniform(unit[1], 0.0, 2.0 * jnp.pi)
    sin_t = jnp.sqrt(jnp.clip(1.0 - cos_t**2, 0.0, 1.0))
    cos_phi, sin_phi = jnp.cos(phi), jnp.sin(phi)
    if stored:
        cos_phi, sin_phi = materialize(cos_phi), materialize(sin_phi)
    return jnp.stack([sin_t * cos_phi, sin_t * sin_phi, cos_t], axis=-1)
