"""Density and velocity-dispersion profiles of lowered-isothermal models.

King (1966) models for several W0 and the LIMEPY family for several g, against
the Plummer sphere and EFF gamma = 3, all with the same total mass and 3D
half-mass radius (G = M = r_h = 1), and the anisotropy profile beta(r) of
anisotropic LIMEPY models (W0 = 6, g = 1, several ra). Writes
docs/figures/king_profiles.png.

    python docs/scripts/king_profiles.py [--output docs/figures/king_profiles.png]
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

from progenax import solve_king_profile  # noqa: E402
from progenax.kinematics.king_df import mean_square_speed  # noqa: E402
from progenax.profiles.eff import eff_density, eff_scale_radius, eff_velocity_dispersion  # noqa: E402
from progenax.profiles.plummer import plummer_density, plummer_scale_radius, plummer_velocity_dispersion  # noqa: E402

OUTPUT = Path(__file__).resolve().parents[1] / "figures" / "king_profiles.png"
solve = jax.jit(solve_king_profile)


def king_curves(W0: float, g: float):
    """(r, rho, sigma) inside r_t in units G = M = r_h = 1."""
    p = solve(W0, g)
    r_h, m_t = float(p.r_h), float(p.total_mass)
    inside = (np.asarray(p.r) > 0) & (np.asarray(p.r) < float(p.r_t))
    r = np.asarray(p.r)[inside]
    W = np.asarray(p.W)[inside]
    rho = np.asarray(p.density)[inside] * r_h**3 / m_t  # rho_0 r_0^3 = M / m_t
    s2 = 4 * np.pi * r_h / (9 * m_t)  # G M / (s^2 L) = (9 / 4 pi) m_t, L = 1 / r_h
    sigma = np.sqrt(s2 * np.asarray(mean_square_speed(W, g)) / 3)
    return r / r_h, rho, sigma, float(p.r_t) / r_h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()

    r = np.geomspace(1e-2, 1e3, 600)
    a_p = float(plummer_scale_radius(1.0))
    a_e = float(eff_scale_radius(1.0, 3.0))
    ref = {
        "Plummer": (plummer_density(r, 1.0, a_p), plummer_velocity_dispersion(r, 1.0, a_p, 1.0)),
        "EFF γ=3": (eff_density(r, 3.0, a_e, 1.0), eff_velocity_dispersion(r, 3.0, a_e, 1.0, 1.0)),
    }
    ref = {name: (np.asarray(rho), np.asarray(sigma)) for name, (rho, sigma) in ref.items()}

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6), constrained_layout=True)
    ax_rho, ax_g, ax_sig, ax_beta = axes
    colours = plt.cm.viridis(np.linspace(0.0, 0.85, 4))
    for colour, W0 in zip(colours, (3.0, 6.0, 9.0, 12.0)):
        x, rho, sigma, x_t = king_curves(W0, 1.0)
        ax_rho.loglog(x, rho, color=colour, label=f"King W0={W0:g} (r_t={x_t:.1f} r_h)")
        if W0 < 12:
            ax_sig.semilogx(x, sigma, color=colour, label=f"King W0={W0:g}")
    for colour, g in zip(colours, (0.0, 1.0, 2.0, 3.0)):
        x, rho, _, _ = king_curves(3.0, g)
        ax_g.loglog(x, rho, color=colour, label=f"g={g:g}" + {0: " Woolley", 1: " King", 2: " Wilson"}.get(int(g), ""))
    for (name, (rho, sigma)), style in zip(ref.items(), ("k--", "k:")):
        for ax in (ax_rho, ax_g):
            ax.loglog(r, rho, style, label=name)
        ax_sig.semilogx(r, sigma, style, label=name)

    for colour, ra in zip(colours, (3.0, 5.0, 10.0, 30.0)):
        p = solve(6.0, 1.0, ra)
        r_grid, inside = np.asarray(p.r), np.asarray(p.r) < float(p.r_t)
        # beta -> 0 at r_t itself (every speed -> 0 there), inside the last grid cell.
        x_beta = np.append(r_grid[inside], float(p.r_t)) / float(p.r_h)
        ax_beta.semilogx(
            x_beta,
            np.append(np.asarray(p.beta)[inside], 0.0),
            color=colour,
            label=f"r_a={ra:g} r_0 (r_t={float(p.r_t) / float(p.r_h):.0f} r_h)",
        )

    ax_rho.set_title("King (1966), several W0")
    ax_g.set_title("LIMEPY family, W0 = 3, several g")
    ax_sig.set_title("1D velocity dispersion")
    for ax in (ax_rho, ax_g):
        ax.set_xlim(1e-2, 1e3)
        ax.set_ylim(1e-9, 1e2)
        ax.set_ylabel(r"$\rho\ [M / r_h^3]$")
    ax_sig.set_xlim(1e-2, 1e2)
    ax_sig.set_ylabel(r"$\sigma\ [\sqrt{G M / r_h}]$")
    ax_beta.set_title("Anisotropic LIMEPY, W0 = 6, g = 1")
    ax_beta.set_xlim(1e-2, 1e2)
    ax_beta.set_ylim(0, 1)
    ax_beta.set_ylabel(r"$\beta = 1 - \sigma_t^2 / (2\sigma_r^2)$")
    for ax in axes:
        ax.set_xlabel(r"$r / r_h$")
        ax.legend(fontsize=8)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
