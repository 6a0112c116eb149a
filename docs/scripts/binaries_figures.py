"""Orbits of a built cluster with binaries against the requested distributions.

A 20,000-system Plummer cluster with `BinaryPopulation(1.0, "kroupa95",
"thermal")`: the periods, eccentricities and mass ratios recovered from the
particles (`progenax.binaries.pair_elements`) against the Kroupa (1995) period
distribution, f(e) = 2e and the uniform q in [0.1, 1]. Writes
docs/figures/binaries.png.

    python docs/scripts/binaries_figures.py [--output docs/figures/binaries.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import progenax  # noqa: E402
from progenax.binaries import DAY_MYR, Kroupa95Period, orbital_period, pair_elements  # noqa: E402
from progenax.units import G_PHYSICAL, physical_units  # noqa: E402


def main(output: Path, n: int) -> None:
    ic = progenax.plummer_builder(jax.random.PRNGKey(0), n=n, binaries=progenax.BinaryPopulation(1.0))
    s = ic.state
    el = pair_elements(s.positions, s.velocities, s.masses, ic.pairs, G_PHYSICAL)
    m = np.asarray(s.masses)[np.asarray(ic.pairs)]
    day = DAY_MYR / physical_units().time_myr
    log_p = np.log10(np.asarray(orbital_period(el.a, m.sum(axis=1), G_PHYSICAL)) / day)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    grid = np.linspace(1.0, 8.43, 200)
    axes[0].hist(log_p, bins=40, density=True, color="0.7", label="built")
    axes[0].plot(grid, np.asarray(Kroupa95Period().pdf(grid)), "k", label="Kroupa (1995)")
    axes[0].set_xlabel(r"$\log_{10}(P/\mathrm{day})$")
    e_grid = np.linspace(0, 1, 100)
    axes[1].hist(np.asarray(el.e), bins=40, density=True, color="0.7", label="built")
    axes[1].plot(e_grid, 2 * e_grid, "k", label=r"thermal $f(e) = 2e$")
    axes[1].set_xlabel("e (close pairs are rounder: pericentre limit)")
    q = m[:, 1] / m[:, 0]
    axes[2].hist(q, bins=40, density=True, color="0.7", label="built")
    axes[2].plot([0.1, 1.0], [1 / 0.9, 1 / 0.9], "k", label="uniform in [0.1, 1]")
    axes[2].set_xlabel(r"$q = m_2/m_1$")
    for ax in axes:
        ax.legend(fontsize=8)
    axes[0].set_ylabel("probability density")
    fig.suptitle(f"{n:,} binaries of a Plummer cluster, elements recovered from the particles")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=120)
    print(f"wrote {output}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("docs/figures/binaries.png"))
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    main(args.output, args.n)
