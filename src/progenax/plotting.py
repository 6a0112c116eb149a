r"""Quick-look figure of a built cluster: where the stars are, how dense, how heavy.

`quicklook(ic, path)` writes a PNG with three panels, all in physical units
(pc, Msun; a cluster in Henon units is converted first):

1. the stars projected on the x-y plane (points for small N, a log-scaled 2D
   histogram for large N);
2. the density profile $\rho(r)$ measured in logarithmic radial shells about the
   density centre (shrinking spheres; the centre of mass wanders with the few
   heaviest stars), with Poisson error bars, against the model's analytic profile
   (`ic.model.density`; skipped for models without one, fractal say);
3. the mass function $dN/d\log_{10} m$ in logarithmic mass bins, with the IMF the
   cluster was drawn from over it when it was a power law;
4. only when the cluster was built with an Osipkov-Merritt radius (`ra` in
   `ic.params`): the anisotropy $\beta(r) = 1 - \langle v_t^2\rangle/(2\langle
   v_r^2\rangle)$ in radial bins holding equal numbers of stars, with its
   standard error (`progenax.diagnostics.anisotropy_profile`), against the
   model's $\beta(r) = r^2/(r^2 + r_a^2)$ (when the model gives $r_a$ in pc);
5. only when it was built rotating (`rotation` non-zero in `ic.params`): the mean
   $v_\phi$ in cylindrical bins of $R$ about the z axis, with its standard error
   (`progenax.diagnostics.rotation_curve`).

Masses are weighted by the membership weights. Matplotlib's object API is used
with the Agg canvas, so no display and no pyplot state are involved.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .diagnostics.centre import density_centre
from .diagnostics.kinematics import anisotropy_profile, rotation_curve
from .imf import ChabrierIMF, PowerLawIMF
from .io._paths import atomic_write
from .io.gadget import is_gas
from .models import NoAnalyticFormError, prepared_density
from .sph.relax import adaptive_density, model_density, smoothing_lengths, tracer_masses
from .validation import deferred_checks

_POINTS_MAX_N = 5_000
"""Up to this many stars panel 1 draws points; above it, a 2D histogram."""

_PANEL_WIDTH = 15.5 / 3
"""Inches per panel: the three-panel figure is 15.5 x 4.8 in."""


def save_png(fig, path: str | os.PathLike, *, dpi: int = 110, **savefig_kwargs) -> Path:
    """Save a matplotlib figure as a PNG at `path` atomically (through a temporary
    file renamed over it: a failed or interrupted save leaves the old figure)."""
    path = Path(path)
    with atomic_write(path) as (temp,):
        fig.savefig(temp, dpi=dpi, format="png", **savefig_kwargs)
    return path


def _numpy_cluster(ic) -> dict[str, Any]:
    phys = ic.to_physical()
    s = phys.state
    x = np.asarray(s.positions, dtype=np.float64)
    v = np.asarray(s.velocities, dtype=np.float64)
    m = np.asarray(s.masses, dtype=np.float64)
    w = np.asarray(phys.weights, dtype=np.float64)
    mw = m * w
    centre = density_centre(x, w) if x.shape[0] >= 100 else (mw[:, None] * x).sum(axis=0) / mw.sum()
    r = np.sqrt(((x - centre) ** 2).sum(axis=1))
    what = "particles" if is_gas(ic) else "stars"
    return {"x": x - centre, "v": v, "m": m, "w": w, "mw": mw, "r": r, "what": what}


def _half_mass_radius(r: np.ndarray, mw: np.ndarray) -> float:
    order = np.argsort(r)
    cum = np.cumsum(mw[order])
    return float(np.interp(0.5 * cum[-1], cum, r[order]))


@deferred_checks
def _imf_curve(imf, m):
    """dN/dm of `imf` at the masses `m`, in one program (eager: 45 small
    compiles, about 1 s)."""
    return imf.pdf(m)


def _analytic_density(ic, total_mass: float, r: np.ndarray):
    """rho at the radii `r` (Msun / pc^3) from `ic.model`, with a label, or
    (None, None) for a model without an analytic density."""
    try:
        model, rho = prepared_density(ic.model, jax.device_put(total_mass), jax.device_put(r))
    except NoAnalyticFormError:
        return None, None
    return np.asarray(rho, dtype=np.float64), model_label(model)


def model_label(model) -> str:
    """ "plummer, r_h = 1 pc": the model's name and its scalar parameters with units."""
    parts = [model.name]
    for p in model.PARAMETERS:
        value = None if p.static else getattr(model, p.name, None)
        if value is not None and np.ndim(value) == 0:
            parts.append(f"{p.name} = {float(value):.3g}" + (f" {p.unit}" if p.unit else ""))
    return ", ".join(parts)


