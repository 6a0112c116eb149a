"""Every script in examples/ runs with small arguments."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SMALL_ARGS = {
    "quickstart.py": ["--n", "2000"],
    "infer_plummer.py": ["--n", "200", "--num-warmup", "20", "--num-samples", "20", "--num-chains", "1"],
}


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(script, tmp_path):
    args = SMALL_ARGS.get(script, [])
    if script == "quickstart.py":
        args = args + ["--output", str(tmp_path / "q.png")]
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
