r"""Radii and isotropic speeds for any spherical model, from its density and potential.

A model here is anything with `r_h` (pc, 3D half-mass radius), `mass_fraction(r)`,
`density(r)` (Msun pc^-3) and `potential(r)` ((km/s)^2, negative, 0 at infinity).
Every grid is uniform in $x = \ln(r/r_h)$, so it follows the model's own scale, and
a change of `r_h` alone moves nothing relative to the grids.

**Radii.** $r = r_h e^x$ with $M(<r)/M = u$: a table of $M$ on
$x \in [-2.5\,\ell, 1.25\,\ell]$, $\ell = -\ln\epsilon$ ($\epsilon$ the float
epsilon; step 0.5), brackets each $u$ in one cell, then safeguarded Newton in $x$
(`sampling.inverse_cdf`). The range holds every $u \in [\epsilon, 1-\epsilon]$ for
inner slopes $M \propto r^{k}$, $k \ge 0.4$, and outer tails $1 - M \gtrsim r_h/r$;
roots beyond it are clipped to its ends.

**Eddington's formula.** With $\Psi = -\Phi$, $D(x) = d\rho/d\Psi = \rho_x/\Psi_x$ and
$\mathcal E$ the relative energy,

$$f(\mathcal E) = \frac{1}{\sqrt8\,\pi^2}\Big[\int_0^{\mathcal E}\frac{d^2\rho}{d\Psi^2}
\frac{d\Psi}{\sqrt{\mathcal E-\Psi}} + \frac{1}{\sqrt{\mathcal E}}\frac{d\rho}{d\Psi}\Big|_0\Big]
= \frac{1}{\sqrt8\,\pi^2}\Big[\int_0^{\sqrt{X - x_{\mathcal E}}}
\frac{-2s\,D_x(x_{\mathcal E}+s^2)\,ds}{\sqrt{\Psi(x_{\mathcal E})-\Psi(x_{\mathcal E}+s^2)}}
+ \frac{D(X)}{\sqrt{\mathcal E - \Psi(X)}}\Big],$$

$\Psi(x_{\mathcal E}) = \mathcal E$: the integral runs over radii outside $r_{\mathcal E}$,
$x = x_{\mathcal E} + s^2$ removes the inverse square root, and the last term is the
boundary term plus the tail beyond $X = 36$ (to leading order; the rest is
$O((\Psi(X)/\mathcal E)^{n-1})$ for $\rho \propto r^{-n}$ outside). Derivatives in $x$
come from `jax.jvp`; the quadrature in $s$ is 16 panels of 8-point Gauss-Legendre.
Units: Msun pc^-3 (km/s)^-3. Diverging central potentials (Dehnen $\gamma \ge 2$)
need no special case: no integral ever reaches $r = 0$. Measured (tests): the
Plummer $f$ to $6\times10^{-12}$ relative for $\mathcal E/\Psi_0 \in [0.01, 0.99]$
and $10^{-6}$ at $x = -10$ (deep in the core, where the integrand is a narrow bump
at $s^2 \approx -x$: the worst case of the grid; 8 panels give $10^{-3}$ there);
Hernquist's to $10^{-12}$; $\rho = 4\pi\int f v^2 dv$ is recovered to $10^{-9}$
for Dehnen $\gamma = 0 \ldots 2.5$.

**Speeds.** At radius $x$ label a speed by how far out a radial orbit of that speed
would climb, $x + s^2$: $v^2 = 2[\Psi(x) - \Psi(x+s^2)]$ and
$v^2\,dv\,f = \sqrt{2(\Psi(x)-\Psi(x+s^2))}\,(-\Psi_x)\,f(\Psi(x+s^2))\,2s\,ds$.
This follows each model's orbits (a cusp's cold centre and a core's flat potential
alike) and needs $f$ only as a function of $x$, so $\ln f$ is tabulated on
$x \in [-10, 30]$ (step 0.05) and interpolated by cubic Hermite (4th-order slopes),
with no root finding. The speed CDF is tabulated in rows $x_i \in [-10, 8]$ (step 0.1)
and columns $t = s/s_{\max}$ (128 cells, 4-point Gauss-Legendre each; slopes along
rows by 4th-order differences), normalised per row, and sampled as a bicubic Hermite
patch by `kinematics.king_df`'s sampler. $s_{\max}^2 = 22$: a core's innermost row
needs $s^2 \approx 10$ to reach the core radius, and beyond, the weight falls as
$e^{-(n-1/2)s^2}$ ($\rho \propto r^{-n}$), below $10^{-15}$ in the 12 units left.
Measured: the Plummer table's CDF matches the closed form to $7\times10^{-9}$ at
every node. Stars beyond the rows take the end row's $q = v/v_e$ distribution,
which has converged there for cores, $r^{-4}$ tails and cusps with $\gamma > 2$. In
shallower cusps $q$ keeps falling inward (as $r^{1-\gamma/2}$; at $\gamma = 2$ as
$1/\sqrt{\ln(1/r)}$), so the stars inside $e^{-10} r_h$ come out somewhat too fast:
$10^{-8}$ of a Hernquist sphere's mass, $10^{-6}$ at $\gamma = 1.5$, $5\times10^{-5}$
for Jaffe. Everything is a fixed graph, differentiable in the model's parameters.

**Bounded models** (`model.outer_radius`, e.g. a truncated EFF): the integral, the
$\ln f$ table and the speed rows end just inside the edge $x_t$ (traced ends,
the same node counts), each row's climb is $s_{\max}^2 = \min(22, x_t - x)$, and
$q$ is the fraction of the escape speed to the edge. The density's jump at the
edge is left out (no non-negative isotropic DF has it): $f$ is the inversion of
$\rho - \rho(r_t)$, zero for $\mathcal E \le \Psi(r_t)$, with the boundary term
$D(x_t)/\sqrt{\mathcal E - \Psi(r_t)}$ (an integrable singularity; the last
$\ln f$ node sits $10^{-3}$ inside).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, ArrayLike
from ..kinematics.king_df import SpeedTable, sample_speed_fraction
from ..sampling import inverse_cdf, safe_divide, uniform_open
from ._math import hermite

_RADIUS_STEP = 0.5
_RADIUS_NEWTON_STEPS = 8  # from a 0.5-wide cell: measured residual < 1e-13 after 4-6 steps (tests)
_X_TOP = 36.0  # outer end of Eddington's integral, ln(r / r_h)
_QUAD_PANELS = 16
_GL8_NODES, _GL8_WEIGHTS = np.polynomial.legendre.leggauss(8)
_GL4_NODES, _GL4_WEIGHTS = np.polynomial.legendre.leggauss(4)
_DF_GRID = (-10.0, 30.0, 0.05)  # ln f table: first x, last x, step
_ROW_GRID = (-10.0, 8.0, 0.1)  # speed table rows
_S_MAX = float(np.sqrt(22.0))
_NUM_COLUMNS = 128
_EDDINGTON_NORM = float(np.sqrt(8.0) * np.pi**2)  # a Python float: keeps float32 inputs float32


def _dtype(model) -> jnp.dtype:
    return jnp.result_type(model.r_h, float)


def _grid(first: float, last: float, step: float, dtype) -> Array:
    return jnp.asarray(first + step * np.arange(round((last - first) / step) + 1), dtype)


class _Grids(NamedTuple):
    """The grids of one model: Python floats for an unbounded model (the module
    docstring's), traced ends and steps for one with an `outer_radius`."""

    x_top: Any  # outer end of Eddington's integral
    df: tuple[Any, Any]  # ln f table: first x, step (801 nodes)
    rows: tuple[Any, Any, Any]  # speed-table rows: first, last, step (181 rows)
    bounded: bool


_EDGE_GAP = 1e-6  # x_top sits this far inside ln(r_edge / r_h): the density there is the inner one
_DF_EDGE_GAP = 1e-3  # last ln f node inside x_top (f ~ (x_top - x)^(-1/2) there)
_ROW_EDGE_GAP = 1e-2  # last row inside x_top (a row at the edge has no speeds)


def _grids(model, dtype) -> _Grids:
    edge = model.outer_radius
    if edge is None:
        return _Grids(_X_TOP, (_DF_GRID[0], _DF_GRID[2]), _ROW_GRID, False)
    r_h = jnp.asarray(model.r_h, dtype)
    x_top = jnp.minimum(_X_TOP, jnp.log(jnp.asarray(edge, dtype) / r_h) - _EDGE_GAP)
    df_last = jnp.minimum(_DF_GRID[1], x_top - _DF_EDGE_GAP)
    df_count = round((_DF_GRID[1] - _DF_GRID[0]) / _DF_GRID[2])
    row_last = jnp.minimum(_ROW_GRID[1], x_top - _ROW_EDGE_GAP)
    row_count = round((_ROW_GRID[1] - _ROW_GRID[0]) / _ROW_GRID[2])
    df = (_DF_GRID[0], (df_last - _DF_GRID[0]) / df_count)
    rows = (_ROW_GRID[0], row_last, (row_last - _ROW_GRID[0]) / row_count)
    return _Grids(x_top, df, rows, True)


def _nodes(first, step, count: int, dtype) -> Array:
    """`count` nodes from `first` by `step` (numpy's when both are floats: the unbounded grids)."""
    if isinstance(first, float) and isinstance(step, float):
        return _grid(first, first + step * (count - 1), step, dtype)
    return first + step * jnp.arange(count, dtype=dtype)


def _row_climb(g: _Grids, x: Array) -> Array:
    """s_max at row coordinates x: how far (in s^2 = x' - x) a row's speeds climb."""
    if not g.bounded:
        return jnp.full_like(x, _S_MAX)
    return jnp.sqrt(jnp.clip(g.x_top - x, 1e-12, 22.0))


def _psi(model, x: Array) -> tuple[Array, Array]:
    r"""$\Psi(r_h e^x)$ and $d\Psi/dx$, (km/s)^2."""
    r_h = jnp.asarray(model.r_h, x.dtype)
    return jax.jvp(lambda y: -model.potential(r_h * jnp.exp(y)), (x,), (jnp.ones_like(x),))


def _psi_and_drho_dpsi(model, x: Array, density) -> tuple[Array, Array, Array]:
    r"""$\Psi$, $D = d\rho/d\Psi = \rho_x/\Psi_x$ and $D_x = (\rho_{xx} - D\,\Psi_{xx})/\Psi_x$
    at $x$ (D = 0 where $\Psi_x$ underflows).

    Each is divided by $\Psi_x$ once: autodiff of $\rho_x/\Psi_x$ in $x$ divides
    by $\Psi_x^2$, and a parameter derivative of that by $\Psi_x^3$, which
    underflows float32 in the far halo ($\Psi_x \sim 10^{-14}$ (km/s)$^2$ at
    $e^{33} r_h$) and made the DF's gradient NaN. `density(r)` may stack
    several densities on a leading axis: D and $D_x$ then have it too.
    """
    r_h = jnp.asarray(model.r_h, x.dtype)
    ones = jnp.ones_like(x)
    # Where the model's density underflows (float32 beyond ~e^25 r_h) D and D_x
    # are 0, taken at x = 0 (double where): the reverse pass of the DF, whose
    # cotangents there reach 1e17, met the density's infinite partials (0 * inf).
    alive = jax.lax.stop_gradient(model.density(r_h * jnp.exp(x)) > 0)
    x_alive = jnp.where(alive, x, 0.0)

    def rho_and_slope(y):
        return jax.jvp(lambda z: density(r_h * jnp.exp(z)), (y,), (ones,))

    (_, rho_x), (_, rho_xx) = jax.jvp(rho_and_slope, (x_alive,), (ones,))
    (psi, psi_x), (_, psi_xx) = jax.jvp(lambda y: _psi(model, y), (x,), (ones,))
    psi_x, psi_xx = jnp.where(alive, psi_x, -1.0), jnp.where(alive, psi_xx, 0.0)  # finite where dropped
    D = safe_divide(rho_x, psi_x)
    D_x = safe_divide(rho_xx - D * psi_xx, psi_x)
    return psi, jnp.where(alive, D, 0.0), jnp.where(alive, D_x, 0.0)


def _rsqrt_positive(a: Array) -> Array:
    """1 / sqrt(a) where a > 0, else 0 (double where)."""
    pos = a > 0
    return jnp.where(pos, 1.0 / jnp.sqrt(jnp.where(pos, a, 1.0)), 0.0)


def _sqrt_positive(a: Array) -> Array:
    """sqrt(a) where a > 0, else 0 (double where)."""
    pos = a > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, a, 1.0)), 0.0)


