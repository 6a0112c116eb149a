"""Simulation-based calibration of the unbinned King model: rank histograms.

Runs `tests/infer/test_sbc.py::run_king_sbc` (the design of the `make validate`
test, or a smaller one with the options), prints each parameter's rank
histogram and chi-square p-value, and writes the figure and the ranks (JSON).

    python docs/scripts/king_sbc.py [--datasets 120] [--stars 300] [--warmup 300] [--samples 396]
        [--batch-size 1] [--output docs/figures/king_sbc.png]

`--batch-size` chains run together as one `vmap` (default 1: each chain at its
own pace; all 120 at once on an H200 GPU were no faster a transition than that on
2 CPU cores, `progenax.infer.calibration.simulation_based_calibration`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "infer"))

import test_sbc  # noqa: E402

from progenax.infer import rank_uniformity_test, sbc_rank_plot  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=test_sbc.KING_DATASETS)
    parser.add_argument("--stars", type=int, default=test_sbc.KING_STARS)
    parser.add_argument("--warmup", type=int, default=test_sbc.NUM_WARMUP)
    parser.add_argument("--samples", type=int, default=test_sbc.NUM_SAMPLES)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "figures" / "king_sbc.png")
    args = parser.parse_args()
    start = time.perf_counter()
    ranks, divergences = test_sbc.run_king_sbc(
        num_datasets=args.datasets,
        n=args.stars,
        num_warmup=args.warmup,
        num_samples=args.samples,
        batch_size=args.batch_size,
    )
    elapsed = time.perf_counter() - start
    num_draws = args.samples // test_sbc.THIN
    bins = test_sbc.NUM_BINS
    print(f"King SBC: {args.datasets} data sets x N = {args.stars}, {elapsed:.0f} s, {divergences} divergences")
    fig, axes = plt.subplots(1, len(ranks), figsize=(3.2 * len(ranks), 2.8), sharey=True)
    expected = args.datasets / bins
    # The 99% band of one bin's count under uniform ranks (binomial).
    band = stats.binom(args.datasets, 1 / bins).ppf([0.005, 0.995])
    record = {"datasets": args.datasets, "stars": args.stars, "draws": num_draws, "divergences": divergences}
    for ax, (name, r) in zip(axes, ranks.items()):
        counts, p = rank_uniformity_test(r, num_draws, bins)
        print(f"  {name:5s} bins {counts.tolist()}  chi2 p = {p:.3f}")
        record[name] = {"ranks": r.tolist(), "bins": counts.tolist(), "p": p}
        ax.axhspan(*band, color="0.88")
        ax.axhline(expected, color="0.5", lw=1)
        ax.bar(np.arange(bins) + 0.5, counts, width=0.9, color="tab:blue")
        ax.set_title(f"{name}: p = {p:.2f}")
        ax.set_xlabel(f"rank bin ({(num_draws + 1) // bins} ranks each)")
    axes[0].set_ylabel("data sets")
    fig.suptitle(f"King SBC: {args.datasets} data sets of {args.stars} stars, {num_draws} draws (99% band grey)")
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=120)
    args.output.with_suffix(".json").write_text(json.dumps(record))
    ecdf = args.output.with_name(args.output.stem + "_ecdf.png")
    sbc_rank_plot(ranks, num_draws, ecdf, title="King SBC: ECDF of the ranks minus uniform (99% band)")
    print(f"wrote {ecdf}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
