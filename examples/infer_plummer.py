"""Infer r_h, alpha and Q of a mock Plummer cluster with NUTS (numpyro).

    python examples/infer_plummer.py [--n 2000] [--num-chains 2] [--num-warmup 500]
        [--num-samples 500] [--likelihood unbinned] [--seed 0]
        [--output docs/figures/inference_plummer.png] [--exact-virial] [--projected]

A cluster of n stars is built with `plummer_builder` (truth r_h = 1 pc,
alpha = 2.3, Q = 0.5), observed with perfect 3D positions, velocities and masses
(or projected positions with --projected), and the unbinned likelihood
(`progenax.infer.plummer_model`) is sampled with NUTS. Prints numpyro's summary,
each parameter's median against the truth in posterior standard deviations, the
bulk ESS, r-hat, divergences, wall time and ESS per second, and writes a
corner-style plot.
"""

import argparse
import functools
import time

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

from progenax.infer import init_to_data, plummer_model, simulate_plummer  # noqa: E402
from progenax.infer.diagnostics import bulk_ess, split_r_hat  # noqa: E402

jax.config.update("jax_enable_x64", True)

TRUTH = {"r_h": 1.0, "alpha": 2.3, "Q": 0.5}
LABELS = {"r_h": r"$r_h$ [pc]", "alpha": r"$\alpha$", "Q": r"$Q$"}


def corner_plot(samples: dict, truth: dict, path: str) -> None:
    """Pairwise scatter (lower triangle) and histograms (diagonal) with truth lines."""
    names = list(truth)
    k = len(names)
    fig, axes = plt.subplots(k, k, figsize=(2.4 * k, 2.4 * k))
    for i, yi in enumerate(names):
        for j, xj in enumerate(names):
            ax = axes[i, j]
            if j > i:
                ax.axis("off")
                continue
            if i == j:
                ax.hist(samples[xj], bins=30, color="0.4", histtype="stepfilled", alpha=0.7)
                ax.axvline(truth[xj], color="C3")
                ax.set_yticks([])
            else:
                ax.scatter(samples[xj], samples[yi], s=2, alpha=0.3, color="0.2", rasterized=True)
                ax.axvline(truth[xj], color="C3")
                ax.axhline(truth[yi], color="C3")
                ax.plot(truth[xj], truth[yi], "s", color="C3", ms=4)
            if i == k - 1:
                ax.set_xlabel(LABELS[xj])
            else:
                ax.set_xticklabels([])
            if j == 0 and i > 0:
                ax.set_ylabel(LABELS[yi])
            elif j > 0:
                ax.set_yticklabels([])
    fig.suptitle("Plummer NUTS posterior (red: truth)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--num-warmup", type=int, default=500)
    parser.add_argument("--num-samples", type=int, default=500)
    parser.add_argument("--num-chains", type=int, default=2)
    parser.add_argument("--chain-method", default="vectorized", choices=("sequential", "vectorized"))
    parser.add_argument("--likelihood", default="unbinned", choices=("unbinned",))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="infer_plummer.png")
    parser.add_argument("--projected", action="store_true", help="observe projected (x, y) positions only")
    parser.add_argument(
        "--exact-virial", action="store_true",
        help="data from plummer_builder(Q=0.5) rescaled to T/|W| = Q exactly (not the likelihood's model)",
    )
    args = parser.parse_args()

    data = simulate_plummer(
        jax.random.PRNGKey(args.seed), n=args.n, **TRUTH, exact_virial=args.exact_virial, projected=args.projected
    )
    print(f"mock cluster: n = {data.n}, M = {float(data.masses.sum()):.1f} Msun, truth {TRUTH}")

    model = functools.partial(plummer_model, likelihood=args.likelihood)
    kernel = NUTS(model, init_strategy=init_to_data())
    mcmc = MCMC(
        kernel, num_warmup=args.num_warmup, num_samples=args.num_samples, num_chains=args.num_chains,
        chain_method=args.chain_method, progress_bar=False, jit_model_args=True,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(args.seed + 1), data, extra_fields=("diverging",))
    jax.block_until_ready(mcmc.get_samples())
    wall = time.perf_counter() - start
    mcmc.print_summary()

    grouped = mcmc.get_samples(group_by_chain=True)
    flat = {p: np.asarray(mcmc.get_samples()[p]) for p in TRUTH}
    divergences = int(np.sum(mcmc.get_extra_fields()["diverging"]))
    total = args.num_chains * args.num_samples
    print(f"{'param':6s} {'truth':>6s} {'median':>8s} {'sd':>8s} {'(med-truth)/sd':>15s} {'bulk ESS':>9s} {'r-hat':>6s}")
    ess = {}
    for p, t in TRUTH.items():
        med, sd = np.median(flat[p]), np.std(flat[p])
        ess[p] = bulk_ess(grouped[p]) if args.num_chains * args.num_samples >= 8 else float("nan")
        r_hat = split_r_hat(grouped[p]) if args.num_samples >= 4 else float("nan")
        print(f"{p:6s} {t:6.2f} {med:8.4f} {sd:8.4f} {(med - t) / sd:15.2f} {ess[p]:9.0f} {r_hat:6.3f}")
    print(f"divergences: {divergences} of {total} ({100.0 * divergences / total:.2f} %)")
    print(f"wall time (compile + warmup + sampling): {wall:.1f} s")
    print(f"min bulk ESS / s: {min(ess.values()) / wall:.1f}")
    corner_plot(flat, TRUTH, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
