"""Every script in examples/ runs with small arguments."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SMALL_ARGS = {
    "quickstart.py": ["--n", "2000"],
    "infer_plummer.py": ["--n", "200", "--num-warmup", "20", "--num-samples", "20", "--num-chains", "1"],
    "infer_king.py": ["--n", "200", "--num-warmup", "10", "--num-samples", "10", "--num-chains", "1"],
}
# Examples whose smoke run compiles a heavy model (King: a profile solve
# in the likelihood, ~1-3 min on 2 cores): run with `make validate`.
SLOW_EXAMPLES = {"infer_king.py"}
# The mock likelihood (covariance simulations, builder + SPH forward model).
MOCK_ARGS = [
    "--n",
    "200",
    "--num-warmup",
    "5",
    "--num-samples",
    "5",
    "--num-chains",
    "1",
    "--likelihood",
    "mock",
    "--n-model",
    "100",
    "--num-covariance",
    "20",
]


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(p.name, marks=pytest.mark.slow) if p.name in SLOW_EXAMPLES else p.name
        for p in sorted(EXAMPLES.glob("*.py"))
    ],
)
def test_example_runs(script, tmp_path):
    args = SMALL_ARGS.get(script, [])
    if script == "quickstart.py":
        args = args + ["--output", str(tmp_path / "q.png")]
    inference = script.startswith("infer_")
    if inference:
        args = args + ["--output", str(tmp_path / "posterior.png")]
    # numpyro hides its progress bar when it sees CI or an xdist worker in the
    # environment; the example runs as a user's shell would run it.
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    if inference:
        # The posterior as netCDF (beside the figure), the ArviZ summary with r-hat
        # and ESS, the pair plot, and NUTS's progress bar (on stderr).
        import arviz as az

        posterior = az.from_netcdf(str(tmp_path / "posterior.nc")).posterior
        assert {"r_h", "alpha", "Q"} <= set(posterior.data_vars)
        assert posterior.sizes["draw"] == int(args[args.index("--num-samples") + 1])
        assert "r_hat" in result.stdout and "ess_bulk" in result.stdout
        assert (tmp_path / "posterior.png").stat().st_size > 10_000
        assert "sample:" in result.stderr or "warmup" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", ["infer_plummer.py", "infer_king.py"])
def test_inference_example_runs_with_mock_likelihood(script, tmp_path):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *MOCK_ARGS, "--output", str(tmp_path / "m.png")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "m.png").exists()
