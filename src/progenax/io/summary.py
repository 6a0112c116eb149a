"""Human-readable summaries of an `InitialConditions` (used by `progenax info`).

The figures a summary prints (total mass, half-mass radius, Q, the binaries'
statistics) are measured by `summary_figures`. Measuring Q costs one potential
energy, tens of seconds for a clumpy cluster of a million stars (the nested
mesh). A fractal or gravoturbulent builder has summed that W already to scale
its velocities, and `summary_figures` recalls it for the arrays the builder
returned (`progenax.diagnostics.known_energy`). The command line also stores
the figures in the file it writes
(`progenax.io.write(..., summary=)`, our own schema) and `progenax info` reuses
them (`progenax.io.native.stored_summary`) when their `digest`, a SHA-256 of
everything they depend on, matches the cluster read back: a file changed by
another program is measured again.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._compile import mesh_compiles_fast, run_once_jit
from .._version import __version__
from ..binaries import binding_energy_distribution
from ..diagnostics import density_centre, half_mass_radius, virial_ratio
from ..diagnostics.energy import resolved_method
from ..diagnostics.known_energy import recall_potential_energy
from .gadget import is_gas

_FIGURES = ("n_eff", "weighted", "mass", "r_h", "Q")
_BINARY_FIGURES = ("hard", "median_log_binding", "systems_Q")


def summary_digest(ic) -> str:
    """SHA-256 (hex) of what the summary figures of `ic` depend on: positions,
    velocities, masses, weights (dtype, shape and bytes) and binary pairs (as
    int64), the unit system, the potential-energy method and the progenax
    version."""
    digest = hashlib.sha256()
    s = ic.state
    pairs = np.zeros((0, 2)) if ic.pairs is None else ic.pairs
    for array in (s.positions, s.velocities, s.masses, ic.weights, np.asarray(pairs, dtype=np.int64)):
        a = np.ascontiguousarray(np.asarray(array))
        digest.update(f"{a.dtype.str}{a.shape};".encode())
        digest.update(a)
    u = ic.units
    scales = np.asarray([u.length_pc, u.mass_msun, u.velocity_kms], dtype=np.float64)
    digest.update(f"{u.name};{ic.energy_method};{__version__};".encode())
    digest.update(scales.tobytes())
    return digest.hexdigest()


def summary_figures(ic, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures `format_summary` and `summary_line` print, as a dict.

    `stored` (figures kept with a file, or None) is returned as is when its
    `digest` is `summary_digest(ic)` and it holds every figure below;
    otherwise the figures are measured:

    - `n_eff`, `weighted`, `mass`: the sum of the membership weights, whether
      any is not 1, the weighted total mass;
    - `r_h`: the 3D half-mass radius about the density centre (robust to the
      few far-out stars of heavy-tailed profiles);
    - `Q`: the virial ratio T/|W|, W the exact pair sum up to 20,000 stars,
      above it the spherical estimate (shells about the density centre) for a
      cluster of a spherical model and the nested mesh for any other
      (`InitialConditions.energy_method`); a mesh W the builder of these very
      arrays summed is recalled, not summed again
      (`progenax.diagnostics.known_energy`);
    - with binaries, `hard` (the fraction of pairs with E_b > <m> sigma^2),
      `median_log_binding` (median of log10(E_b / <m> sigma^2)) and
      `systems_Q` (Q of the systems, each binary at its centre of mass);
    - `digest`: `summary_digest(ic)`.

    Masses are weighted by the membership weights throughout.
    """
    digest = summary_digest(ic)
    wanted = _FIGURES + (_BINARY_FIGURES if _has_pairs(ic) else ())
    if stored is not None and stored.get("digest") == digest and all(name in stored for name in wanted):
        return dict(stored)
    s = ic.state
    centre = np.asarray(density_centre(s.positions, ic.weights), s.positions.dtype)
    method = resolved_method(ic.energy_method, s.masses.shape[0])
    w = recall_potential_energy(s.positions, s.masses, ic.weights, method)  # the builder's, if it summed one
    measured = _measures(s.positions, s.velocities, s.masses, ic.weights, centre, ic.units, w, method=method)
    figures = {name: float(value) for name, value in measured.items() if name != "weighted"}
    figures["weighted"] = bool(measured["weighted"])
    return {**figures, **_binary_figures(ic), "digest": digest}


