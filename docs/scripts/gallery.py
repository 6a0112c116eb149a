"""Builders gallery: one four-panel figure per builder, measured against its model.

For each builder (plummer, eff, king, limepy and fractal) the script builds one cluster at a fixed key and draws

1. the stars projected on the x-y plane (log-scaled 2D histogram);
2. the mass density in logarithmic radial shells, against the model's density;
3. the 1D velocity dispersion in the same shells, against the model's
   (isotropic Jeans / distribution-function) dispersion;
4. the mass function dN/dlog10 m, against the IMF the builder recorded.

Radii are measured about the origin, which is where every builder puts the
model centre. Writes docs/figures/gallery/<builder>.png and the markdown snippet
docs/generated/gallery.md that docs/gallery.md includes.

    python docs/scripts/gallery.py [--n 30000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

jax.config.update("jax_enable_x64", True)

import progenax  # noqa: E402
from progenax.diagnostics import half_mass_radius, virial_ratio  # noqa: E402
from progenax.imf import PowerLawIMF  # noqa: E402
from progenax.kinematics.king_df import mean_square_speed  # noqa: E402
from progenax.profiles.eff import eff_density, eff_scale_radius, eff_velocity_dispersion  # noqa: E402
from progenax.profiles.plummer import (  # noqa: E402
    plummer_density,
    plummer_scale_radius,
    plummer_velocity_dispersion,
)

DOCS = Path(__file__).resolve().parents[1]
FIGURES = DOCS / "figures" / "gallery"
SNIPPET = DOCS / "generated" / "gallery.md"
G = float(progenax.G_PHYSICAL)


# -- models: functions r [pc] -> (rho [Msun/pc^3], sigma_1D [km/s]) ---------------
def plummer_model(params: dict, total_mass: float):
    a = float(plummer_scale_radius(params["r_h"]))

    def model(r):
        return (
            np.asarray(plummer_density(r, total_mass, a)),
            np.asarray(plummer_velocity_dispersion(r, total_mass, a, G)),
        )

    return model, f"Plummer, a = {a:.3g} pc"


def eff_model(params: dict, total_mass: float):
    gamma, r_h, r_t = params["gamma"], params["r_h"], params.get("r_t")
    a = float(eff_scale_radius(r_h, gamma, r_t))

    def model(r):
        return (
            np.asarray(eff_density(r, gamma, a, total_mass, r_t)),
            np.asarray(eff_velocity_dispersion(r, gamma, a, total_mass, G, r_t)),
        )

    return model, f"EFF $\\gamma$ = {gamma:g}, a = {a:.3g} pc (Jeans $\\sigma$)"


def lowered_isothermal_model(params: dict, total_mass: float, *, W0: float, g: float):
    """Solved model scaled as the builders scale it: 3D half-mass radius r_h, total
    mass M, and velocity scale s from G M / (s^2 L) = 9 m_t / (4 pi)."""
    p = progenax.solve_king_profile(W0, g)
    L = params["r_h"] / float(p.r_h)  # pc per King radius
    m_t = float(p.total_mass)
    r_nodes = np.asarray(p.r) * L
    rho_nodes = np.asarray(p.density) * total_mass / (m_t * L**3)
    s2 = 4.0 * np.pi * G * total_mass / (9.0 * m_t * L)
    sigma_nodes = np.sqrt(s2 * np.asarray(mean_square_speed(p.W, g)) / 3.0)
    r_t = float(p.r_t) * L

    def model(r):
        r = np.asarray(r)
        inside = r < r_t
        rho = np.where(inside, np.interp(r, r_nodes, rho_nodes), 0.0)
        sigma = np.where(inside, np.interp(r, r_nodes, sigma_nodes), 0.0)
        return rho, sigma

    return model, f"$W_0$ = {W0:g}, g = {g:g} model (DF), $r_t$ = {r_t:.3g} pc"


def fractal_model(params: dict, total_mass: float):
    """Fractal radii are remapped onto a Plummer sphere; its velocities are the
    fractal's own (scaled to Q), so only the density has a model curve."""
    model, _ = plummer_model(params, total_mass)

    def density_only(r):
        rho, _ = model(r)
        return rho, None

    return density_only, "Plummer density (radial remap); no $\\sigma$ model"


# -- measurements ----------------------------------------------------------------
def shells(r: np.ndarray, n_shells: int) -> np.ndarray:
    """Log-spaced shell edges from the radius of the 10th star to the 99.9th
    percentile (beyond it shells hold a handful of stars)."""
    rs = np.sort(r)
    inner = rs[min(9, rs.size - 1)]
    outer = np.quantile(rs, 0.999)
    return np.geomspace(inner, outer, n_shells + 1)


