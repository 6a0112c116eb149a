import jax
import jax.numpy as jnp
import pytest

from progenax.validation import ParameterChecks, check_count, check_range


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
