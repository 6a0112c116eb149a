import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import progenax
from progenax.validation import ParameterChecks, _range_violation, check_count, check_finite, check_range


def test_check_range_eager_names_argument():
    with pytest.raises(ValueError, match="r_h must be > 0"):
        check_range("r_h", -1.0, lower=0.0)
    with pytest.raises(ValueError, match="Q"):
        check_range("Q", float("nan"), lower=0.0)
    assert float(check_range("x", 0.0, lower=0.0, lower_inclusive=True)) == 0.0


def test_check_range_closed_over_constant_under_jit():
    # Regression: a concrete array closed over by a jitted function.
    value = jnp.asarray(1.0)
    assert float(jax.jit(lambda: check_range("r_h", value, lower=0.0) * 2)()) == 2.0


def test_parameter_checks_tie_errors_to_all_outputs():
    def build(q):
        checks = ParameterChecks()
        q = checks.range("Q", q, lower=0.0)
        return checks.attach({"unrelated": jnp.ones(3), "uses_q": q})

    out = jax.jit(build)(0.5)
    assert float(out["uses_q"]) == 0.5
    with pytest.raises(Exception, match="Q must be > 0"):
        jax.block_until_ready(jax.jit(lambda q: build(q)["unrelated"])(-1.0))


def test_condition_eager():
    checks = ParameterChecks()
    with pytest.raises(ValueError, match="relation"):
        checks.condition(jnp.asarray(True), "relation broken")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_check_count(bad):
    with pytest.raises(ValueError, match="n"):
        check_count("n", bad)


# --------------------------------------------------------- non-finite values (issue 25)

NON_FINITE = [float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("bad", NON_FINITE)
@pytest.mark.parametrize("bounds", [{"lower": 0.0}, {"lower": 0.0, "upper": 10.0}, {}])
def test_check_range_refuses_non_finite_eagerly(bad, bounds):
    with pytest.raises(ValueError, match="r_h must be .*finite"):
        check_range("r_h", bad, **bounds)


@pytest.mark.parametrize("bad", NON_FINITE)
def test_check_range_refuses_non_finite_under_jit(bad):
    f = jax.jit(lambda x: check_range("r_h", x, lower=0.0))
    assert float(f(2.0)) == 2.0
    with pytest.raises(Exception, match="r_h must be > 0.0 and finite"):
        jax.block_until_ready(f(bad))


@pytest.mark.parametrize("transform", [jax.grad, jax.jacfwd, jax.jacrev])
def test_eager_derivative_at_a_bad_value_names_the_argument(transform):
    # Under eager grad the value is a tracer whose comparison is concrete: a
    # ValueError naming r_h and its value, not a TracerArrayConversionError.
    with pytest.raises(ValueError, match=r"r_h must be > 0.0 and finite, got -1.0"):
        transform(lambda x: check_range("r_h", x, lower=0.0) ** 2)(-1.0)
    checks = ParameterChecks()
    with pytest.raises(ValueError, match=r"Q must be > 0.0 and finite, got inf"):
        transform(lambda x: checks.range("Q", x, lower=0.0) ** 2)(jnp.inf)
    assert float(transform(lambda x: check_range("r_h", x, lower=0.0) ** 2)(3.0)) == 6.0


def test_a_traced_check_survives_jit_grad():
    # The output depends on x only through a comparison (pathwise gradient 0):
    # jit(grad) keeps no forward value, so a plain traced check would be dead code.
    def build(x):
        checks = ParameterChecks()
        x = checks.range("D", x, lower=1.6, upper=3.0, lower_inclusive=True, upper_inclusive=True)
        positions = jnp.where(jax.random.uniform(jax.random.PRNGKey(0), (8,)) < x / 3.0, 1.0, 2.0)
        return checks.attach({"positions": positions, "count": jnp.arange(8)})

    observable = jax.jit(jax.grad(lambda x: jnp.sum(build(x)["positions"] ** 2)))
    assert float(observable(2.0)) == 0.0
    for bad in (1.5, 3.1, float("nan")):
        with pytest.raises(Exception, match="D must be >= 1.6 and <= 3.0 and finite"):
            jax.block_until_ready(observable(bad))
    out = jax.jit(build)(2.0)  # the forward values are unchanged, integer leaves untouched
    assert out["count"].dtype == jnp.arange(8).dtype
    np.testing.assert_array_equal(out["positions"], build(2.0)["positions"])


def test_note_and_count_messages():
    with pytest.raises(ValueError, match="ra must be > 0.0 and finite, got inf; pass ra=None"):
        check_range("ra", float("inf"), lower=0.0, note="; pass ra=None")
    with pytest.raises(ValueError, match="n must be >= 2 for henon, got 1"):
        check_count("n", 1, 2, "for henon")


def test_check_finite_names_the_array_and_row():
    check_finite("positions", jnp.ones((4, 3)))
    x = np.ones((5, 3))
    x[3, 1] = np.inf
    with pytest.raises(ValueError, match=r"positions must be finite: 1 of 5 row\(s\).*row 3"):
        check_finite("positions", x)
    with pytest.raises(ValueError, match="length must be finite, got nan"):
        check_finite("length", np.float64("nan"))


# Property: check_range accepts exactly the finite values inside the bounds,
# eagerly and under jit (one compile per bound set, reused by every example).
BOUNDS = [
    {"lower": 0.0},
    {"lower": 0.0, "upper": 1.0, "lower_inclusive": True},
    {"lower": 1e-3, "upper": 20.0, "lower_inclusive": True, "upper_inclusive": True},
]
_JITTED = [jax.jit(lambda x, b=b: check_range("p", x, **b)) for b in BOUNDS]


def _inside(x, lower=None, upper=None, lower_inclusive=False, upper_inclusive=False):
    if not math.isfinite(x):
        return False
    above = lower is None or (x >= lower if lower_inclusive else x > lower)
    below = upper is None or (x <= upper if upper_inclusive else x < upper)
    return above and below


# Subnormals are left out: XLA on CPU flushes them to zero, so 1e-310 > 0 is
# False in the check, and the check (XLA) and `_inside` (Python) would differ.
@settings(max_examples=60, deadline=None)
@given(
    x=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False, width=64),
    which=st.sampled_from(range(len(BOUNDS))),
)
def test_check_range_property(x, which):
    bounds = BOUNDS[which]
    if _inside(x, **bounds):
        assert float(check_range("p", x, **bounds)) == x
        assert float(_JITTED[which](x)) == x
    else:
        with pytest.raises(ValueError, match="p must be"):
            check_range("p", x, **bounds)
        with pytest.raises(Exception, match="p must be"):
            jax.block_until_ready(_JITTED[which](x))


