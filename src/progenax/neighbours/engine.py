r"""The pair-sum engine: one slot loop, one reverse pass, for every pair sum.

A pair sum gives every particle $i$

$$S_i = \sum_{j \in C(i)} t^{\to i}(a_i, a_j, x_i - x_j)
      + \sum_{k:\ i \in C(k)} t^{\to j}(a_k, a_i, x_k - x_i),$$

with $C(i)$ the candidates the cell list (or banded lists) gives $i$, $a$ the
per-particle features (positions "x", masses, smoothing lengths...) and a pair
function returning the part that goes to the query ($t^{\to i}$, gathered) and
the part that goes to its candidate ($t^{\to j}$, scattered; None for a pure
gather such as the SPH density). The separation is the minimum image in a
periodic box (`geometry.minimum_image`).

`make_pair_sum(pair_fn, layout, symmetric=...)` returns the function
`(lists, features) -> S (N, K)`, jax-md style: the static state (pair function,
layout) is fixed once. Features are (N,) arrays, "x" (N, d), or scalars shared
by every particle (no gather; their cotangent is a sum over pairs).

**The slot loop** (`fold`): the runs of one particle are laid end to end as a
virtual list; slot $s$ maps to candidate index $j(s) = s + \sum_r [s \ge
c_r]\Delta_r$ (compares, no gather). Particles are split into `groups` equal
groups by candidate count (more for large N: `layout.group_count`) and each
group loops $\lceil \max \mathrm{count} / \mathrm{chunk}\rceil$ times, a
trip count computed in-graph: no capacity to overflow, inside `jit`, `scan`
and `vmap` alike. The gathered parts accumulate per lane and are summed over
the lanes after a group's loop. A loop carries at most two gathered
components, packed as one complex accumulator (`real + 1j * imag`, exact);
more take more loops over the same slots (a 3D gradient's x, y and z: two).
XLA's CPU backend compiles a loop body's pair code into one kernel only when
that code feeds one output: with three, the 3D density gradient's reverse
loop ran as ten kernels per step, storing and reloading the separations, r
and the kernel, 3.3 times the forward loop's time. Sums keep their bits.

**The reverse pass** (custom VJP, the one in the library): the cotangent
$\bar S$ pulls back to the features through one more pass over the same
candidates, differentiating the pair function with autodiff inside the loop,
so the residuals are the features and the lists, O(N), whatever the number
of pairs. Two forms:

- scatter (default): $\partial/\partial a_i$ gathered to the query,
  $\partial/\partial a_j$ scatter-added to the candidate. Exact for any
  candidate lists (banded lists, where $j \in C(i)$ does not imply $i \in C(j)$).
- `symmetric=True`: for one cell list with one reach, where every pair closer
  than the reach is a candidate both ways and the pair function vanishes
  (with its derivatives) beyond the reach. The scattered parts are then
  gathered from the mirrored pair instead:
  $\bar a_i = \sum_{j \in C(i)} [\partial_1 \phi(a_i, a_j) + \partial_2 \phi(a_j, a_i)]$
  with $\phi(a_p, a_q) = \bar S_p \cdot t^{\to i}(a_p, a_q) + \bar S_q \cdot t^{\to j}(a_p, a_q)$,
  and the forward pass gathers $t^{\to j}(a_j, a_i)$ likewise: no scatter at all.

**Analytic pullbacks** (`make_pair_sum(..., pullback=...)`): a pair function
may bring its own per-pair VJP, `pullback(a_i, a_j, dx, g_i, g_j, wanted) ->
(d_i, d_j)`, with $g$ the cotangents $\bar S$ of query and candidate (K-tuples
of arrays, already zero on padded slots: a VJP is linear in them) and
`wanted` the names asked for. The engine then runs the same one reverse slot
loop with the pair's own formulas instead of autodiff inside the loop (the
SPH density's gradient: `sph.pairs.density_pullback`). `d_i` maps
feature names to the query's cotangents ((M, C) arrays or broadcastable;
"x" a list of d arrays; shared scalars summed over every pair), `d_j` the
candidate's (scatter form; None with `symmetric=True`, where `d_i` must hold
$\partial_1\phi(a_i, a_j) + \partial_2\phi(a_j, a_i)$, the mirror included,
and the shared scalars' part from $\phi(a_i, a_j)$ only). A name missing from
either dict contributes nothing. Tests: the density's pullback against the
brute-force gradient (tests/sph/test_density.py), the scatter form's path
with an autodiff-built pullback (tests/neighbours/test_engine.py).

Only the cotangents that are asked for are computed. The reverse pass is plain
array code, so a pair sum can sit inside a `lax.scan` that is itself
differentiated. Forward mode (`jax.jvp`) is not defined.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from .._mesh import vary_like
from .._types import Array
from .cells import CellList
from .geometry import separation, unsort
from .layout import Layout, group_count

PairFunction = Callable[[dict, dict, list], tuple]
"""`pair_fn(a_i, a_j, dx) -> (to_i, to_j)`: features of the queries ((M, 1)
per scalar feature, "x" a list of d arrays (M, 1)), of their candidates
((M, C), d arrays (M, C)),
shared scalars as they are, and the separations x_i - x_j (d arrays (M, C),
minimum image). `to_i`, `to_j`: tuples of K arrays (M, C) (or one (M, C, K)),
`to_j` None for a pure gather. Must be finite for coincident particles."""

PairPullback = Callable[[dict, dict, list, tuple, tuple, frozenset], tuple]
"""`pullback(a_i, a_j, dx, g_i, g_j, wanted) -> (d_i, d_j)`: a pair function's
own VJP (see the module notes). Arguments as for `PairFunction`, plus the
cotangents of the query and the candidate (K-tuples of (M, C) arrays, zero on
padded slots) and the frozenset of feature names whose cotangents are wanted.
Must be finite for coincident particles."""


# -- the slot loop ---------------------------------------------------------------
def fold(cells: CellList, terms, gathered, scattered, summed, *, chunk: int, groups: int, queries=None):
    """Sum `terms(i, j, valid) -> (to_i, to_j, to_all)` over every candidate slot.

    `i` (M, 1) are sorted indices of a group of queries, `j` (M, chunk) their
    candidate indices (padded slots point at the query itself, `valid` False).
    `to_i`: arrays (M, C) summed over C into the query's accumulator; `to_j`:
    arrays (M, C) scatter-added at the candidate's sorted index; `to_all`:
    scalars added to `summed`. Accumulators are tuples of (N,) arrays in
    sorted order (scalars for `summed`). `queries`: the number of particles
    with candidates, if known (a band's members): they come last in workload
    order, so the groups before theirs are skipped.
    """
    n = cells.size
    groups = group_count(n, groups)
    size = -(-n // groups)
    lanes = jnp.arange(chunk, dtype=jnp.int32)[None, :]
    first_group = 0 if queries is None else (n - queries) // size
    # Equal groups, the last padded with copies of particle 0 whose sums are
    # dropped (set at index n, out of range) and which get no slots.
    pad = groups * size - n
    members = jnp.concatenate([cells.by_workload, jnp.zeros(pad, jnp.int32)])
    targets = jnp.concatenate([cells.by_workload, jnp.full(pad, n, jnp.int32)])
    source = cells.source
    # Inside a type-checked `shard_map` the carries vary as the data do.
    gathered, scattered, summed = vary_like((gathered, scattered, summed), cells)

    def one_group(g, acc):
        gathered, scattered, summed = acc
        i = jax.lax.dynamic_slice(members, (g * size,), (size,))
        real = g * size + jnp.arange(size) < n
        # Candidate index = slot + offset inside a run; offsets as jumps at run starts.
        starts, jumps = cells.run_start[:, i, None], cells.run_jump[:, i, None]
        total = jnp.where(real, cells.total[i], 0)
        self_index = cells.self_index[i]
        n_steps = (jnp.max(total) + chunk - 1) // chunk
        rows = i[:, None]

        def candidates(c):
            """Candidate indices (M, C) and validity of loop step c."""
            slot = c * chunk + lanes
            # int32 throughout: with x64 on, jnp.sum would widen the compares
            # to int64 (about 20% of a 3D forward pass).
            j = slot + jnp.sum(jnp.where(slot[None] >= starts, jumps, 0), axis=0, dtype=jnp.int32)
            valid = slot < total[:, None]
            return jnp.where(valid, j, self_index[:, None]), valid

        # The gathered parts accumulate lane by lane, (M, C), and are summed
        # over the lanes once after the loop: a lane sum every step made XLA
        # emit one reduction per component, each recomputing the pair code.
        # And one loop carries at most one gathered accumulator, two
        # components packed as one complex array (`_passes`): XLA's CPU
        # backend fuses the pair code into one kernel only when it feeds one
        # output; with several, it stores the shared values (separations, r,
        # the kernel) to memory and reads them back in one kernel per
        # component. A 3D gradient's x, y and z take two loops.
        probe = jax.eval_shape(terms, rows, jnp.zeros((size, chunk), jnp.int32), jnp.zeros((size, chunk), bool))
        local = []
        for number, members_of_pass in enumerate(_passes(probe[0], gathered)):
            first = number == 0

            def body(state, members_of_pass=members_of_pass, first=first):
                c, acc, scattered, summed = state
                j, valid = candidates(c)
                to_i, to_j, to_all = terms(rows, j, valid)
                if members_of_pass:
                    acc = acc + _packed([to_i[k] for k in members_of_pass])
                if first and to_j:
                    target = (j if source is None else source[j]).reshape(-1)
                    scattered = tuple(a.at[target].add(t.reshape(-1)) for a, t in zip(scattered, to_j))
                if first:
                    summed = tuple(a + t for a, t in zip(summed, to_all))
                return c + 1, acc, scattered, summed

            acc0 = vary_like(_accumulator(probe[0], gathered, members_of_pass), gathered)
            state = (jnp.int32(0), acc0, scattered, summed)
            _, acc, scattered, summed = jax.lax.while_loop(lambda s: s[0] < n_steps, body, state)
            if members_of_pass:
                local.extend(jnp.sum(part, axis=1) for part in _unpacked(acc, len(members_of_pass)))
        local = tuple(local)
        target = jax.lax.dynamic_slice(targets, (g * size,), (size,))
        gathered = tuple(a.at[target].set(v, mode="drop") for a, v in zip(gathered, local))
        return gathered, scattered, summed

    # A loop over groups (not a Python loop) keeps one copy of the pair code.
    return jax.lax.fori_loop(first_group, groups, one_group, (gathered, scattered, summed))


def _passes(parts, gathered) -> list[tuple[int, ...]]:
    """The gathered components by slot loop (`fold`): consecutive pairs of
    one shape and dtype (`parts`: the pair code's outputs) and one
    accumulator dtype (`gathered`) share a loop as one complex accumulator;
    any other component has its own (one of shape (M, 1) is added once a
    step, so it is never broadcast against one of (M, C)). No gathered part:
    one loop, for the scattered and summed parts."""
    passes, k = [], 0
    while k < len(parts):
        pair = (
            k + 1 < len(parts)
            and parts[k].shape == parts[k + 1].shape
            and parts[k].dtype == parts[k + 1].dtype
            and gathered[k].dtype == gathered[k + 1].dtype
            and jnp.issubdtype(gathered[k].dtype, jnp.floating)
        )
        passes.append((k, k + 1) if pair else (k,))
        k += 2 if pair else 1
    return passes or [()]


def _accumulator(parts, gathered, members: tuple[int, ...]) -> Array:
    """The zero lane accumulator of one loop: the component's shape and
    dtype, complex for a pair (a scalar placeholder for none)."""
    if not members:
        return jnp.zeros(())
    dtype = gathered[members[0]].dtype
    if len(members) == 2:
        dtype = jnp.result_type(dtype, jnp.complex64)
    return jnp.zeros(parts[members[0]].shape, dtype)


def _packed(parts: list) -> Array:
    """One component as it is, or two as `real + 1j * imag` (exact: complex
    addition adds the parts apart)."""
    return parts[0] if len(parts) == 1 else jax.lax.complex(parts[0], parts[1])


def _unpacked(accumulator: Array, width: int) -> tuple:
    """The components of a loop's accumulator (`_packed` undone), each to be
    summed over the lanes as a real array (the same order as before)."""
    return (accumulator,) if width == 1 else (accumulator.real, accumulator.imag)


def each_list(lists, add, total):
    """`total = add(cells, queries, total)` for one `CellList` or every non-empty
    band of `Bands` (a loop: one copy of the pair code)."""
    total = vary_like(total, lists)
    if isinstance(lists, CellList):
        return add(lists, None, total)

    def one_band(b, total):
        cells = jax.tree_util.tree_map(lambda leaf: leaf[b], lists.cells)
        return add(cells, lists.members[b], total)

    def maybe(b, total):
        return jax.lax.cond(lists.members[b] > 0, one_band, lambda b, total: total, b, total)

    return jax.lax.fori_loop(0, lists.n_bands, maybe, total)


# -- features ----------------------------------------------------------------------
def _sorted_features(features: dict, cells: CellList):
    """Per-particle features in sorted order and in candidate layout,
    component-major ("x": (d, N)); scalars as they are."""
    own, cand = {}, {}
    for k, v in features.items():
        if v.ndim == 0:
            own[k] = cand[k] = v
            continue
        own[k] = v[cells.order].T if v.ndim == 2 else v[cells.order]
        cand[k] = own[k] if cells.source is None else own[k][..., cells.source]
    return own, cand


def _at(features: dict, index: Array) -> dict:
    """Each feature at `index` (M, C): scalars as they are, the positions as a
    list of d gathers (one (d, M, C) gather costs more on the CPU)."""
    out = {}
    for k, v in features.items():
        if v.ndim == 0:
            out[k] = v
        elif k == "x":
            out[k] = [v[axis][index] for axis in range(v.shape[0])]
        else:
            out[k] = v[index]
    return out


def _components(t) -> tuple:
    if t is None:
        return ()
    if isinstance(t, (tuple, list)):
        return tuple(t)
    return tuple(t[..., k] for k in range(t.shape[-1]))


def _width(pair_fn, features: dict) -> tuple[int, int]:
    """(K, K or 0): the widths of the pair function's gathered and scattered parts."""
    dim = features["x"].shape[1]

    def probe():
        a = {k: (v if v.ndim == 0 else jnp.zeros((1, 1), v.dtype)) for k, v in features.items()}
        a["x"] = [a["x"]] * dim
        dx = [jnp.zeros((1, 1), features["x"].dtype)] * dim
        return pair_fn(a, a, dx)

    to_i, to_j = jax.eval_shape(probe)
    k_i, k_j = len(_components(to_i)), len(_components(to_j))
    if k_i == 0 or k_j not in (0, k_i):
        # A scattered part of another width was broadcast into the gathered
        # columns (one component added into both of two), or widened them.
        raise ValueError(
            f"a pair function returns (to_i, to_j): K >= 1 components to the query and, unless to_j is None, "
            f"the same K to the candidate; got {k_i} and {k_j}"
        )
    return k_i, k_j


# -- the pair sum and its reverse pass -----------------------------------------------
def make_pair_sum(
    pair_fn: PairFunction, layout: Layout, *, symmetric: bool = False, pullback: PairPullback | None = None
):
    """The function `(lists, features) -> S (N, K)` summing `pair_fn` over the
    candidates of `lists` (a `CellList` or `Bands`), with the engine's reverse
    pass (see the module notes). `features` maps names to (N,) arrays, scalars,
    and the positions "x" (N, d). `symmetric`: the gather-only form, for one
    cell list whose reach covers the pair function's support. `pullback`: the
    pair function's own per-pair VJP (None: autodiff of `pair_fn` inside the
    reverse loop)."""
    chunk, groups = int(layout.chunk), int(layout.groups)

    def forward(lists, features):
        k_i, k_j = _width(pair_fn, features)
        n, dtype = features["x"].shape[0], features["x"].dtype

        def add(cells, queries, total):
            own, cand = _sorted_features(features, cells)

            def terms(i, j, valid):
                a_i, a_j = _at(own, i), _at(cand, j)
                dx = separation(a_i["x"], a_j["x"], cells.box)
                to_i, to_j = pair_fn(a_i, a_j, dx)
                to_i = _components(to_i)
                if symmetric and k_j:
                    mirrored = pair_fn(a_j, a_i, [-d for d in dx])[1]
                    to_i = tuple(a + b for a, b in zip(to_i, _components(mirrored)))
                out_i = tuple(jnp.where(valid, t, 0.0) for t in to_i)
                out_j = () if symmetric else tuple(jnp.where(valid, t, 0.0) for t in _components(to_j))
                return out_i, out_j, ()

            zeros = vary_like(tuple(jnp.zeros(n, dtype) for _ in range(k_i)), features)
            scatter0 = () if symmetric else vary_like(tuple(jnp.zeros(n, dtype) for _ in range(k_j)), features)
            gathered, scattered, _ = fold(
                cells, terms, zeros, scatter0, (), chunk=chunk, groups=groups, queries=queries
            )
            result = jnp.stack(gathered, axis=1)
            if scattered:
                result = result + jnp.stack(scattered, axis=1)
            return total + unsort(result, cells.order)

        return each_list(lists, add, vary_like(jnp.zeros((n, k_i), dtype), features))

    def backward(lists, features, wanted, s_bar):
        per = [k for k in wanted if features[k].ndim > 0]
        shared = [k for k in wanted if features[k].ndim == 0]
        dim = features["x"].shape[1]

        def flat(d, keys):
            out = []
            for k in keys:
                out.extend(d[k] if k == "x" else [d[k]])
            return tuple(out)

        def zeros_per():
            n = features["x"].shape[0]
            zeros = tuple(jnp.zeros(n, features[k].dtype) for k in per for _ in range(dim if k == "x" else 1))
            return vary_like(zeros, features, s_bar)

        def add(cells, queries, total):
            own, cand = _sorted_features(features, cells)
            g_own, g_cand = _sorted_features({"g": s_bar}, cells)  # (K, N)
            g_own, g_cand = g_own["g"], g_cand["g"]

            def split(a):
                return {k: a[k] for k in per}, {k: v for k, v in a.items() if k not in per}

            def phi(a_p, a_q, dx, g_p, g_q, valid):
                """The pair's weighted contribution with p the query."""
                to_i, to_j = pair_fn(a_p, a_q, dx)
                total = sum(t * g for t, g in zip(_components(to_i), g_p))
                if to_j is not None:
                    total = total + sum(t * g for t, g in zip(_components(to_j), g_q))
                return jnp.sum(jnp.where(valid, total, 0.0))

            def analytic_terms(i, j, valid):
                a_i, a_j = _at(own, i), _at(cand, j)
                # Zero cotangents on padded slots zero the whole pullback.
                g_i = tuple(jnp.where(valid, g, 0.0) for g in g_own[:, i])
                g_j = tuple(jnp.where(valid, g, 0.0) for g in g_cand[:, j])
                dx = separation(a_i["x"], a_j["x"], cells.box)
                d_i, d_j = pullback(a_i, a_j, dx, g_i, g_j, frozenset(wanted))
                none = jnp.zeros((1, 1), dx[0].dtype)

                def per_particle(d):
                    out = []
                    for k in per:
                        value = d.get(k)
                        if k == "x":
                            out.extend([none] * dim if value is None else value)
                        else:
                            out.append(none if value is None else value)
                    return tuple(out)

                to_all = tuple(jnp.sum(d_i[k]) if k in d_i else jnp.zeros((), dx[0].dtype) for k in shared)
                to_j = () if symmetric else tuple(jnp.broadcast_to(t, j.shape) for t in per_particle(d_j or {}))
                return per_particle(d_i), to_j, to_all

            def terms(i, j, valid):
                a_i, a_j = _at(own, i), _at(cand, j)
                g_i, g_j = g_own[:, i], g_cand[:, j]
                var_i, fixed_i = split(a_i)
                var_j, fixed_j = split(a_j)
                common = {k: a_i[k] for k in shared}

                if symmetric:
                    # The pair and its mirror in one function of the query's
                    # features, with one separation (so that XLA shares r and
                    # the kernel between them); the shared scalars' cotangent
                    # comes from the pair itself only (the mirror is the same
                    # pair seen from j, counted when j is the query).
                    def both(v_i, c):
                        a_p = {**fixed_i, **v_i, **c}
                        a_q = {**fixed_j, **var_j, **c}
                        dx = separation(a_p["x"], a_q["x"], cells.box)
                        mirror_c = jax.lax.stop_gradient(c)
                        a_p2, a_q2 = {**a_p, **mirror_c}, {**a_q, **mirror_c}
                        mirrored = phi(a_q2, a_p2, [-d for d in dx], g_j, g_i, valid)
                        return phi(a_p, a_q, dx, g_i, g_j, valid) + mirrored

                    d_i, d_c = jax.grad(both, argnums=(0, 1))(var_i, common)
                    to_j = ()
                else:

                    def first(v_i, v_j, c):
                        a_p = {**fixed_i, **v_i, **c}
                        a_q = {**fixed_j, **v_j, **c}
                        dx = separation(a_p["x"], a_q["x"], cells.box)
                        return phi(a_p, a_q, dx, g_i, g_j, valid)

                    d_i, d_j, d_c = jax.grad(first, argnums=(0, 1, 2))(var_i, var_j, common)
                    to_j = flat(d_j, per)
                # Gathered entries of d_i are (M, 1): `fold` sums their one lane.
                return flat(d_i, per), to_j, tuple(d_c[k] for k in shared)

            zeros = zeros_per()
            summed0 = vary_like(tuple(jnp.zeros((), features[k].dtype) for k in shared), features, s_bar)
            gathered, scattered, summed = fold(
                cells,
                terms if pullback is None else analytic_terms,
                zeros,
                () if symmetric else zeros,
                summed0,
                chunk=chunk,
                groups=groups,
                queries=queries,
            )
            if scattered:
                gathered = tuple(g + s for g, s in zip(gathered, scattered))
            per_total, shared_total = total
            per_total = tuple(t + unsort(g, cells.order) for t, g in zip(per_total, gathered))
            return per_total, tuple(t + s for t, s in zip(shared_total, summed))

        init_per = zeros_per()
        init_shared = vary_like(tuple(jnp.zeros((), features[k].dtype) for k in shared), features, s_bar)
        per_total, shared_total = each_list(lists, add, (init_per, init_shared))
        out, at = {}, 0
        for k in per:
            if k == "x":
                out[k] = jnp.stack(per_total[at : at + dim], axis=1)
                at += dim
            else:
                out[k] = per_total[at]
                at += 1
        out.update(zip(shared, shared_total))
        return out

    @jax.custom_vjp
    def pair_sum(lists, features):
        return forward(lists, features)

    def pair_sum_fwd(lists, features):
        lists = jax.tree_util.tree_map(lambda p: p.value, lists, is_leaf=_is_primal)
        values = {k: p.value for k, p in features.items()}
        # Which cotangents are wanted, kept as tree structure (() yes, None no).
        want = {k: (() if p.perturbed else None) for k, p in features.items()}
        return forward(lists, values), (lists, values, want)

    def pair_sum_bwd(residuals, s_bar):
        lists, features, want = residuals
        wanted = sorted(k for k, w in want.items() if w is not None)
        lists_bar = jax.tree_util.tree_map(_zero_cotangent, lists)
        if isinstance(s_bar, SymbolicZero) or not wanted:
            grads = {}
        else:
            grads = backward(lists, features, wanted, s_bar)
        return lists_bar, {k: grads.get(k, jnp.zeros_like(v)) for k, v in features.items()}

    pair_sum.defvjp(pair_sum_fwd, pair_sum_bwd, symbolic_zeros=True)

    def checked(lists, features):
        features = dict(features)
        if "x" not in features or jnp.ndim(features["x"]) != 2:
            raise ValueError("features must hold the positions as 'x' with shape (N, d)")
        return pair_sum(lists, features)

    return checked


def _is_primal(x) -> bool:
    return hasattr(x, "perturbed") and hasattr(x, "value")


def _zero_cotangent(leaf):
    if jnp.issubdtype(leaf.dtype, jnp.floating):
        return jnp.zeros_like(leaf)
    return np.zeros(leaf.shape, jax.dtypes.float0)