def _measures_compile_fast(positions, velocities, masses, weights, centre, units, w, method) -> bool:
    """Whether `_measures` takes the run-once options: not when its Q sums the
    nested-mesh W of many stars (`progenax._compile`)."""
    return w is not None or method != "mesh" or mesh_compiles_fast(positions.shape[0])


@functools.partial(run_once_jit, static_argnames=("method",), fast_compile=_measures_compile_fast)
def _measures(positions, velocities, masses, weights, centre, units, w, method):
    """`summary_figures`' sums, half-mass radius and Q in one program (eager,
    each operation would be a small program of its own to trace and look up;
    G too, from `units`). `w`: W when known (`diagnostics.known_energy`), else
    None and summed by `method`."""
    m = masses * weights
    G = jnp.asarray(units.G, positions.dtype)
    return {
        "n_eff": jnp.sum(weights),
        "weighted": jnp.any(weights != 1),
        "mass": jnp.sum(m),
        "r_h": half_mass_radius(positions, m, centre=centre),
        "Q": virial_ratio(positions, velocities, m, G=G, method=method, centre=centre, w=w),
    }


def _has_pairs(ic) -> bool:
    """Whether `ic` holds at least one binary (the binaries' figures exist)."""
    return ic.pairs is not None and int(ic.pairs.shape[0]) > 0


def _binary_figures(ic) -> dict[str, float]:
    """`hard`, `median_log_binding` and `systems_Q` of `ic`'s binaries (none without
    pairs or with zero pairs)."""
    if not _has_pairs(ic):
        return {}
    s = ic.state
    m = s.masses * ic.weights
    # x = log10(E_b / <m> sigma^2) per pair: hard pairs have x > 0 (one elements pass for both figures).
    _, _, x = binding_energy_distribution(s.positions, s.velocities, m, ic.pairs, ic.units.G)
    x = np.asarray(x)
    systems = ic.systems()
    q_systems = virial_ratio(
        systems.positions, systems.velocities, systems.masses, G=ic.units.G, method=ic.energy_method
    )
    return {"hard": float(np.mean(x > 0)), "median_log_binding": float(np.median(x)), "systems_Q": float(q_systems)}


def _binaries_line(ic, figures: dict[str, Any]) -> str | None:
    """The binaries of `ic`: count, fraction of systems, hard fraction, the
    median binding energy in units of <m> sigma^2, and the systems' Q."""
    if ic.pairs is None:
        return None
    k = int(ic.pairs.shape[0])
    n_systems = int(ic.state.masses.shape[0]) - k
    if k == 0:
        return f"0 of {n_systems} systems"
    return (
        f"{k} of {n_systems} systems ({k / n_systems:.3g}); hard (E_b > <m> sigma^2) {100 * figures['hard']:.1f}%, "
        f"median log10(E_b / <m> sigma^2) = {figures['median_log_binding']:.2f}; "
        f"systems' Q = {_format_ratio(figures['systems_Q'])}"
    )


def _gas_line(gas) -> str:
    """Medians of the gas's specific internal energy and smoothing length, and its
    rms Mach number sqrt(<|v|^2>) / c_s, with c_s^2 = (gamma - 1) u when `gamma` is recorded."""
    u = np.asarray(gas.internal_energy, dtype=np.float64)
    h = np.asarray(gas.smoothing_length, dtype=np.float64)
    line = f"u = {np.median(u):.4g} (km/s)^2, h = {np.median(h):.4g} pc (medians; h {h.min():.3g} .. {h.max():.3g} pc)"
    if "gamma" in gas.params:
        c_s = np.sqrt((float(gas.params["gamma"]) - 1.0) * u)
        v = np.asarray(gas.state.velocities, dtype=np.float64)
        mach = np.sqrt(np.mean(np.sum(v**2, axis=1))) / np.median(c_s)
        line += f"; c_s = {np.median(c_s):.4g} km/s, rms Mach {mach:.3g}"
    return line


