r"""King ($g = 1$) profiles tabulated over $W_0$: the fast profile of the King likelihood.

`solve_king_profile` integrates Poisson's equation in a scan of `num_points - 1`
sequential steps. Alone, a jitted gradient of the 300-star King likelihood costs
the same with the scan or with this table (0.18 ms on 2 CPU cores); nested in
numpyro's NUTS loops, XLA's CPU runtime runs the scan and its reverse pass 15
times slower: a leapfrog step took 1.19 ms with the solve and 0.08 ms with the
table. The profile is a smooth function of $W_0$ alone, so it can be solved once
on a grid of $W_0$ and interpolated.

**Table.** Nodes uniform in $u = \ln W_0$ from `TABLE_W0_MIN` = 0.5 to `W0_MAX`
= 20, spacing $\Delta u$ = `TABLE_SPACING` = 0.01 (370 nodes). At each node the
table holds the solved profile's node arrays $W_{\rm raw}(r_i)$ and $M(r_i)$ on the
solver's fixed radial grid, the scalars $r_t$, $r_h$, $r_v$, and the derivative of
each with respect to $u$ (forward mode through the solve). A query is the cubic
Hermite interpolant in $u$ between the two bracketing nodes of every one of these,
so the interpolated profile is $C^1$ in $W_0$ and its gradient is the exact
derivative of the interpolant. The density follows from $W_{\rm raw}$ in closed
form, $\hat M_t$ is the last mass node and $c = \log_{10} r_t$, as in the solve.

**Accuracy** (against the 256-node solve at 300 random $W_0$ in [0.5, 20],
float64): $W_{\rm raw}$ within $10^{-7}$ of its largest node, $r_t$ within
$6\times10^{-7}$ relative, $M$ within $5\times10^{-6}$ of its largest node, $r_h$
within $2\times10^{-6}$ relative; $dr_h/dW_0$ within $1.3\times10^{-4}$. Much of
that is the solve's own: its $r_h$ and $r_t$ move with the bracketing grid node,
so they are not quite smooth in $W_0$, and half the spacing lowers the $r_h$
error only to $1.3\times10^{-6}$. Below $W_0 = 0.5$ the profile changes as a
power of $W_0$ ($r_t \propto W_0^{1/2}$): a table reaching down to $W_0 = 10^{-3}$
missed by $5\times10^{-4}$ and more. Use the solve there.

**Cost.** The table is built on first use for each (`num_points`, dtype): one
`vmap` of the solve and its tangent, about 2 s, kept for the process
(`functools.cache`). Its arrays (3 MB in float64) become constants of the
programs that use them.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import ArrayLike
from ..validation import check_range
from .king import W0_MAX, KingProfile, cubic_hermite, king_density_of_W, solve_king_profile

TABLE_W0_MIN = 0.5
"""Smallest W0 the table covers (use `solve_king_profile` below it)."""
TABLE_SPACING = 0.01
"""Node spacing in ln W0."""


class KingTable(eqx.Module):
    """Solved King profiles at nodes uniform in u = ln W0, with their u-derivatives.

    `fields` maps a `KingProfile` field name to (values, derivatives), each of shape
    (nodes,) for a scalar field or (nodes, num_points) for a node array.
    """

    u: np.ndarray
    r: np.ndarray
    fields: dict[str, tuple[np.ndarray, np.ndarray]]


_FIELDS = ("W_raw", "mass", "r_t", "r_h", "r_v")


@functools.cache
def king_table(num_points: int = 256, dtype: str = "float64") -> KingTable:
    """The table for `num_points` grid nodes in `dtype` (built once per process)."""
    nodes = int(round((np.log(W0_MAX) - np.log(TABLE_W0_MIN)) / TABLE_SPACING)) + 1
    u = np.linspace(np.log(TABLE_W0_MIN), np.log(W0_MAX), nodes).astype(dtype)

    def fields(u_node):
        W0 = jnp.minimum(jnp.exp(u_node), W0_MAX)  # exp(ln 20) may round above 20
        profile = solve_king_profile(W0, 1.0, num_points=num_points)
        return {name: getattr(profile, name) for name in _FIELDS}, profile.r

    def with_tangent(u_node):
        (values, r), (tangents, _) = jax.jvp(fields, (u_node,), (jnp.ones_like(u_node),))
        return values, tangents, r

    # Compiled ahead of time and called on a NumPy array, so that it runs now even
    # when the first call comes from inside a trace (a numpyro model under jit).
    build = jax.jit(jax.vmap(with_tangent)).lower(u).compile()
    values, tangents, r = build(u)
    table = {name: (np.asarray(values[name]), np.asarray(tangents[name])) for name in _FIELDS}
    return KingTable(u=u, r=np.asarray(r)[0], fields=table)


def table_covers(lower: float, upper: float) -> bool:
    """Whether every W0 in [lower, upper] lies in the table's range."""
    return TABLE_W0_MIN <= lower and upper <= W0_MAX


def interpolated_king_profile(W0: ArrayLike, *, num_points: int = 256) -> KingProfile:
    r"""The King ($g = 1$) profile at `W0` from the table (module docstring).

    **Arguments:**

    - `W0`: central potential, `TABLE_W0_MIN` $\le W_0 \le$ `W0_MAX` (differentiable;
      checked, eagerly or through `error_if` under jit).
    - `num_points`: the solver grid the table was built on (static).

    **Returns:** a `KingProfile` with the fields of `solve_king_profile(W0, 1.0,
    num_points=num_points)`, to the accuracy of the module docstring.
    """
    W0 = check_range("W0", W0, lower=TABLE_W0_MIN, upper=W0_MAX, lower_inclusive=True, upper_inclusive=True)
    dtype = jnp.result_type(W0, float)
    table = king_table(num_points, jnp.dtype(dtype).name)
    u = jnp.log(W0.astype(dtype))
    step = table.u[1] - table.u[0]
    i = jnp.clip(jnp.floor((jax.lax.stop_gradient(u) - table.u[0]) / step).astype(jnp.int32), 0, table.u.size - 2)
    u_lo, u_hi = jnp.asarray(table.u)[i], jnp.asarray(table.u)[i + 1]

    def at(name):
        value, slope = (jnp.asarray(a) for a in table.fields[name])
        return cubic_hermite(u, u_lo, u_hi, value[i], value[i + 1], slope[i], slope[i + 1])

    W_raw, mass, r_t = at("W_raw"), at("mass"), at("r_t")
    return KingProfile(
        r=jnp.asarray(table.r),
        W=jnp.maximum(W_raw, 0.0),
        W_raw=W_raw,
        density=king_density_of_W(W_raw, 1.0) / king_density_of_W(W0, 1.0),
        mass=mass,
        total_mass=mass[-1],
        r_t=r_t,
        r_h=at("r_h"),
        r_v=at("r_v"),
        c=jnp.log10(r_t),
        W0=W0,
        g=jnp.asarray(1.0, dtype),
    )


def king_profile(W0: ArrayLike, *, num_points: int = 256, tabulated: bool = False) -> KingProfile:
    """The King profile at `W0`: from the table (`tabulated`) or solved."""
    if tabulated:
        return interpolated_king_profile(W0, num_points=num_points)
    return solve_king_profile(W0, 1.0, num_points=num_points)


__all__ = ["TABLE_W0_MIN", "KingTable", "interpolated_king_profile", "king_profile", "king_table", "table_covers"]