def _imf_of(ic):
    """The IMF the builder recorded in `ic.params`, with a label: a power law
    (`imf_breaks`, `imf_slopes`) or Chabrier's (`imf_m_c`, ...); (None, None)
    when there is none (equal masses, a file of unknown origin)."""

    params = dict(ic.params)
    chabrier = ChabrierIMF.from_record(params)
    if chabrier is not None:
        return chabrier, f"Chabrier IMF, high-mass slope {float(chabrier.alpha):.3g}"
    breaks, slopes = params.get("imf_breaks"), params.get("imf_slopes")
    if breaks is None or slopes is None:
        return None, None
    imf = PowerLawIMF(np.asarray(breaks, np.float64), np.asarray(slopes, np.float64))
    slope_text = ", ".join(f"{s:.3g}" for s in np.asarray(slopes).ravel())
    return imf, f"power-law IMF, slopes {slope_text}"


def _panel_positions(ax, c: dict[str, Any], r_h: float) -> None:
    from matplotlib.colors import LogNorm  # matplotlib only when a figure is drawn (start-up time)

    lim = 4.0 * r_h if r_h > 0 else 1.0  # every star at the centre: r_h = 0
    x, y = c["x"][:, 0], c["x"][:, 1]
    n = x.shape[0]
    if n <= _POINTS_MAX_N:
        size = 4.0 if n <= 1000 else 1.5
        ax.scatter(x, y, s=size, c="k", alpha=0.5, linewidths=0, rasterized=True)
    else:
        bins = int(np.clip(np.sqrt(n) / 1.2, 60, 250))
        edges = np.linspace(-lim, lim, bins + 1)
        h, _, _ = np.histogram2d(x, y, bins=(edges, edges), weights=c["w"])
        h = np.where(h > 0, h, np.nan)
        im = ax.imshow(
            h.T,
            origin="lower",
            extent=(-lim, lim, -lim, lim),
            norm=LogNorm(vmin=max(np.nanmin(h), 0.5), vmax=np.nanmax(h)),
            cmap="magma",
            interpolation="nearest",
        )
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.03, label=f"{c['what']} per pixel")
        ax.set_facecolor("black")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.set_xlabel("x [pc]")
    ax.set_ylabel("y [pc]")
    ax.set_title("projected positions (x-y)")


