"""Continuity of the stars' placement: an all-star observable against the Mach number.

The observable is the issue-22 case: the mass-weighted mean square radius of
`star_builder(PRNGKey(1), n=500, mach=M, pdf_slope=a)` (grid 64, the defaults
otherwise), on a fine grid of M at a = 1.8, and its autodiff gradient against
central differences at several steps.

    python docs/scripts/gravoturb_placement.py --save before   # data of the current placement
    python docs/scripts/gravoturb_placement.py                 # figure: saved "before" against now
    python docs/scripts/gravoturb_placement.py --plot-only     # redraw from the saved data

Writes docs/figures/gravoturb/placement_<label>.npz and placement_continuity.png,
and prints the gradient table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from progenax.gravoturb import star_builder  # noqa: E402

OUTPUT = Path(__file__).resolve().parents[1] / "figures" / "gravoturb"
KEY = jax.random.PRNGKey(1)
MACH, SLOPE = 5.0, 1.8
STEPS = (1e-3, 1e-4, 1e-5, 1e-6)


def mean_square_radius(mach, pdf_slope):
    ic = star_builder(KEY, n=500, mach=mach, pdf_slope=pdf_slope)
    m = ic.state.masses * ic.weights
    return jnp.sum(m * jnp.sum(ic.state.positions**2, -1)) / jnp.sum(m)


value_and_grad = jax.jit(jax.value_and_grad(mean_square_radius, argnums=(0, 1)))


def _at(mach, slope):
    return value_and_grad(jnp.float64(mach), jnp.float64(slope))


def gradient_table() -> list[str]:
    """Autodiff against central differences (relative steps `STEPS`) for mach and pdf_slope."""
    _, grads = _at(MACH, SLOPE)
    lines = [f"autodiff: d/dmach {float(grads[0]):.6g}, d/dpdf_slope {float(grads[1]):.6g}"]
    for which, name in enumerate(("mach", "pdf_slope")):
        x0 = (MACH, SLOPE)[which]
        cells = []
        for step in STEPS:
            h = step * x0
            up = [MACH, SLOPE]
            down = [MACH, SLOPE]
            up[which] += h
            down[which] -= h
            fd = float((_at(*up)[0] - _at(*down)[0]) / (2 * h))
            cells.append(f"{step:g}: {fd:.6g} (rel {abs(fd - float(grads[which])) / abs(float(grads[which])):.1e})")
        lines.append(f"d/d{name} central differences  " + "; ".join(cells))
    return lines


def scan(label: str, machs: np.ndarray) -> Path:
    values = np.array([float(_at(m, SLOPE)[0]) for m in machs])
    path = OUTPUT / f"placement_{label}.npz"
    np.savez(path, mach=machs, value=values)
    return path


def figure(machs: np.ndarray, after: np.ndarray) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    before_path = OUTPUT / "placement_before.npz"
    if before_path.exists():
        before = np.load(before_path)
        axes[0].plot(before["mach"], before["value"], lw=0.8, label="before: raster-order 1D CDF")
    axes[0].plot(machs, after, lw=0.8, label="now: Knothe-Rosenblatt, $C^2$ interpolated density")
    axes[0].set_xlabel(r"Mach number $\mathcal{M}$")
    axes[0].set_ylabel(r"$\sum m r^2 / \sum m$ (pc$^2$)")
    axes[0].set_title(r"500 stars, grid $64^3$, $\alpha_s = 1.8$")
    axes[0].legend(fontsize=8)
    zoom = np.abs(machs - MACH) <= 0.02
    if before_path.exists():
        bz = np.abs(before["mach"] - MACH) <= 0.02
        axes[1].plot(before["mach"][bz], before["value"][bz], ".-", lw=0.6, ms=2)
    axes[1].plot(machs[zoom], after[zoom], ".-", lw=0.6, ms=2)
    axes[1].set_xlabel(r"$\mathcal{M}$ (zoom)")
    axes[1].set_title(r"zoom around $\mathcal{M} = 5$")
    path = OUTPUT / "placement_continuity.png"
    fig.savefig(path, dpi=130)
    return path


def machs() -> np.ndarray:
    """A coarse sweep 3..7 and a fine one (step 1e-3) within 0.02 of M = 5."""
    return np.unique(np.concatenate([np.linspace(3.0, 7.0, 201), np.linspace(MACH - 0.02, MACH + 0.02, 41)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="only save the scan under this label (e.g. 'before')")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from the saved scans")
    args = parser.parse_args()
    if args.plot_only:
        after = np.load(OUTPUT / "placement_after.npz")
        print(figure(after["mach"], after["value"]))
        return
    print("\n".join(gradient_table()))
    grid = machs()
    if args.save:
        print(scan(args.save, grid))
        return
    path = scan("after", grid)
    print(path, figure(grid, np.load(path)["value"]))


if __name__ == "__main__":
    main()