def df_at_radius(model, x: ArrayLike, density=None) -> Array:
    r"""Eddington's $f(\mathcal E)$ at $\mathcal E = \Psi(r_h e^x)$ (module docstring).

    **Arguments:** `x` = $\ln(r/r_h) < 36$, any shape; `density`: the density
    $\rho(r)$ to invert in the model's potential (default `model.density`; the
    Osipkov-Merritt inversion passes its augmented densities, stacked on a leading
    axis). **Returns:** $f$ in Msun pc^-3 (km/s)^-3, shape `density`'s leading
    axes + `x.shape`.
    """
    density = model.density if density is None else density
    x = jnp.asarray(x, _dtype(model))
    dtype = x.dtype
    x_top = _grids(model, dtype).x_top
    width = 1.0 / _QUAD_PANELS
    tau = (np.arange(_QUAD_PANELS)[:, None] + 0.5 * (_GL8_NODES + 1.0)) * width
    tau = jnp.asarray(tau.reshape(-1), dtype)
    wts = jnp.asarray(np.tile(0.5 * _GL8_WEIGHTS * width, _QUAD_PANELS), dtype)
    span = jnp.sqrt(jnp.maximum(x_top - x, 1e-6))[..., None]
    s = span * tau
    # One call site for every point (the nodes, the top, x itself): each call of
    # the model's functions, differentiated twice, costs compile time.
    top = jnp.broadcast_to(jnp.asarray(x_top, dtype), x.shape + (1,))
    points = jnp.concatenate([x[..., None] + s**2, top, x[..., None]], axis=-1)
    psi, D, D_x = _psi_and_drho_dpsi(model, points, density)
    psi0 = psi[..., -1:]
    integrand = -2.0 * s * D_x[..., :-2] * _rsqrt_positive(psi0 - psi[..., :-2])
    integral = span[..., 0] * jnp.sum(wts * integrand, axis=-1)
    tail = D[..., -2] * _rsqrt_positive(psi0[..., 0] - psi[..., -2])
    return (integral + tail) / _EDDINGTON_NORM