def _panel_density(ax, ic, c: dict[str, Any], r_h: float) -> None:
    r, mw = c["r"], c["mw"]
    positive = r > 0
    order = np.argsort(r[positive])
    r_sorted = r[positive][order]
    if r_sorted.size < 2 or r_sorted[0] == r_sorted[-1]:
        # One star, or every star at the density centre: no profile to measure.
        ax.text(0.5, 0.5, "too few stars off the centre\nfor a density profile", ha="center", va="center")
        ax.set_axis_off()
        return
    # Inner edge: the radius holding ~10 stars, so the first shell is not empty
    # noise; outer edge: the outermost star.
    inner = r_sorted[min(9, r_sorted.size - 1)]
    outer = r_sorted[-1]
    n_bins = int(np.clip(np.sqrt(r_sorted.size) / 2.5, 8, 30))
    edges = np.geomspace(inner, outer * (1 + 1e-9), n_bins + 1)
    mass, _ = np.histogram(r, bins=edges, weights=mw)
    count, _ = np.histogram(r, bins=edges)
    volume = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    centres = np.sqrt(edges[1:] * edges[:-1])
    keep = count > 0
    rho = mass[keep] / volume[keep]
    err = rho / np.sqrt(count[keep])  # Poisson: relative error 1/sqrt(stars in shell)
    ax.errorbar(centres[keep], rho, yerr=err, fmt="o", ms=3.5, color="C0", capsize=0, label="measured")
    grid = np.geomspace(edges[0], edges[-1], 200)
    model, label = _analytic_density(ic, float(mw.sum()), grid)
    if model is not None:
        ax.plot(grid, np.where(model > 0, model, np.nan), color="C3", lw=1.5, label=label)
    ax.axvline(r_h, color="0.6", ls=":", lw=1, label=f"$r_h$ = {r_h:.3g} pc (measured)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("r [pc]")
    ax.set_ylabel(r"$\rho$ [M$_\odot$ pc$^{-3}$]")
    ax.set_title("density profile (about the density centre)")
    ax.legend(fontsize=8, loc="lower left")


def _panel_mass_function(ax, ic, c: dict[str, Any], imf) -> None:
    m, w = c["m"], c["w"]
    lo, hi = float(m.min()), float(m.max())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"m [M$_\odot$]")
    ax.set_ylabel(r"dN / d$\log_{10}$m")
    ax.set_title("mass function")
    if hi <= lo * (1 + 1e-6):
        ax.axvline(lo, color="C0", lw=2, label=f"equal masses, m = {lo:.4g} M$_\\odot$")
        ax.set_xlim(lo / 3, lo * 3)
        ax.set_yscale("linear")
        ax.set_yticks([])
        ax.set_ylabel("")
        ax.legend(fontsize=8, loc="upper right")
        return
    n_bins = int(np.clip(np.sqrt(m.size) / 3, 8, 30))
    edges = np.geomspace(lo, hi * (1 + 1e-9), n_bins + 1)
    dlog = np.diff(np.log10(edges))
    count, _ = np.histogram(m, bins=edges, weights=w)
    raw, _ = np.histogram(m, bins=edges)
    centres = np.sqrt(edges[1:] * edges[:-1])
    keep = raw > 0
    dndlog = count[keep] / dlog[keep]
    ax.errorbar(
        centres[keep],
        dndlog,
        yerr=dndlog / np.sqrt(raw[keep]),
        fmt="o",
        ms=3.5,
        color="C0",
        capsize=0,
        label="sampled",
    )
    imf, label = (imf, "IMF") if imf is not None else _imf_of(ic)
    if imf is not None:
        m_lo, m_hi = float(imf.m_min), float(imf.m_max)
        grid = np.geomspace(m_lo, m_hi, 300)
        # dN/dlog10 m = N m ln(10) xi(m), with xi normalised to one star.
        curve = float(w.sum()) * grid * np.log(10.0) * np.asarray(_imf_curve(imf, jax.device_put(grid)))
        ax.plot(grid, curve, color="C3", lw=1.5, label=label)
    ax.legend(fontsize=8, loc="lower left")


def _scalar_param(ic, name: str) -> float | None:
    """`ic.params[name]` as a float, or None when it is absent, None or not a scalar."""
    value = dict(ic.params).get(name)
    if value is None or isinstance(value, str) or np.ndim(value) != 0:
        return None
    return float(np.asarray(value))


