"""A corner-style plot of posterior draws against the truth (matplotlib, imported lazily)."""

from __future__ import annotations

from collections.abc import Mapping

LABELS = {"r_h": r"$r_h$ [pc]", "alpha": r"$\alpha$", "Q": r"$Q$", "W0": r"$W_0$"}


def corner_plot(samples: Mapping, truth: Mapping, path: str, title: str = "NUTS posterior (red: truth)") -> None:
    """Pairwise scatter (lower triangle) and histograms (diagonal) of `samples[name]`
    for each name in `truth`, with the true values in red; written to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(truth)
    k = len(names)
    fig, axes = plt.subplots(k, k, figsize=(2.4 * k, 2.4 * k), squeeze=False)
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
                ax.set_xlabel(LABELS.get(xj, xj))
            else:
                ax.set_xticklabels([])
            if j == 0 and i > 0:
                ax.set_ylabel(LABELS.get(yi, yi))
            elif j > 0:
                ax.set_yticklabels([])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
