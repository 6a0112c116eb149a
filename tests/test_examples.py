"""Every script in examples/ runs with small arguments."""

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
# Examples whose smoke run compiles a heavy model (King: a diffrax profile solve
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
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]


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