def _kinematic_bins(radius: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Edges of bins holding equal numbers of stars out to the 95th percentile
    radius (beyond, too few stars per bin), 4 to 12 bins (~36 stars a bin at
    least, so beta's delta-method error holds)."""
    radius = radius[w > 0]
    n_bins = int(np.clip(np.sqrt(radius.size) / 6, 4, 12))
    edges = np.quantile(radius, np.linspace(0.0, 0.95, n_bins + 1))
    edges[0] = 0.0
    return edges


def _velocities_in_frame(c: dict[str, Any]) -> np.ndarray:
    """Velocities in the mass-weighted centre-of-mass frame (a built cluster's own)."""
    return c["v"] - (c["mw"][:, None] * c["v"]).sum(axis=0) / c["mw"].sum()


def _panel_anisotropy(ax, ic, c: dict[str, Any], r_h: float) -> None:
    p = anisotropy_profile(c["x"], _velocities_in_frame(c), c["mw"], _kinematic_bins(c["r"], c["mw"]))
    ax.errorbar(p.radius, p.beta, yerr=p.beta_err, fmt="o", ms=3.5, color="C0", capsize=0, label="measured")
    ra = ic.model.anisotropy_radius
    if ra is not None:
        ra = float(np.asarray(ra))
        grid = np.linspace(0.0, p.edges[-1], 200)
        label = f"model $r^2/(r^2 + r_a^2)$, $r_a$ = {ra:.3g} pc"
        ax.plot(grid, grid**2 / (grid**2 + ra**2), color="C3", lw=1.5, label=label)
    ax.axhline(0.0, color="0.6", ls=":", lw=1)
    ax.axvline(r_h, color="0.6", ls=":", lw=1, label=f"$r_h$ = {r_h:.3g} pc (measured)")
    ax.set_xlim(0.0, p.edges[-1])
    ax.set_xlabel("r [pc]")
    ax.set_ylabel(r"$\beta = 1 - \langle v_t^2\rangle / 2\langle v_r^2\rangle$")
    ax.set_title("velocity anisotropy")
    ax.legend(fontsize=8, loc="upper left")


def _panel_rotation(ax, ic, c: dict[str, Any], r_h: float) -> None:
    R = np.hypot(c["x"][:, 0], c["x"][:, 1])
    curve = rotation_curve(c["x"], _velocities_in_frame(c), c["mw"], _kinematic_bins(R, c["mw"]))
    ax.errorbar(curve.radius, curve.v_phi, yerr=curve.v_phi_err, fmt="o", ms=3.5, color="C0", capsize=0)
    ax.axhline(0.0, color="0.6", ls=":", lw=1)
    ax.axvline(r_h, color="0.6", ls=":", lw=1)
    k, scale = _scalar_param(ic, "rotation"), _scalar_param(ic, "rotation_scale") or 0.0
    ax.set_xlim(0.0, curve.edges[-1])
    ax.set_xlabel("R [pc] (cylindrical, about z)")
    ax.set_ylabel(r"mean $v_\phi$ [km/s]")
    ax.set_title(f"rotation: k = {k:.3g}, $L_0$ = {scale:.3g} pc km/s")


def _quicklook_figure(ic, imf=None):
    """The quick-look `Figure` (3 panels, plus anisotropy and rotation when set)."""
    from matplotlib.figure import Figure  # matplotlib only when a figure is drawn (start-up time)

    c = _numpy_cluster(ic)
    r_h = _half_mass_radius(c["r"], c["mw"])
    extra = []
    if _scalar_param(ic, "ra") is not None:
        extra.append(_panel_anisotropy)
    if _scalar_param(ic, "rotation"):
        extra.append(_panel_rotation)
    fig = Figure(figsize=(_PANEL_WIDTH * (3 + len(extra)), 4.8), layout="constrained")
    axes = fig.subplots(1, 3 + len(extra))
    _panel_positions(axes[0], c, r_h)
    _panel_density(axes[1], ic, c, r_h)
    _panel_mass_function(axes[2], ic, c, imf)
    for ax, panel in zip(axes[3:], extra):
        panel(ax, ic, c, r_h)
    n = c["m"].shape[0]
    params = ", ".join(
        f"{k} = {float(np.asarray(v)):.3g}"
        for k, v in dict(ic.params).items()
        if not isinstance(v, str) and v is not None and np.asarray(v).ndim == 0
    )
    title = f"{ic.model.name}: N = {n}, M = {c['mw'].sum():.4g} M$_\\odot$"
    # Many parameters (a gas cloud records twelve) go on lines of their own rather than off the figure.
    fig.suptitle(title + ("\n" + textwrap.fill(params, 40 * (3 + len(extra))) if params else ""))
    return fig


def quicklook(ic, path: str | os.PathLike, *, imf=None, dpi: int = 110) -> Path:
    """Write a PNG overview of `ic` to `path` and return the path.

    Panels: projected x-y positions, the density profile in log radial shells
    against the model's analytic profile, and the mass function against the IMF;
    then beta(r) when the cluster has an Osipkov-Merritt `ra`, and the mean
    v_phi(R) when it rotates. See the module docstring.

    **Arguments:**

    - `ic`: an `InitialConditions` (any units; plotted in pc and Msun).
    - `path`: the PNG to write.
    - `imf`: the IMF the masses were drawn from (`progenax.imf.PowerLawIMF`,
      `ChabrierIMF`, anything with `pdf`, `m_min` and `m_max`), to draw over the
      mass function. By default the one the builder recorded in `ic.params`
      (a power law's `imf_breaks`/`imf_slopes`, Chabrier's `imf_m_c`, ...); none
      for a file of unknown origin. Equal masses draw a line.
    - `dpi`: resolution of the PNG.
    """
    return save_png(_quicklook_figure(ic, imf), Path(path), dpi=dpi)


def relax_before_after(
    before, after, path: str | os.PathLike, *, eta: float = 1.2, dpi: int = 110, target=None
) -> Path:
    r"""Write a PNG comparing a cluster before and after `progenax.relax`.

    Left: the relative deviation of the SPH density from the model density,
    $\rho_\mathrm{SPH}/\rho_\mathrm{model} - 1$, rms in log radial bins,
    before and after (`target`: the density relaxed towards, default the
    model's). Middle and right: a projected slice ($|z| < r_h / 4$) of the
    positions before and after. Both clusters in physical units.
    """
    from matplotlib.figure import Figure  # matplotlib only when a figure is drawn (start-up time)

    path = Path(path)
    before, after = before.to_physical(), after.to_physical()
    target = model_density(before) if target is None else target
    fig = Figure(figsize=(15.5, 4.8), layout="constrained")
    ax_err, ax_b, ax_a = fig.subplots(1, 3)
    r_h = _half_mass_radius(np.linalg.norm(np.asarray(before.state.positions), axis=1), np.asarray(before.state.masses))
    for ic, label, color in ((before, "before", "C0"), (after, "after", "C3")):
        x = ic.state.positions
        m = tracer_masses(ic)
        h, rho_t, live = smoothing_lengths(x, m, target, eta)
        r = np.linalg.norm(np.asarray(x), axis=1)
        # Densities where relaxation works (live) and inside 3 r_h only: a
        # far-out star's kernel ball holds much of the cluster.
        shown = np.asarray(live) | (r < 3 * r_h)
        rel = np.asarray(adaptive_density(x, m, h, query=shown) / rho_t - 1.0)
        r, rel = r[shown], rel[shown]
        edges = np.geomspace(max(np.percentile(r, 0.5), 1e-6), np.percentile(r, 99.5), 25)
        idx = np.digitize(r, edges)
        centres, rms = [], []
        for k in range(1, len(edges)):
            sel = idx == k
            if sel.sum() >= 10:
                centres.append(np.sqrt(edges[k - 1] * edges[k]))
                rms.append(np.sqrt(np.mean(rel[sel] ** 2)))
        inside = r < 3 * r_h
        total = np.sqrt(np.mean(rel[inside] ** 2))
        ax_err.plot(centres, rms, "o-", color=color, label=f"{label}: rms {100 * total:.2f}% inside 3 r_h")
    ax_err.set(xscale="log", yscale="log", xlabel="r [pc]", ylabel=r"rms of $\rho_{SPH}/\rho_{model} - 1$")
    ax_err.axvline(3 * r_h, color="0.6", ls=":", lw=1)
    ax_err.legend(fontsize=8)
    for ax, ic, label in ((ax_b, before, "before"), (ax_a, after, "after")):
        x = np.asarray(ic.state.positions)
        sel = (np.abs(x[:, 2]) < r_h / 4) & (np.abs(x[:, 0]) < 2 * r_h) & (np.abs(x[:, 1]) < 2 * r_h)
        ax.scatter(x[sel, 0], x[sel, 1], s=1, color="k", alpha=0.6, linewidths=0)
        ax.set(
            aspect="equal",
            xlim=(-2 * r_h, 2 * r_h),
            ylim=(-2 * r_h, 2 * r_h),
            xlabel="x [pc]",
            ylabel="y [pc]",
            title=f"{label}: slice |z| < r_h/4 ({int(sel.sum())} stars)",
        )
    fig.suptitle(f"{before.model.name}: N = {before.n}, relaxation")
    return save_png(fig, path, dpi=dpi)
