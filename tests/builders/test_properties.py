"""Property tests (hypothesis) of the public builders' scalar arguments.

- Rejected values (outside the declared range, its open ends included, NaN,
  +-inf) raise a `ValueError` naming the argument, eagerly, for every builder
  and every scalar argument. The check comes before any tracing, so these
  examples compile nothing and can be many.
- Accepted values give finite positions, velocities and masses, eagerly and
  under `jit`, and rejected ones raise naming the argument under `jit` (through
  `equinox.error_if`): for the Plummer builder (float64 and float32), the
  generic `model_builder` (Dehnen's Eddington sampling) and the fractal
  builder. Each of these compiles once (n = 64: every example reuses the
  compiled function), which is what bounds their example counts; the King,
  LIMEPY and EFF builders compile for tens of seconds and are held to their
  ranges eagerly here (their outputs are tested in their own files).
"""

import math

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import progenax as px  # noqa: E402
from progenax.gravoturb import cloud_builder, star_builder  # noqa: E402
from progenax.models import REGISTRY, Interval  # noqa: E402
from progenax.profiles.eff import untruncated_gamma_floor  # noqa: E402
from progenax.profiles.king import G_MAX, W0_MAX, W0_MIN  # noqa: E402
from progenax.structure.fractal import D_MAX, D_MIN  # noqa: E402

N = 64
COMMON = {
    "r_h": Interval(0.0),
    "alpha": Interval(0.0, 10.0),
    "Q": Interval(0.0, lower_inclusive=True),  # Q = 0: a cold start
    "segregation": Interval(0.0, 1.0, lower_inclusive=True),
    "segregation_temperature": Interval(0.0, 8.0, upper_inclusive=True),
}
W0 = Interval(W0_MIN, W0_MAX, lower_inclusive=True, upper_inclusive=True)
LOWERED = dict(profile_points=64, speed_table_size=8)  # the smallest grids: checks only


def dehnen_builder(key, **kw):
    return px.model_builder(key, "dehnen", **kw)


# builder, static keywords, {argument: support}
BUILDERS = {
    "plummer": (px.plummer_builder, {}, dict(COMMON)),
    # untruncated: gamma above the float64 floor of a representable halo (2.153)
    "eff": (px.eff_builder, {}, {**COMMON, "gamma": Interval(untruncated_gamma_floor(jnp.float64))}),
    "king": (px.king_builder, LOWERED, {**COMMON, "W0": W0}),
    "limepy": (
        px.limepy_builder,
        LOWERED,
        {**COMMON, "W0": W0, "g": Interval(0.0, G_MAX, lower_inclusive=True), "ra": Interval(0.0)},
    ),
    "fractal": (px.fractal_builder, {}, {**COMMON, "D": Interval(D_MIN, D_MAX, True, True)}),
    "dehnen": (dehnen_builder, {}, {**COMMON, **{p.name: p.support for p in REGISTRY["dehnen"].PARAMETERS}}),
    "star": (star_builder, dict(grid=8), {"kappa": Interval(0.0), "mach": Interval(0.0), "Q": Interval(0.0)}),
    "cloud": (cloud_builder, dict(grid=8), {"m_cloud": Interval(0.0), "mach": Interval(0.0)}),
}
CASES = [(builder, arg) for builder, (_, _, args) in BUILDERS.items() for arg in args]


def outside(support: Interval, width: int = 64) -> st.SearchStrategy[float]:
    """Values `support` refuses: non-finite ones, its open ends, and beyond.

    Subnormals are left out: XLA on CPU flushes them to zero, so -5e-324 is
    taken as 0 by the check and by the builder alike (`gamma >= 0` holds).
    `width=32` draws float32 values, so that a value refused in float64 but
    rounded into the support by the cast (Q = -9e-151 becomes -0.0) is not drawn.
    """
    options = [st.sampled_from([math.nan, math.inf, -math.inf])]
    kw = dict(allow_nan=False, allow_subnormal=False, width=width)
    if support.lower is not None:
        options.append(st.floats(max_value=support.lower, exclude_max=support.lower_inclusive, **kw))
    if support.upper is not None:
        options.append(st.floats(min_value=support.upper, exclude_min=support.upper_inclusive, **kw))
    return st.one_of(*options)


def _finite(state) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in (state.positions, state.velocities, state.masses))