def _log_radius_solve(F, target: Array, dtype, num_steps: int) -> Array:
    """x on the radius grid with increasing F(x) = target (table bracket + Newton)."""
    span = -float(np.log(np.finfo(dtype).eps))
    grid = _grid(-2.5 * span, 1.25 * span, _RADIUS_STEP, dtype)
    return inverse_cdf(F, target, grid, num_steps=num_steps)


def radii_from_mass_fraction(model, u: ArrayLike, *, num_steps: int = _RADIUS_NEWTON_STEPS) -> Array:
    r"""Radii (pc) with $M(<r)/M = u$, $u \in (0, 1)$ of any shape.

    Solved in $x = \ln(r/r_h)$ on the grid of the module docstring; `num_steps`
    (static) safeguarded-Newton steps polish the one-cell bracket. Differentiable
    in `u` and the model's parameters (implicit-function theorem). Computed in the
    wider of the dtypes of `u` and the model, returned in that of `u`.
    """
    u = jnp.asarray(u, jnp.result_type(u, float))
    dtype = jnp.result_type(u, model.r_h)
    r_h = jnp.asarray(model.r_h, dtype)
    x = _log_radius_solve(lambda y: model.mass_fraction(r_h * jnp.exp(y)), u.astype(dtype), dtype, num_steps)
    return (r_h * jnp.exp(x)).astype(u.dtype)


