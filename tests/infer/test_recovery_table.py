"""`recovery_table`: the figures the inference examples report against the truth."""

import numpy as np

from progenax.infer.diagnostics import print_recovery, recovery_table


class _FinishedRun:
    """The two methods of numpyro's `MCMC` that `recovery_table` reads."""

    def __init__(self, draws: dict, diverging=None):
        self.draws, self.diverging = draws, diverging

    def get_samples(self, group_by_chain=False):
        if group_by_chain:
            return self.draws
        return {k: v.reshape(-1, *v.shape[2:]) for k, v in self.draws.items()}

    def get_extra_fields(self):
        return {} if self.diverging is None else {"diverging": self.diverging}


def test_figures_of_well_mixed_chains():
    rng = np.random.default_rng(0)
    draws = rng.normal(1.0, 2.0, size=(2, 2000))
    table = recovery_table(_FinishedRun({"x": draws}, np.array([0, 1, 0, 1, 1])), {"x": 0.0})
    row = table["x"]
    assert row["median"] == np.median(draws) and row["sd"] == np.std(draws)
    assert row["z"] == row["median"] / row["sd"]
    # Independent draws: bulk ESS near the 4,000 draws (its Monte Carlo scatter
    # is ~10 %), r-hat within a few 1/sqrt(2000) of 1.
    assert 3000 < row["bulk_ess"] < 5000
    assert abs(row["r_hat"] - 1.0) < 0.01
    assert table["divergences"] == 3


def test_r_hat_flags_chains_that_disagree_and_tiny_runs_give_nan():
    rng = np.random.default_rng(1)
    draws = rng.normal(0.0, 1.0, size=(2, 500))
    draws[1] += 3.0  # the second chain sits 3 sd away
    table = recovery_table(_FinishedRun({"x": draws}), {"x": 0.0})
    assert table["x"]["r_hat"] > 1.5
    assert np.isnan(table["divergences"])
    tiny = recovery_table(_FinishedRun({"x": draws[:1, :3]}), {"x": 0.0})
    assert np.isnan(tiny["x"]["bulk_ess"]) and np.isnan(tiny["x"]["r_hat"])


def test_print_recovery_prints_one_row_per_parameter(capsys):
    rng = np.random.default_rng(2)
    run = _FinishedRun({"a": rng.normal(size=(2, 50)), "b": rng.normal(size=(2, 50))}, np.zeros((2, 50)))
    print_recovery(run, {"a": 0.0, "b": 1.0}, wall=10.0)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["a", "b"]
    assert lines[3].startswith("divergences: 0 of 100")