@settings(max_examples=6, deadline=None)
@pytest.mark.parametrize("builder, arg", CASES)
@given(data=st.data())
def test_rejected_values_name_the_argument_eagerly(builder, arg, data):
    build, static, args = BUILDERS[builder]
    value = data.draw(outside(args[arg]), label=arg)
    with pytest.raises(ValueError, match=f"{arg} must be"):
        build(0, n=N, **static, **{arg: value})


def test_eager_grad_at_a_rejected_value_names_the_argument():
    # Issue 25 item 10: a ValueError, not a TracerArrayConversionError.
    with pytest.raises(ValueError, match="r_h must be > 0.0 and finite, got -1.0"):
        jax.grad(lambda r: px.plummer_builder(0, n=N, r_h=r).state.positions.sum())(-1.0)
    with pytest.raises(ValueError, match="D must be"):
        jax.jacfwd(lambda d: px.fractal_builder(0, n=N, D=d).state.positions.sum())(jnp.inf)


def test_henon_units_and_a_virial_ratio_need_two_stars():
    with pytest.raises(ValueError, match="n must be >= 2 for units='henon'"):
        px.plummer_builder(0, n=1, units="henon", Q=None)
    # Q was ignored for one star: zero velocities and a summary of Q = nan.
    with pytest.raises(ValueError, match="n must be >= 2 for a virial ratio Q"):
        px.plummer_builder(0, n=1)
    assert px.plummer_builder(0, n=1, Q=None).n == 1


# Accepted ranges sampled here: physically sensible values inside each support.
SENSIBLE = {
    "plummer": {"r_h": (1e-2, 1e2), "alpha": (1.0, 4.0), "Q": (0.05, 2.0)},
    "dehnen": {"gamma": (0.0, 2.5), "r_h": (1e-2, 1e2), "Q": (0.05, 2.0)},
    "fractal": {"D": (D_MIN, D_MAX), "r_h": (1e-2, 1e2), "Q": (0.05, 2.0)},
}
_JITTED: dict = {}


def jitted(builder: str, dtype):
    """`builder` under jit over its SENSIBLE arguments (compiled once, then reused)."""
    if (builder, dtype) not in _JITTED:
        build, static, _ = BUILDERS[builder]
        _JITTED[builder, dtype] = jax.jit(lambda kw: build(0, n=N, **static, **kw).state)
    return _JITTED[builder, dtype]


def _call(builder, dtype, kw):
    kw = {k: jnp.asarray(v, dtype) for k, v in kw.items()}
    return jax.block_until_ready(jitted(builder, dtype)(kw))


@st.composite
def arguments(draw, builder, width: int = 64):
    """All SENSIBLE arguments of `builder`, one of them (maybe) rejected (drawn at `width` bits)."""
    kw = {arg: draw(st.floats(lo, hi), label=arg) for arg, (lo, hi) in SENSIBLE[builder].items()}
    bad = draw(st.sampled_from([None, *SENSIBLE[builder]]))
    if bad is not None:
        kw[bad] = draw(outside(BUILDERS[builder][2][bad], width), label=f"rejected {bad}")
    return kw, bad


@pytest.mark.parametrize("builder", list(SENSIBLE))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_builders_under_jit(builder, data):
    kw, bad = data.draw(arguments(builder))
    if bad is None:
        assert _finite(_call(builder, jnp.float64, kw)), kw
    else:
        with pytest.raises(Exception, match=f"{bad} must be"):
            _call(builder, jnp.float64, kw)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_plummer_accepted_values_give_finite_clusters_eagerly(data):
    kw, bad = data.draw(arguments("plummer"))
    if bad is None:
        assert _finite(px.plummer_builder(0, n=N, **kw).state), kw
    else:
        with pytest.raises(ValueError, match=f"{bad} must be"):
            px.plummer_builder(0, n=N, **kw)


@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_plummer_float32_under_jit(data):
    kw, bad = data.draw(arguments("plummer", width=32))
    with jax.enable_x64(False):
        if bad is None:
            state = _call("plummer", jnp.float32, kw)
            assert state.positions.dtype == jnp.float32 and _finite(state), kw
        else:
            with pytest.raises(Exception, match=f"{bad} must be"):
                _call("plummer", jnp.float32, kw)