def eddington_df(model, energies: ArrayLike, *, num_steps: int = _RADIUS_NEWTON_STEPS) -> Array:
    r"""The isotropic DF $f(\mathcal E)$ (Msun pc^-3 (km/s)^-3) at relative energies (km/s)^2.

    Finds $x_{\mathcal E}$ with $\Psi(r_h e^{x_{\mathcal E}}) = \mathcal E$ (the radius
    grid, then Newton), then `df_at_radius`. Accurate (module docstring) for
    $x_{\mathcal E} \in [-10, 30]$; roots beyond the radius grid are clipped to it.
    Differentiable in the energies and the model's parameters.
    """
    E = jnp.asarray(energies, _dtype(model))
    x = _log_radius_solve(lambda y: -_psi(model, y)[0], -E, E.dtype, num_steps)
    g = _grids(model, E.dtype)
    return df_at_radius(model, x if g.bounded else jnp.minimum(x, _X_TOP - 1.0))


def _slopes(values: Array, step: float) -> Array:
    """d values / d(axis 0): 4th-order centred inside, 2nd-order at the two edge nodes."""
    v = values
    d = jnp.concatenate(
        [
            (-3.0 * v[:1] + 4.0 * v[1:2] - v[2:3]),
            v[2:3] - v[0:1],
            (v[:-4] - 8.0 * v[1:-3] + 8.0 * v[3:-1] - v[4:]) / 6.0,
            v[-1:] - v[-3:-2],
            (3.0 * v[-1:] - 4.0 * v[-2:-1] + v[-3:-2]),
        ]
    )
    return d / (2.0 * step)


