"""Figures of the experimental gravoturbulent builders (progenax.gravoturb).

Writes three PNGs to docs/figures/gravoturb/:

- field_slice.png: a slice of s = ln(rho / rho_0) and of the speed |v| / c_s (128^3 grid);
- pdf.png: the measured volume-weighted PDF of s against the model, for several
  Mach numbers and tail slopes (128^3 grids), with s_t marked;
- stars_over_gas.png: the column density of the gas particles of `cloud_builder`
  with the stars of `star_builder` (same key) on top.

    python docs/scripts/gravoturb_figures.py [--output-dir docs/figures/gravoturb]
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

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from progenax.gravoturb import (  # noqa: E402
    cloud_builder,
    lognormal_variance_fit,  # noqa: E402
    star_builder,
    tail_slope_fit,
    turbulent_field,
)

OUTPUT = Path(__file__).resolve().parents[1] / "figures" / "gravoturb"
KEY = jax.random.PRNGKey(2)
_field = eqx.filter_jit(turbulent_field)


def build_field(grid, mach, alpha, b=0.4):
    f = dict(mach=mach, pdf_slope=alpha, b=b, beta=11.0 / 3.0, velocity_beta=4.0, r_cloud=1.0, sound_speed=0.2)
    return _field(KEY, grid=grid, geometry="box", **{k: jnp.asarray(v, jnp.float64) for k, v in f.items()})


def field_slice(path: Path) -> None:
    field, pdf = build_field(128, 5.0, 2.0)
    s = np.asarray(field.log_density)[:, :, 64]
    v = np.asarray(field.velocity)[:, :, 64]
    speed = np.linalg.norm(v, axis=-1) / 0.2
    extent = (-1, 1, -1, 1)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), constrained_layout=True)
    im = axes[0].imshow(s.T, origin="lower", extent=extent, cmap="magma")
    axes[0].contour(s.T, levels=[float(pdf.s_t)], colors="cyan", linewidths=0.7, extent=extent)
    fig.colorbar(im, ax=axes[0], label=r"$s = \ln(\rho/\rho_0)$")
    axes[0].set_title(r"log-density, $\mathcal{M}=5$, $\alpha=2$, $b=0.4$ (cyan: $s_t$)")
    im = axes[1].imshow(speed.T, origin="lower", extent=extent, cmap="viridis")
    step = 8
    x = np.linspace(-1, 1, 128, endpoint=False) + 1 / 128
    axes[1].quiver(x[::step], x[::step], v[::step, ::step, 0].T, v[::step, ::step, 1].T, color="white", width=0.003)
    fig.colorbar(im, ax=axes[1], label=r"$|\mathbf{v}| / c_s$")
    axes[1].set_title(r"velocity, $P(k) \propto k^{-4}$, grid rms $= \mathcal{M} c_s$")
    for ax in axes:
        ax.set_xlabel("x / r_cloud")
        ax.set_ylabel("y / r_cloud")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def pdf_figure(path: Path) -> list[str]:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), constrained_layout=True, sharey=True)
    lines = []
    for ax, alpha in zip(axes, (1.5, 2.5)):
        for mach, colour in zip((2.0, 5.0, 10.0), ("C0", "C1", "C2")):
            field, pdf = build_field(128, mach, alpha)
            s = np.asarray(field.log_density).ravel()
            counts, edges = np.histogram(s, bins=120)
            centres = 0.5 * (edges[1:] + edges[:-1])
            density = counts / (s.size * np.diff(edges))
            keep = counts > 0
            ax.semilogy(centres[keep], density[keep], ".", ms=3, color=colour, label=f"measured, M = {mach:g}")
            grid_s = np.linspace(edges[0], edges[-1], 600)
            ax.semilogy(grid_s, np.asarray(pdf.pdf(grid_s)), "-", lw=1, color=colour)
            ax.axvline(float(pdf.s_t), color=colour, ls=":", lw=0.8)
            var = lognormal_variance_fit(s, float(pdf.s_t))
            slope, n_t = tail_slope_fit(s, float(pdf.s_t))
            row = (mach, alpha, float(pdf.variance), var, slope, n_t, np.mean(np.exp(s)))
            lines.append("| {:g} | {:g} | {:.4f} | {:.4f} | {:.3f} | {} | {:.4f} |".format(*row))
        ax.set_title(rf"$\alpha = {alpha:g}$ (lines: model; dotted: $s_t$)")
        ax.set_xlabel(r"$s = \ln(\rho/\rho_0)$")
        ax.set_ylim(1e-7, 2)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("volume-weighted PDF p(s)")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return lines


def stars_over_gas(path: Path) -> None:
    gas = cloud_builder(KEY, n=200_000, grid=64, mach=5.0, pdf_slope=2.0)
    stars = star_builder(KEY, n=1000, grid=64, mach=5.0, pdf_slope=2.0)
    x = np.asarray(gas.state.positions)
    m = np.asarray(gas.state.masses)
    column, xe, ye = np.histogram2d(x[:, 0], x[:, 1], bins=128, range=[[-1, 1], [-1, 1]], weights=m)
    column /= (xe[1] - xe[0]) * (ye[1] - ye[0])
    fig, ax = plt.subplots(figsize=(6.2, 5.4), constrained_layout=True)
    im = ax.imshow(np.log10(column.T + 1e-3), origin="lower", extent=(-1, 1, -1, 1), cmap="Greys")
    fig.colorbar(im, ax=ax, label=r"$\log_{10}\,\Sigma_\mathrm{gas}$ [M$_\odot$ pc$^{-2}$]")
    s = np.asarray(stars.state.positions)
    ax.scatter(s[:, 0], s[:, 1], s=4 * np.asarray(stars.state.masses) ** 0.5, c="crimson", lw=0, alpha=0.8)
    ax.set_title(r"200k gas particles and 1000 stars ($\mathcal{M}=5$, $\alpha=2$, $\kappa=10$)")
    ax.set_xlabel("x [pc]")
    ax.set_ylabel("y [pc]")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=OUTPUT)
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    field_slice(args.output_dir / "field_slice.png")
    lines = pdf_figure(args.output_dir / "pdf.png")
    stars_over_gas(args.output_dir / "stars_over_gas.png")
    print("| M | alpha | sigma_s^2 model | sigma_s^2 fit | alpha fit | tail cells | <rho/rho_0> |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
