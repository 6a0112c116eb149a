"""Benchmarks page material, captured from the benchmark scripts' own output.

Runs benchmarks/builders.py (what `make bench` runs), benchmarks/sph.py and
benchmarks/foundation_figures.py as subprocesses, keeps their printed output
verbatim, and turns every fixed-width table in it (a header line followed by
rows of numbers, right-aligned as the scripts print them) into a markdown table;
a table whose first column is `n` and that has time columns (`[s]`) also becomes
a log-log figure of time against n, and the rows sph.py prints become a figure
of time and peak memory against N. Nothing is typed by hand.

Writes, per script, docs/generated/benchmarks_<script>.md (included by
docs/benchmarks.md), docs/generated/benchmarks_<script>.txt (the raw output) and
docs/figures/benchmarks/<script>_*.png.

    python docs/scripts/benchmarks_page.py [--repeats 5] [--sizes 10000 100000 1000000]
        [--king-sizes 100000 1000000] [--fractal-sizes 100000] [--sph-sizes 1e4 1e5]
        [--only builders.py sph.py foundation_figures.py]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GENERATED = DOCS / "generated"
FIGURES = DOCS / "figures" / "benchmarks"

NUMBER = re.compile(r"^[+-]?(\d[\d,]*\.?\d*|\.\d+)([eE][+-]?\d+)?%?$")


def is_number(token: str) -> bool:
    return bool(NUMBER.match(token))


def numeric_row(line: str) -> list[tuple[int, str]] | None:
    """(end column, token) of each token when every token is a number."""
    tokens = [(m.end(), m.group()) for m in re.finditer(r"\S+", line)]
    if tokens and all(is_number(t) for _, t in tokens):
        return tokens
    return None


def parse(output: str) -> list[tuple[str, object]]:
    """Split output into ("text", line) and ("table", (columns, rows, note)) blocks.

    A table is a header line followed by numeric rows with the same token count;
    the header is cut at the rows' right edges (the scripts right-align columns),
    and header text beyond the last column is kept as a note."""
    lines = output.rstrip("\n").splitlines()
    blocks: list[tuple[str, object]] = []
    i = 0
    while i < len(lines):
        first = numeric_row(lines[i + 1]) if i + 1 < len(lines) else None
        if first and numeric_row(lines[i]) is None and lines[i].strip():
            ends = [end for end, _ in first]
            rows = []
            j = i + 1
            while j < len(lines):
                row = numeric_row(lines[j])
                if row is None or len(row) != len(ends):
                    break
                rows.append([t for _, t in row])
                j += 1
            header = lines[i]
            starts = [0] + ends[:-1]
            columns = [header[s:e].strip() for s, e in zip(starts, ends)]
            note = header[ends[-1] :].strip()
            blocks.append(("table", (columns, rows, note)))
            i = j
        else:
            blocks.append(("text", lines[i]))
            i += 1
    return blocks


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = [
        "| " + " | ".join(c.replace("|", "\\|") for c in columns) + " |",
        "| " + " | ".join("---:" for _ in columns) + " |",
    ]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def figure(columns: list[str], rows: list[list[str]], title: str, path: Path) -> bool:
    """Time columns against n, log-log; False when the table has no such shape."""
    if columns[0] != "n" or len(rows) < 2:
        return False
    times = [k for k, c in enumerate(columns) if "[s]" in c]
    if not times:
        return False
    n = [float(r[0].replace(",", "")) for r in rows]
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for k in times:
        ax.plot(n, [float(r[k]) for r in rows], "o-", label=columns[k])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (stars)")
    ax.set_ylabel("seconds")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return True


SPH_ROW = re.compile(
    r"^\s*(?P<dim>\d)\s+(?P<n>\d+)\s+(?P<backend>\S+)\s+(?P<compile>\S+ s|-)\s+(?P<allocate>\S+ s|-)\s+"
    r"(?P<forward>\S+) s\s+(?P<gradient>\S+) s\s+(?P<peak>\S+) GB\s"
)


def sph_figure(output: str, stem: str) -> list[str]:
    """Forward and gradient time and peak memory against N, per backend and
    dimension, from the rows benchmarks/sph.py prints."""
    rows = [m.groupdict() for m in map(SPH_ROW.match, output.splitlines()) if m]
    if not rows:
        return []
    fig = Figure(figsize=(11.0, 4.0), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    series = sorted({(r["backend"], r["dim"]) for r in rows})
    for c, (backend, dim) in enumerate(series):
        sel = sorted((int(r["n"]), r) for r in rows if r["backend"] == backend and r["dim"] == dim)
        n = [k for k, _ in sel]
        colour = f"C{c}"
        ax_t.plot(n, [float(r["forward"]) for _, r in sel], "o--", color=colour, label=f"{backend} {dim}D forward")
        ax_t.plot(n, [float(r["gradient"]) for _, r in sel], "s-", color=colour, label=f"{backend} {dim}D gradient")
        ax_m.plot(n, [float(r["peak"]) for _, r in sel], "o-", color=colour, label=f"{backend} {dim}D")
    for ax, label in ((ax_t, "seconds (after compile)"), (ax_m, "peak RSS [GB]")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (particles)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right" if ax is ax_t else "best")
    ax_t.set_title("density loss: forward and gradient", fontsize=10)
    ax_m.set_title("peak memory of the gradient run", fontsize=10)
    path = FIGURES / f"{stem}_times.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return [f"![{stem}: time and memory against N](figures/benchmarks/{path.name})", ""]


def run(script: str, args: list[str]) -> tuple[str, float]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"{script} failed with exit code {proc.returncode}")
    return proc.stdout, time.perf_counter() - t0


def section(script: str, args: list[str], title: str, intro: str, extra=None) -> list[str]:
    output, seconds = run(script, args)
    stem = Path(script).stem
    (GENERATED / f"benchmarks_{stem}.txt").write_text(output)
    print(f"{script}: {seconds:.0f} s")
    command = " ".join(["python", f"benchmarks/{script}", *args])
    md = [f"## {title}", "", intro, "", f"Output of `{command}`:", ""]
    k = 0
    text: list[str] = []

    def flush() -> None:
        while text and not text[-1].strip():
            text.pop()
        if any(line.strip() for line in text):
            md.extend(["```text", *text, "```", ""])
        text.clear()

    for kind, block in parse(output):
        if kind == "text":
            if text or block.strip():
                text.append(block)
            continue
        flush()
        columns, rows, note = block
        md.extend(markdown_table(columns, rows))
        md.append("")
        if note:
            md.extend([f"({note})", ""])
        png = FIGURES / f"{stem}_{k}.png"
        if figure(columns, rows, f"benchmarks/{script}", png):
            md.extend([f"![{stem} table {k}](figures/benchmarks/{png.name})", ""])
        k += 1
    flush()
    if extra is not None:
        md.extend(extra(output, stem))
    return md


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", nargs="+", default=["10000", "100000", "1000000"])
    parser.add_argument("--king-sizes", nargs="+", default=["100000", "1000000"])
    parser.add_argument(
        "--fractal-sizes",
        nargs="+",
        default=["100000"],
        help="n for the fractal rows of benchmarks/builders.py (its own default adds 1e6: minutes per call)",
    )
    parser.add_argument(
        "--sph-sizes",
        nargs="+",
        default=["1e4", "1e5"],
        help="N for benchmarks/sph.py (its own default adds 1e6: much longer)",
    )
    parser.add_argument("--only", nargs="+", metavar="SCRIPT", help="regenerate only these scripts' sections")
    args = parser.parse_args()

    sections = {
        "builders.py": lambda: section(
            "builders.py",
            [
                "--sizes",
                *args.sizes,
                "--repeats",
                str(args.repeats),
                "--king-sizes",
                *args.king_sizes,
                "--fractal-sizes",
                *args.fractal_sizes,
            ],
            "Build time",
            "Plummer + Kroupa IMF + virial scaling against a NumPy reference (rejection "
            "sampling, not differentiable), the King model solve and builder, and the fractal builder.",
        ),
        "sph.py": lambda: section(
            "sph.py",
            ["--sizes", *args.sph_sizes, "--processes", "3"],
            "SPH density loss",
            "progenax's cell list against jax-md's neighbour list on the seed workload "
            "(see the [SPH stage](sph.md)); each case runs in three fresh processes, the fastest kept "
            "(the machine, shared with others, has slow periods: see `benchmarks/sph.py`).",
            extra=sph_figure,
        ),
        "foundation_figures.py": lambda: section(
            "foundation_figures.py",
            [],
            "Accuracy figures",
            "Measured statistics next to their targets, each also asserted by the test named in the last column.",
        ),
    }
    unknown = set(args.only or []) - set(sections)
    if unknown:
        parser.error(f"--only: unknown script(s) {sorted(unknown)}; choose from {sorted(sections)}")
    GENERATED.mkdir(parents=True, exist_ok=True)
    for script, make in sections.items():
        if args.only and script not in args.only:
            continue
        md = [
            f"<!-- Generated by docs/scripts/benchmarks_page.py from the output of benchmarks/{script}; "
            "do not edit by hand. -->",
            "",
            *make(),
        ]
        out = GENERATED / f"benchmarks_{Path(script).stem}.md"
        out.write_text("\n".join(md))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