def df_nodes(model, dtype) -> Array:
    """The x nodes of the ln f table (801 on [-10, 30], or to just inside the edge)."""
    first, step = _grids(model, dtype).df
    return _nodes(first, step, round((_DF_GRID[1] - _DF_GRID[0]) / _DF_GRID[2]) + 1, dtype)


def eddington_speed_table(model, *, df=None, num_columns: int = _NUM_COLUMNS) -> SpeedTable:
    r"""The model's tabulated speed CDF $C(x_i, t)$ (module docstring), as a `SpeedTable`.

    Rows $x_i$ (`_ROW_GRID`) in place of King's $W$; columns $t = s/s_{\max} \in [0, 1]$.
    `df(x)`: the DF at the table's nodes $x$ (`df_nodes`) in place of the model's
    isotropic one, e.g. the Osipkov-Merritt $f(Q)$
    (`progenax.models.osipkov_merritt`), whose pseudo-speed $w$ has the density
    $\propto w^2 f(\Psi - w^2/2)$ of a speed in the isotropic case.
    """
    dtype = _dtype(model)
    g = _grids(model, dtype)
    x_f = df_nodes(model, dtype)
    f = df_at_radius(model, x_f) if df is None else df(x_f)
    tiny = jnp.finfo(dtype).tiny
    log_f = jnp.where(f > tiny, jnp.log(jnp.where(f > tiny, f, 1.0)), jnp.log(tiny))
    log_f_slopes = _slopes(log_f, g.df[1])
    first, _, step = g.rows
    x_rows = _nodes(first, step, round((_ROW_GRID[1] - _ROW_GRID[0]) / _ROW_GRID[2]) + 1, dtype)[:, None]
    h = 1.0 / num_columns
    t_nodes = np.linspace(0.0, 1.0, num_columns + 1)
    t_gl = (t_nodes[:-1, None] + h * 0.5 * (_GL4_NODES + 1.0)).reshape(-1)
    s_max = _row_climb(g, x_rows)
    s = s_max * jnp.asarray(np.concatenate([t_gl, t_nodes]), dtype)
    psi, psi_x = _psi(model, jnp.concatenate([x_rows, x_rows + s**2], axis=1))
    psi_row, psi_s, psi_x = psi[:, :1], psi[:, 1:], psi_x[:, 1:]
    f_s = jnp.exp(hermite(log_f, log_f_slopes, g.df[0], g.df[1], x_rows + s**2))
    dens = _sqrt_positive(2.0 * (psi_row - psi_s)) * (-psi_x) * f_s * (2.0 * s_max) * s
    n_gl = t_gl.shape[0]
    cells = dens[:, :n_gl].reshape(-1, num_columns, 4) @ jnp.asarray(0.5 * h * _GL4_WEIGHTS, dtype)
    total = jnp.sum(cells, axis=1, keepdims=True)
    zero = jnp.zeros_like(total)
    # safe_divide: a row whose weights all underflow (float32, extreme units) stays NaN-free.
    cdf = jnp.concatenate([zero, safe_divide(jnp.cumsum(cells, axis=1), total)], axis=1).at[:, -1].set(1.0)
    pdf = safe_divide(dens[:, n_gl:], total)
    return SpeedTable(
        W_step=jnp.asarray(step, dtype), cdf=cdf, pdf=pdf, cdf_W=_slopes(cdf, step), pdf_W=_slopes(pdf, step)
    )


