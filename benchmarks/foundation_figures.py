"""Print the foundation issue's acceptance figures, measured, next to their targets.

    python benchmarks/foundation_figures.py

Each figure is also asserted by a test (named in the last column); this script
prints the numbers themselves, with fixed keys.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

jax.config.update("jax_enable_x64", True)

import progenax  # noqa: E402
from progenax.diagnostics import half_mass_radius, virial_ratio  # noqa: E402
from progenax.imf import kroupa  # noqa: E402
from progenax.profiles.eff import eff_projected_half_mass_radius, eff_scale_radius  # noqa: E402
from progenax.profiles.plummer import (  # noqa: E402
    plummer_mass_fraction,
    plummer_scale_radius,
    plummer_velocity_dispersion,
)
from progenax.units import G_PHYSICAL  # noqa: E402


def row(item: str, measured: str, target: str, test: str) -> None:
    print(f"{item:<44} {measured:>22}  {target:<18} {test}")


def main() -> None:
    row("item", "measured", "target", "test")
    ic = progenax.plummer_builder(jax.random.PRNGKey(11), n=1_000_000, r_h=1.0)
    r_h = float(half_mass_radius(ic.state.positions, ic.state.masses))
    row(
        "Plummer 1e6: mass-weighted r_h / r_h - 1",
        f"{r_h - 1:+.4%}",
        "|.| <= 1.5%",
        "test_plummer::test_half_mass_radius_at_one_million",
    )

    ic = progenax.plummer_builder(jax.random.PRNGKey(5), n=10_000, r_h=2.0)
    r = np.asarray(jnp.linalg.norm(ic.state.positions, axis=1))
    a = float(plummer_scale_radius(2.0))
    p = stats.kstest(r, lambda x: np.asarray(plummer_mass_fraction(x, a))).pvalue
    row(
        "Plummer 1e4: KS p-value of radii vs M(r)",
        f"{p:.3f}",
        "> 0.01",
        "test_plummer::test_radii_follow_plummer_mass_profile_ks",
    )

    ic = progenax.plummer_builder(jax.random.PRNGKey(2), n=20_000, Q=0.5)
    s = ic.state
    q = float(virial_ratio(s.positions, s.velocities, s.masses, method="exact"))
    row(
        "Plummer 2e4: Q (exact pairwise W)", f"{q:.6f}", "0.5 +- 0.01", "test_plummer::test_virial_ratio_exact_at_20000"
    )
    ic = progenax.plummer_builder(jax.random.PRNGKey(8), n=100_000, Q=0.5)
    s = ic.state
    q = float(virial_ratio(s.positions, s.velocities, s.masses, method="spherical"))
    row("Plummer 1e5: Q (spherical W)", f"{q:.6f}", "0.5 +- 0.01", "(same estimator as the scaling)")
    r = jnp.linalg.norm(s.positions, axis=1)
    edges = jnp.quantile(r[r < 3.0], jnp.linspace(0, 1, 6))
    m_tot = jnp.sum(s.masses)
    a = plummer_scale_radius(1.0)
    worst = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (r >= lo) & (r < hi)
        nb = int(sel.sum())
        sigma = jnp.sqrt(jnp.sum(jnp.where(sel[:, None], s.velocities**2, 0.0)) / (3 * nb))
        model = jnp.sqrt(jnp.sum(jnp.where(sel, plummer_velocity_dispersion(r, m_tot, a, G_PHYSICAL) ** 2, 0)) / nb)
        worst = max(worst, abs(float(sigma / model) - 1))
    row(
        "Plummer 1e5: worst sigma(r) bin error (5 bins)",
        f"{worst:.3%}",
        "<= 3%",
        "test_plummer::test_velocity_dispersion_profile_at_100000",
    )

    for gamma in (3.0, 5.0):
        expected = float(eff_projected_half_mass_radius(gamma, eff_scale_radius(1.0, gamma)))
        for imf in ("equal", None):
            ic = progenax.eff_builder(jax.random.PRNGKey(3), n=100_000, gamma=gamma, r_h=1.0, imf=imf)
            s = ic.state
            got = float(half_mass_radius(s.positions, s.masses, projected=True, centre=jnp.zeros(3)))
            label = "equal masses" if imf else "Kroupa"
            row(
                f"EFF gamma={gamma:g} 1e5 ({label}): proj. R_h/model - 1",
                f"{got / expected - 1:+.3%}",
                "|.| <= 2%",
                "test_eff_builder::test_projected_half_mass_radius_at_100000" if imf else "(mass-weighted: noisier)",
            )

    m = kroupa().sample(jax.random.PRNGKey(0), (1_000_000,))
    row(
        "Kroupa 1e6: sample mean / 0.5739 - 1",
        f"{float(m.mean()) / 0.5739 - 1:+.3%}",
        "|.| <= 1%",
        "test_power_law::test_kroupa_sample_mean_at_one_million",
    )
    row(
        "Kroupa: analytic mean mass",
        f"{float(kroupa().mean_mass()):.6f}",
        "0.5739",
        "test_power_law::test_kroupa_mean_mass",
    )
    for i, s0 in enumerate((1.3, 2.3)):

        def mean(x, i=i):
            return progenax.imf.PowerLawIMF([0.08, 0.5, 100.0], jnp.array([1.3, 2.3]).at[i].set(x)).mean_mass()

        h = 1e-6
        fd = (mean(s0 + h) - mean(s0 - h)) / (2 * h)
        rel = abs(float(jax.grad(mean)(s0) / fd) - 1)
        row(
            f"Kroupa: grad mean_mass wrt slope {i} vs FD",
            f"{rel:.1e}",
            "<= 1e-6",
            "test_power_law::test_mean_mass_gradient_in_each_slope",
        )


if __name__ == "__main__":
    main()