def measure(r, v, m, w, edges):
    """Mass density and number-weighted 1D velocity dispersion per shell, with
    Poisson and Gaussian (sigma / sqrt(6 N)) errors."""
    idx = np.digitize(r, edges) - 1
    k = len(edges) - 1
    ok = (idx >= 0) & (idx < k)
    count = np.bincount(idx[ok], minlength=k).astype(float)
    mass = np.bincount(idx[ok], weights=(m * w)[ok], minlength=k)
    volume = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    rho = mass / volume
    sw = np.bincount(idx[ok], weights=w[ok], minlength=k)
    mean_v = np.stack([np.bincount(idx[ok], weights=(w * v[:, j])[ok], minlength=k) for j in range(3)], 1)
    mean_v /= np.maximum(sw, 1e-300)[:, None]
    dv2 = np.sum((v[ok] - mean_v[idx[ok]]) ** 2, axis=1)
    var = np.bincount(idx[ok], weights=w[ok] * dv2, minlength=k) / np.maximum(sw, 1e-300) / 3.0
    sigma = np.sqrt(var)
    keep = count >= 5
    centres = np.sqrt(edges[1:] * edges[:-1])
    return (
        centres[keep],
        rho[keep],
        rho[keep] / np.sqrt(count[keep]),
        sigma[keep],
        sigma[keep] / np.sqrt(6.0 * count[keep]),
    )


def draw(name: str, call: str, ic, model, model_label: str, path: Path) -> dict:
    s = ic.state
    x = np.asarray(s.positions, np.float64)
    v = np.asarray(s.velocities, np.float64)
    m = np.asarray(s.masses, np.float64)
    w = np.asarray(ic.weights, np.float64)
    r = np.sqrt(np.sum(x**2, axis=1))
    r_h = float(half_mass_radius(s.positions, s.masses))
    # Exact pairwise W (O(n^2), chunked): the reference, whatever estimator the builder scaled with.
    q = float(virial_ratio(s.positions, s.velocities, s.masses, method="exact"))

    fig = Figure(figsize=(11.0, 8.6), layout="constrained")
    (ax_xy, ax_rho), (ax_sig, ax_mf) = fig.subplots(2, 2)

    # 1. projected positions
    lim = 4.0 * r_h
    edges2 = np.linspace(-lim, lim, 201)
    h, _, _ = np.histogram2d(x[:, 0], x[:, 1], bins=(edges2, edges2), weights=w)
    h = np.where(h > 0, h, np.nan)
    im = ax_xy.imshow(
        h.T,
        origin="lower",
        extent=(-lim, lim, -lim, lim),
        cmap="magma",
        norm=LogNorm(vmin=max(np.nanmin(h), 0.5), vmax=np.nanmax(h)),
        interpolation="nearest",
    )
    fig.colorbar(im, ax=ax_xy, fraction=0.046, pad=0.03, label="stars per pixel")
    ax_xy.set_facecolor("black")
    ax_xy.set_aspect("equal")
    ax_xy.set_xlabel("x [pc]")
    ax_xy.set_ylabel("y [pc]")
    ax_xy.set_title("projected positions (x-y)")

    # 2. density and 3. velocity dispersion
    edges = shells(r, 28)
    rc, rho, rho_err, sig, sig_err = measure(r, v, m, w, edges)
    grid = np.geomspace(edges[0], edges[-1], 300)
    rho_model, sig_model = model(grid)
    ax_rho.errorbar(rc, rho, yerr=rho_err, fmt="o", ms=3.5, color="C0", capsize=0, label="measured")
    ax_rho.plot(grid, np.where(rho_model > 0, rho_model, np.nan), color="C3", lw=1.5, label=model_label)
    ax_rho.set_xscale("log")
    ax_rho.set_yscale("log")
    ax_rho.set_xlabel("r [pc]")
    ax_rho.set_ylabel(r"$\rho$ [M$_\odot$ pc$^{-3}$]")
    ax_rho.set_title("density profile")
    ax_sig.errorbar(rc, sig, yerr=sig_err, fmt="o", ms=3.5, color="C0", capsize=0, label="measured")
    if sig_model is not None:
        ax_sig.plot(grid, np.where(sig_model > 0, sig_model, np.nan), color="C3", lw=1.5, label="model")
    ax_sig.set_xscale("log")
    ax_sig.set_xlabel("r [pc]")
    ax_sig.set_ylabel(r"$\sigma_{1D}$ [km/s]")
    ax_sig.set_title("velocity dispersion")
    for ax, loc in ((ax_rho, "lower left"), (ax_sig, "best")):
        ax.axvline(r_h, color="0.6", ls=":", lw=1, label=f"$r_h$ = {r_h:.3g} pc (measured)")
        ax.legend(fontsize=8, loc=loc)

    # 4. mass function
    lo, hi = float(m.min()), float(m.max())
    medges = np.geomspace(lo, hi * (1 + 1e-9), 31)
    dlog = np.diff(np.log10(medges))
    count, _ = np.histogram(m, bins=medges, weights=w)
    raw, _ = np.histogram(m, bins=medges)
    mc = np.sqrt(medges[1:] * medges[:-1])
    keep = raw > 0
    dn = count[keep] / dlog[keep]
    ax_mf.errorbar(mc[keep], dn, yerr=dn / np.sqrt(raw[keep]), fmt="o", ms=3.5, color="C0", capsize=0, label="sampled")
    params = dict(ic.params)
    imf = PowerLawIMF(np.asarray(params["imf_breaks"], np.float64), np.asarray(params["imf_slopes"], np.float64))
    mgrid = np.geomspace(float(imf.m_min), float(imf.m_max), 300)
    slopes = ", ".join(f"{s_:.3g}" for s_ in np.asarray(params["imf_slopes"]).ravel())
    ax_mf.plot(
        mgrid,
        w.sum() * mgrid * np.log(10.0) * np.asarray(imf.pdf(mgrid)),
        color="C3",
        lw=1.5,
        label=f"IMF, slopes {slopes}",
    )
    ax_mf.set_xscale("log")
    ax_mf.set_yscale("log")
    ax_mf.set_xlabel(r"m [M$_\odot$]")
    ax_mf.set_ylabel(r"dN / d$\log_{10}$m")
    ax_mf.set_title("mass function")
    ax_mf.legend(fontsize=8, loc="lower left")

    fig.suptitle(f"progenax.{call}", fontsize=11, family="monospace")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    return {"n": ic.n, "mass": float(m.sum()), "r_h": r_h, "Q": q}


