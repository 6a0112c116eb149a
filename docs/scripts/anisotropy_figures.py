"""Figures of the Osipkov-Merritt and rotating Plummer builds for docs/builders.md.

anisotropy.png: Plummer spheres (r_h = 1 pc, N = 1e5, equal masses, Q = None: the
DF's own equilibrium) with r_a = a and 2a; beta(r), sigma_r(r) and sigma_t(r) =
<v_t^2>^(1/2) (both tangential components) in 10 radial bins of equal counts inside
4a with their standard errors (`progenax.diagnostics.anisotropy_profile`), against
the solution of the anisotropic Jeans equation computed by quadrature on
Plummer's closed-form density and mass (`osipkov_merritt_jeans`, independent of
the sampler's DF); each bin's deviation from the Jeans bin mean is printed in
units of its standard error, for these bins and for the 5 acceptance bins of
tests/models/test_anisotropy.py.

rotation.png: isotropic Plummer spheres (same N, r_h, key) with rotation
k = 0.25, 0.5, 1 and L_0 = 0, and k = 1 with L_0 = the median |L_z|: the mean
v_phi(R) in cylindrical bins (`rotation_curve`), against the expectation built
from the non-rotating build at the same key, whose |v_phi| the flips keep:
E[v_phi] = k tanh(|L_z| / L_0) |v_phi| (L_0 = 0: k |v_phi|), averaged per bin.

    python docs/scripts/anisotropy_figures.py [--output-dir docs/figures]
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
from progenax.diagnostics import (  # noqa: E402
    anisotropy_profile,
    osipkov_merritt_jeans,
    osipkov_merritt_jeans_binned,
    rotation_curve,
)
from progenax.models import Plummer  # noqa: E402

OUTPUT_DIR = Path(__file__).resolve().parents[1] / "figures"
N = 100_000
KEY = jax.random.PRNGKey(3)
ACCEPTANCE_EDGES = np.array([0.0, 0.5, 1.0, 1.75, 2.75, 4.0])  # units of a, as the test


def plummer_density(r):
    return 3.0 / (4.0 * np.pi) * (1.0 + r * r) ** -2.5  # G = M = a = 1


def plummer_mass(r):
    return r**3 / (1.0 + r * r) ** 1.5


def deviations(p, sr2, st2) -> np.ndarray:
    """(3, bins): (measured - Jeans) / standard error for v_r^2, v_t^2 and beta."""
    beta = 1.0 - st2 / (2.0 * sr2)
    return np.array([(p.v_r2 - sr2) / p.v_r2_err, (p.v_t2 - st2) / p.v_t2_err, (p.beta - beta) / p.beta_err])


def anisotropy_figure(path: Path) -> None:
    a = float(Plummer(1.0).scale_radius)
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.0), layout="constrained")
    grid = np.linspace(0.02, 4.0, 120)  # units of a
    for ra_over_a, color in ((1.0, "C0"), (2.0, "C3")):
        ic = progenax.plummer_builder(KEY, n=N, r_h=1.0, ra=ra_over_a * a, Q=None, imf="equal")
        x, v, m = (np.asarray(y) for y in (ic.state.positions, ic.state.velocities, ic.state.masses))
        unit = ic.model.G * float(ic.model.total_mass) / a  # (km/s)^2 per G M / a
        r = np.linalg.norm(x, axis=1) / a
        edges = np.quantile(r[r < 4.0], np.linspace(0.0, 1.0, 11))
        edges[0], edges[-1] = 0.0, 4.0
        p = anisotropy_profile(x, v, m, edges * a)
        for name, e in (("plotted (10 bins)", edges), ("acceptance (5 bins)", ACCEPTANCE_EDGES)):
            q = anisotropy_profile(x, v, m, e * a)
            sr2, st2 = (unit * y for y in osipkov_merritt_jeans_binned(e, plummer_density, plummer_mass, ra_over_a))
            dev = deviations(q, sr2, st2)
            print(f"ra = {ra_over_a:g} a, {name}: (measured - Jeans) / error")
            for label, row in zip(("v_r^2", "v_t^2", "beta"), dev):
                print(f"  {label:6s}" + " ".join(f"{d:+5.2f}" for d in row) + f"   max |dev| = {np.abs(row).max():.2f}")
        sr2, st2 = (unit * y for y in osipkov_merritt_jeans(grid, plummer_density, plummer_mass, ra_over_a))
        label = f"$r_a$ = {ra_over_a:g} a"
        rb = p.radius / a
        axes[0].errorbar(rb, p.beta, yerr=p.beta_err, fmt="o", ms=3.5, color=color, capsize=0, label=label)
        axes[0].plot(grid, 1.0 - st2 / (2.0 * sr2), color=color, lw=1.2)
        axes[1].errorbar(rb, p.sigma_r, yerr=p.sigma_r_err, fmt="o", ms=3.5, color=color, capsize=0, label=label)
        axes[1].plot(grid, np.sqrt(sr2), color=color, lw=1.2)
        axes[2].errorbar(rb, p.sigma_t, yerr=p.sigma_t_err, fmt="o", ms=3.5, color=color, capsize=0, label=label)
        axes[2].plot(grid, np.sqrt(st2), color=color, lw=1.2)
    iso_r2, iso_t2 = (unit * y for y in osipkov_merritt_jeans(grid, plummer_density, plummer_mass, None))
    axes[1].plot(grid, np.sqrt(iso_r2), color="0.5", ls="--", lw=1, label="isotropic")
    axes[2].plot(grid, np.sqrt(iso_t2), color="0.5", ls="--", lw=1, label="isotropic")
    axes[0].plot([], [], color="k", lw=1.2, label="Jeans equation")
    titles = (
        r"anisotropy $\beta(r)$",
        r"radial dispersion $\sigma_r$",
        r"tangential $\sigma_t = \langle v_t^2\rangle^{1/2}$",
    )
    ylabels = (
        r"$\beta = 1 - \langle v_t^2\rangle / 2\langle v_r^2\rangle$",
        r"$\sigma_r$ [km/s]",
        r"$\sigma_t$ [km/s]",
    )
    for ax, title, ylabel in zip(axes, titles, ylabels):
        ax.set(xlabel="r / a", ylabel=ylabel, title=title, xlim=(0.0, 4.0))
        ax.legend(fontsize=8)
    fig.suptitle(f"Osipkov-Merritt Plummer, N = {N:.0e}, r_h = 1 pc (a = {a:.3f} pc): points = sample, lines = Jeans")
    fig.savefig(path, dpi=100)
    print("wrote", path)


def rotation_figure(path: Path) -> None:
    kw = dict(n=N, r_h=1.0, Q=None, imf="equal")
    still = progenax.plummer_builder(KEY, rotation=0.0, **kw)
    x, v0, m = (np.asarray(y) for y in (still.state.positions, still.state.velocities, still.state.masses))
    R = np.hypot(x[:, 0], x[:, 1])
    abs_lz = np.abs(x[:, 0] * v0[:, 1] - x[:, 1] * v0[:, 0])
    abs_phi = abs_lz / R
    L_0 = float(np.median(abs_lz))
    edges = np.quantile(R, np.linspace(0.0, 0.98, 13))
    edges[0] = 0.0
    index = np.clip(np.searchsorted(edges, R, side="right") - 1, 0, edges.size - 2)
    inside = R < edges[-1]
    fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    cases = ((0.25, 0.0, "C0"), (0.5, 0.0, "C1"), (1.0, 0.0, "C3"), (1.0, L_0, "C2"))
    for k, scale, color in cases:
        ic = progenax.plummer_builder(KEY, rotation=k, rotation_scale=scale, **kw)
        c = rotation_curve(ic.state.positions, ic.state.velocities, ic.state.masses, edges)
        odd = k * (np.tanh(abs_lz / scale) if scale > 0 else 1.0) * abs_phi
        expected = np.bincount(index[inside], weights=(m * odd)[inside]) / np.bincount(index[inside], weights=m[inside])
        label = f"k = {k:g}, $L_0$ = " + (f"{scale:.3g} pc km/s" if scale > 0 else "0")
        ax.errorbar(c.radius, c.v_phi, yerr=c.v_phi_err, fmt="o", ms=3.5, color=color, capsize=0, label=label)
        ax.plot(c.radius, expected, color=color, lw=1.0)
        dev = (c.v_phi - expected) / c.v_phi_err
        print(
            f"rotation k = {k:g}, L_0 = {scale:.3g}: (measured - expected) / error, max |dev| = {np.abs(dev).max():.2f}"
        )
    ax.axhline(0.0, color="0.6", ls=":", lw=1)
    ax.set(
        xlabel="R [pc] (cylindrical, about z)",
        ylabel=r"mean $v_\phi$ [km/s]",
        xlim=(0.0, 1.1 * c.radius[-1]),
        title=f"rotating Plummer, N = {N:.0e}, r_h = 1 pc (lines: expected)",
    )
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    print("wrote", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=OUTPUT_DIR)
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    anisotropy_figure(args.output_dir / "anisotropy.png")
    rotation_figure(args.output_dir / "rotation.png")


if __name__ == "__main__":
    main()