def sample_eddington_speeds(model, key: Array, radii: Array, *, table: SpeedTable | None = None) -> Array:
    r"""Speeds (km/s) at `radii` (pc) drawn from $p(v|r) \propto v^2 f(\Psi(r) - v^2/2)$.

    One uniform per star (`key`), inverted through the bicubic CDF `table`
    (default: `eddington_speed_table(model)`); the column $t$ gives
    $q^2 = 1 - \Psi(x_c + s^2)/\Psi(x_c)$ at the star's row coordinate $x_c$
    (its own $x$, clamped to the rows) and $v = q\sqrt{2\Psi(r)}$. Shapes follow
    `radii`; differentiable in the radii and the model's parameters.
    """
    table = eddington_speed_table(model) if table is None else table
    radii_in = jnp.asarray(radii)
    # Work in the wider of the radii's and the table's dtypes; return the radii's.
    dtype = jnp.result_type(radii_in, table.cdf)
    u = uniform_open(key, radii_in.shape, radii_in.dtype).astype(dtype)
    radii = radii_in.astype(dtype)
    r_h = jnp.asarray(model.r_h, dtype)
    g = _grids(model, dtype)
    first, last, _ = g.rows
    pos = radii > 0
    x = jnp.where(pos, jnp.log(jnp.where(pos, radii, r_h) / r_h), first)
    x_c = jnp.clip(x, first, last)
    t = sample_speed_fraction(table, x_c - first, u)
    row_radii = r_h * jnp.exp(jnp.stack([x_c, x_c + (_row_climb(g, x_c) * t) ** 2]))
    if not g.bounded:
        psi = -model.potential(jnp.concatenate([row_radii, radii[None]]))  # one call site
        q2 = jnp.clip(safe_divide(psi[0] - psi[1], psi[0]), 0.0, 1.0)
        return (_sqrt_positive(q2) * _sqrt_positive(2.0 * psi[2])).astype(radii_in.dtype)
    # Bounded: q is the fraction of the escape speed to the edge, v^2 <= 2 (Psi(r) - Psi(edge)).
    top = jnp.broadcast_to(r_h * jnp.exp(g.x_top), radii.shape)[None]
    psi = -model.potential(jnp.concatenate([row_radii, radii[None], top]))
    psi_top = psi[3]
    q2 = jnp.clip(safe_divide(psi[0] - psi[1], psi[0] - psi_top), 0.0, 1.0)
    return (_sqrt_positive(q2) * _sqrt_positive(2.0 * (psi[2] - psi_top))).astype(radii_in.dtype)