def _format_ratio(q: float, decimals: int = 4) -> str:
    """A virial ratio with `decimals` decimals, or 3 significant figures below
    0.01 (a gravoturbulent cluster of 1e6 stars with its own velocities has Q ~
    1e-4, which fixed point would print as zero)."""
    if q == 0 or abs(q) >= 0.01:
        return f"{q:.{decimals}f}"
    return f"{q:.3g}"


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    a = np.asarray(value)
    if a.ndim == 0:
        return f"{a.item():.6g}" if a.dtype.kind in "fc" else str(a.item())
    if a.size <= 4:
        return "[" + ", ".join(_format_value(v) for v in a.ravel()) + "]"
    return f"array{a.shape}"


def _format_parameters(params: dict[str, Any]) -> str:
    if not params:
        return "(none)"
    return ", ".join(f"{name} = {_format_value(value)}" for name, value in params.items())


def _scales(ic) -> tuple[float, float, float]:
    u = ic.units
    return float(u.length_pc), float(u.mass_msun), float(u.velocity_kms)


def format_summary(ic, figures: dict[str, Any] | None = None) -> str:
    """A few lines describing `ic`: N, total mass with its unit, the 3D half-mass
    radius, the virial ratio Q, the unit system, the model and its parameters.

    Masses are weighted by `ic.weights`. In Henon units the physical equivalents
    (Msun, pc) are given alongside. `figures`: as for `summary_figures` (used
    when their digest matches `ic`, measured otherwise).
    """
    d = summary_figures(ic, figures)
    n = int(ic.state.masses.shape[0])
    length, mass, velocity = _scales(ic)
    henon = ic.units.name == "henon"
    n_line = f"{n}"
    if d["weighted"]:
        n_line += f" (sum of weights {d['n_eff']:.6g})"
    q_note = " (stars; binaries' orbits included)" if ic.pairs is not None else ""
    if henon:
        mass_line = f"{d['mass']:.6g} (Henon units) = {d['mass'] * mass:.6g} Msun"
        rh_line = f"{d['r_h']:.6g} (Henon units) = {d['r_h'] * length:.6g} pc (3D, about the density centre)"
        units_line = f"henon: G = M = 1; length {length:.6g} pc, mass {mass:.6g} Msun, velocity {velocity:.6g} km/s"
    else:
        mass_line = f"{d['mass']:.6g} Msun"
        rh_line = f"{d['r_h']:.6g} pc (3D, about the density centre)"
        units_line = f"physical: pc, Msun, km/s; G = {float(ic.units.G):.10g}"
    if d["weighted"]:
        mass_line += " (weighted by membership)"
    rows = [
        ("model", ic.model.name),
        ("N", n_line),
        ("total mass", mass_line),
        ("half-mass radius", rh_line),
        ("virial ratio Q", _format_ratio(d["Q"]) + q_note),
        ("units", units_line),
        ("dtype", str(ic.state.positions.dtype)),
        ("parameters", _format_parameters(dict(ic.params))),
    ]
    binaries = _binaries_line(ic, d)
    if binaries is not None:
        rows.insert(4, ("binaries", binaries))
    if is_gas(ic):
        rows[4] = ("virial ratio Q", f"{_format_ratio(d['Q'])} (bulk motions only; thermal energy not included)")
        rows.insert(4, ("SPH gas", _gas_line(ic)))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def summary_line(ic, figures: dict[str, Any] | None = None) -> str:
    """One line: model, N, total mass, 3D half-mass radius and Q (`figures` as
    for `format_summary`)."""
    d = summary_figures(ic, figures)
    if ic.units.name == "henon":
        mass, r_h = f"M = {d['mass']:.6g}", f"r_h = {d['r_h']:.4g}"
        unit = " (Henon units)"
    else:
        mass, r_h = f"M = {d['mass']:.6g} Msun", f"r_h = {d['r_h']:.4g} pc"
        unit = ""
    return f"{ic.model.name}: N = {ic.state.masses.shape[0]}, {mass}, {r_h}, Q = {_format_ratio(d['Q'], 3)}{unit}"