def cases(n: int):
    """(builder name, call text, builder, kwargs, model factory) for each builder."""
    out = [
        ("plummer_builder", progenax.plummer_builder, dict(r_h=1.0, alpha=2.3, Q=0.5), plummer_model),
        ("eff_builder", progenax.eff_builder, dict(gamma=3.0, r_h=1.0, r_t=20.0, Q=0.5), eff_model),
        (
            "king_builder",
            progenax.king_builder,
            dict(W0=6.0, r_h=1.0),
            lambda p, M: lowered_isothermal_model(p, M, W0=6.0, g=1.0),
        ),
        (
            "limepy_builder",
            progenax.limepy_builder,
            dict(W0=5.0, g=2.0, r_h=1.0),
            lambda p, M: lowered_isothermal_model(p, M, W0=5.0, g=2.0),
        ),
        ("fractal_builder", progenax.fractal_builder, dict(D=2.0, r_h=1.0, Q=0.5), fractal_model),
    ]
    for name, build, kwargs, factory in out:
        text = ", ".join(f"{k}={v}" for k, v in {"n": n, **kwargs}.items())
        yield name, f"{name}(key, {text})", build, kwargs, factory


def scalar_params(ic) -> dict:
    return {k: float(np.asarray(v)) for k, v in dict(ic.params).items() if not isinstance(v, str) and np.ndim(v) == 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    key = jax.random.PRNGKey(args.seed)
    lines = [
        "<!-- Generated by docs/scripts/gallery.py; do not edit by hand. -->",
        "",
    ]
    for name, call, build, kwargs, factory in cases(args.n):
        t0 = time.perf_counter()
        ic = build(key, n=args.n, **kwargs)
        params = scalar_params(ic)
        model, label = factory(params, float(np.asarray(ic.state.masses).sum()))
        stats = draw(name, call, ic, model, label, FIGURES / f"{name}.png")
        print(f"{name}: {time.perf_counter() - t0:.1f} s")
        asked_q = kwargs.get("Q")
        lines += [
            f"## `{name}`",
            "",
            "```python",
            f"ic = progenax.{call}",
            "```",
            "",
            f"![{name}](figures/gallery/{name}.png)",
            "",
            "| N | total mass [Msun] | r_h measured [pc] (asked) | Q, exact pairwise W (asked) |",
            "| --- | --- | --- | --- |",
            f"| {stats['n']:,} | {stats['mass']:,.0f} | {stats['r_h']:.3f} ({kwargs['r_h']:g}) | "
            f"{stats['Q']:.3f} ({'equilibrium DF' if asked_q is None else f'{asked_q:g}'}) |",
            "",
        ]
    SNIPPET.parent.mkdir(parents=True, exist_ok=True)
    SNIPPET.write_text("\n".join(lines))
    print(f"wrote {SNIPPET} and {FIGURES}/*.png")


if __name__ == "__main__":
    main()