@pytest.mark.parametrize("transform", [jax.grad, jax.jacfwd, jax.hessian])
def test_range_test_of_a_differentiated_value_runs_in_numpy(transform):
    # An eager derivative's tracer has a concrete primal: the test is NumPy's
    # (each eager jnp operation would compile a one-op program), and under a
    # vmap, where the value has no concrete primal, it stays jax.numpy's.
    kinds = []

    def f(x):
        kinds.append(type(_range_violation("r_h", x, lower=0.0)[0]))
        return x**2

    transform(f)(3.0)
    assert kinds == [np.bool_]
    kinds.clear()
    jax.vmap(transform(f))(jnp.array([1.0, 2.0]))
    assert len(kinds) == 1 and issubclass(kinds[0], jax.core.Tracer)


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda v: progenax.king_builder(0, n=10, W0=v), "W0"),
        (lambda v: progenax.model_builder(0, "dehnen", n=10, gamma=v), "gamma"),
        (lambda v: progenax.plummer_builder(0, n=10, ra=v), "ra"),
        (lambda v: progenax.eff_builder(0, n=10, r_t=10 * v), "r_t"),
        (lambda v: progenax.limepy_builder(0, n=10, g=v), "g"),
        (lambda v: progenax.plummer_builder(0, n=10, segregation=0.1 * v), "segregation"),
        (
            lambda v: progenax.plummer_builder(0, n=10, segregation=0.1, segregation_temperature=v),
            "segregation_temperature",
        ),
        (lambda v: progenax.king_builder(0, n=10, mass_bins=4, delta=v), "delta"),
        (lambda v: progenax.solve_king_profile(5 * v), "W0"),
    ],
)
def test_every_scalar_parameter_refuses_an_array(build, name):
    # Model parameters, S and delta failed deep inside JAX ("Cannot concatenate
    # arrays", "Pred must be a scalar") where r_h, Q and D said "must be a scalar".
    with pytest.raises(ValueError, match=f"^{name} must be a scalar, got an array of shape \\(2,\\)"):
        build(jnp.array([1.0, 1.5]))


def test_a_check_on_a_parameter_no_kept_output_depends_on_fires_under_jit_grad():
    # Positions do not depend on Q: jit(grad) of a loss of positions kept no
    # forward value and returned 0 at Q = -1.
    gradient = jax.jit(jax.grad(lambda q: jnp.sum(progenax.plummer_builder(0, n=50, Q=q).state.positions ** 2)))
    assert float(gradient(0.5)) == 0.0
    with pytest.raises(Exception, match="Q must be >= 0.0"):
        jax.block_until_ready(gradient(-1.0))


def _small_cluster():
    x = jnp.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    return x, 0.1 * x[::-1], jnp.ones(4)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: progenax.diagnostics.scale_to_virial_ratio(*_small_cluster(), -1.0), "Q must be >= 0.0"),
        (lambda: progenax.diagnostics.scale_to_virial_ratio(*_small_cluster(), math.nan), "Q must be >= 0.0"),
        (lambda: progenax.diagnostics.lagrangian_radii(*_small_cluster()[::2], (0.5, 1.5)), "fractions must be"),
        (lambda: progenax.solve_kepler(1.0, 1.5), "e must be >= 0.0 and < 1.0"),
        (lambda: progenax.jacobi_radius_flat_rotation(1e4, 220.0, 8000.0, G=-1.0), "G must be > 0.0"),
        (lambda: progenax.henon_units(0.0, 1.0), "the henon unit mass_msun must be > 0"),
        (lambda: progenax.henon_units(1.0, math.nan), "the henon unit length_pc must be > 0"),
        (lambda: progenax.Units("nbody", 1.0, 1.0, 1.0), "units name must be one of"),
    ],
)
def test_public_helpers_check_their_arguments(call, message):
    # They returned zero velocities, clipped fractions, E for e = 1.5, NaN radii
    # or units that turn every value NaN, where the builders refuse the same values.
    with pytest.raises(ValueError, match=message):
        call()


def test_checked_helpers_keep_float32():
    # A Python-number argument checked must not widen float32 arrays under x64.
    with jax.enable_x64(True):
        x = jnp.arange(12.0, dtype=jnp.float32).reshape(4, 3)
        m = jnp.ones(4, jnp.float32)
        assert progenax.diagnostics.scale_to_virial_ratio(x, x[::-1], m, 0.5).dtype == jnp.float32
        assert progenax.diagnostics.lagrangian_radii(x, m, (0.5,)).dtype == jnp.float32
        assert progenax.solve_kepler(jnp.float32(1.0), 0.5).dtype == jnp.float32
