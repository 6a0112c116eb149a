"""End-to-end command-line times: `progenax build` cold and warm, `progenax info`.

What a user waits for, from typing the command to the prompt: interpreter start,
`import progenax`, compile (or a hit in the persistent compilation cache), build,
the summary line and the file write. Each (model, n) gets a fresh, empty cache
folder (`PROGENAX_COMPILE_CACHE`): the first `build` is cold, the same command
again is warm, then `progenax info` reads the file back: once as written (it
reuses the summary `build` stored in the file) and once from a copy without the
stored summary (what `info` costs on a file another program wrote: the figures,
Q's potential energy above all, measured again).

Reference, side by side in the same run: McLuster (Kuepper et al. 2011), the
code most N-body users build their initial conditions with, with the same
model, N, Kroupa (2001) IMF and Q = 0.5 (`-P 0` Plummer, `-P 1 -W 6` King, `-P -1
-D 1.6` its box fractal, which progenax builds with `--profile box`: McLuster's
fractal remapped onto a Plummer sphere, `-P 0 -D 1.6`, stops with a floating-point
exception in the build this was written with; gravoturbulent stars have no
McLuster counterpart). It is not part of this project: give its executable with
`--mcluster PATH` (or put `mcluster` on PATH); without one its column says so. McLuster's potential energy
is an O(N^2) loop, so it runs only up to `--mcluster-max-n` (default 1e5).

    python benchmarks/cli.py [--sizes 10000 100000 1000000] [--models plummer king fractal gravoturb]
                             [--mcluster /path/to/mcluster]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

PROGENAX = [sys.executable, "-m", "progenax.cli"]
KING_W0 = 6.0
FRACTAL_D = 1.6
PROGENAX_MODEL_FLAGS = {
    "plummer": [],
    "king": ["--W0", str(KING_W0), "--Q", "0.5"],
    "fractal": ["--profile", "box", "--D", str(FRACTAL_D)],
    "gravoturb": [],
}
MCLUSTER_MODEL_FLAGS = {
    "plummer": ["-P", "0"],
    "king": ["-P", "1", "-W", str(KING_W0)],
    "fractal": ["-P", "-1", "-D", str(FRACTAL_D)],
}


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall seconds of one command; a failed command stops the benchmark."""
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return elapsed


def progenax_times(model: str, n: int, workdir: Path) -> tuple[float, float, float, float]:
    """(cold build, warm build, info, info measuring again) seconds, with a cache
    folder of their own."""
    cache = workdir / f"xla-{model}-{n}"
    env = {**os.environ, "PROGENAX_COMPILE_CACHE": str(cache)}
    output = workdir / f"{model}-{n}.h5"
    build = [*PROGENAX, "build", model, "--n", str(n), "--seed", "1", *PROGENAX_MODEL_FLAGS[model], "-o", str(output)]
    cold = timed(build, workdir, env)
    warm = timed(build, workdir, env)
    info = timed([*PROGENAX, "info", str(output)], workdir, env)
    bare = workdir / f"{model}-{n}-bare.h5"
    shutil.copyfile(output, bare)
    with h5py.File(bare, "r+") as f:
        del f["summary"]
    measured = timed([*PROGENAX, "info", str(bare)], workdir, env)
    return cold, warm, info, measured


def mcluster_time(executable: str, model: str, n: int, workdir: Path) -> float:
    """McLuster's wall seconds for the same cluster (its defaults: Kroupa IMF, Q = 0.5)."""
    command = [executable, "-N", str(n), *MCLUSTER_MODEL_FLAGS[model], "-Q", "0.5", "-o", f"mcl-{model}-{n}"]
    return timed(command, workdir, dict(os.environ))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e4, 1e5, 1e6])
    parser.add_argument("--models", nargs="+", default=list(PROGENAX_MODEL_FLAGS), choices=list(PROGENAX_MODEL_FLAGS))
    parser.add_argument("--mcluster", default=shutil.which("mcluster"), help="McLuster executable (reference)")
    parser.add_argument("--mcluster-max-n", type=float, default=1e5)
    args = parser.parse_args()

    print(f"## Command line, end to end ({os.cpu_count()} CPU cores, wall seconds)\n")
    print("| command | n | progenax cold | progenax warm | progenax info | info, measured | McLuster |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="progenax-cli-bench-") as folder:
        workdir = Path(folder)
        for model in args.models:
            for n in (int(size) for size in args.sizes):
                cold, warm, info, measured = progenax_times(model, n, workdir)
                if model not in MCLUSTER_MODEL_FLAGS:
                    reference = "-"
                elif args.mcluster is None:
                    reference = "not given"
                elif n > args.mcluster_max_n:
                    reference = "skipped (O(N^2))"
                else:
                    reference = f"{mcluster_time(args.mcluster, model, n, workdir):.2f}"
                row = f"| build {model} | {n:,} | {cold:.2f} | {warm:.2f} | {info:.2f} | {measured:.2f} | {reference} |"
                print(row, flush=True)
    print(
        "\ncold: a fresh compilation cache; warm: the same command again (cache hits); "
        "info: `progenax info` on the file written (the summary `build` stored); info, measured: on a copy "
        "without it (every figure measured again, as for a file another program wrote). McLuster: the same model, N, "
        f"Kroupa IMF and Q = 0.5 (`-P 0`; King `-P 1 -W {KING_W0:g}`; fractal `-P -1 -D {FRACTAL_D:g}`, "
        "progenax `--profile box`)."
    )


if __name__ == "__main__":
    main()
