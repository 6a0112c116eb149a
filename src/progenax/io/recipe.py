"""Recipes: the build of a cluster as a flat dictionary, and back to a cluster.

A recipe holds the keywords of the builder call (`model`, `n`, `seed`, `r_h`,
`W0`, `segregation`, `rotation`, `mass_bins`, ...), the IMF (`imf` plus its own keys), the
tidal truncation (`host_mass` or `V_c` with `R`, or `r_t_tidal`; `kappa`,
`tidal_mode`), `units` and the binary population (`binary_*`). Its keys are the
Python keywords and, with `_` written `-`, the `progenax build` flags; a TOML
file (`progenax build --config cluster.toml`) holds the same keys.

`build_from_recipe(recipe)` checks the combination (a key the model does not
take is a `ValueError` that lists what it does take), fills the defaults and
builds; it returns the cluster and the full recipe, which the writers store in
every file beside the progenax version (`recipe_of(path)` reads it back and
`recipe_command` prints the `progenax build` command that rebuilds it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..binaries import PAIRINGS, BinaryPopulation
from ..binaries.distributions import ECCENTRICITIES, MASS_RATIOS, PERIODS
from ..builders import fractal_builder, king_builder, limepy_builder, model_builder
from ..builders._common import as_key
from ..builders.fractal import PROFILES
from ..gravoturb import cloud_builder, star_builder
from ..gravoturb.builders import IMF_ALPHA, PDF_SLOPE, THRESHOLD_MODES
from ..gravoturb.cloud import GEOMETRIES
from ..imf import ChabrierIMF, PowerLawIMF, kroupa, salpeter
from ..models import REGISTRY
from ..structure.tidal import MODES as TIDAL_MODES
from ..structure.tidal import apply_tidal_truncation, jacobi_radius_flat_rotation, jacobi_radius_point_mass
from ._paths import GAS_FORMATS
from .csv import RECIPE_PREFIX
from .native import _check_format
from .nbody import sidecar_path

MODELS = (*sorted(REGISTRY), "cloud", "fractal", "gravoturb")
IMFS = ("kroupa", "salpeter", "equal", "chabrier", "power-law")
UNITS = ("physical", "henon")
MULTIMASS = ("king", "limepy")

COMMON_KEYS = ("model", "n", "seed", "Q", "units", "imf", "alpha")
SEGREGATION_KEYS = ("segregation", "segregation_temperature")
ROTATION_KEYS = ("rotation", "rotation_scale")
"""The spherical builders' net rotation (`progenax.structure.rotation`)."""
MULTIMASS_KEYS = ("mass_bins", "delta")
FRACTAL_KEYS = ("D", "r_h", "profile")
GRAVOTURB_KEYS = (
    "mach",
    "pdf_slope",
    "b",
    "threshold_kappa",
    "threshold_mode",
    "grid",
    "r_cloud",
    "sound_speed",
    "dispersion",
    "beta",
    "velocity_beta",
    "geometry",
)
CLOUD_KEYS = (
    "mach",
    "pdf_slope",
    "b",
    "grid",
    "r_cloud",
    "m_cloud",
    "sound_speed",
    "beta",
    "velocity_beta",
    "gamma",
    "eta",
    "geometry",
)
"""`gravoturb.cloud_builder`'s keywords: the `cloud` model is SPH gas, not stars
(no Q, IMF, units, tidal truncation, segregation or binaries)."""
PHYSICAL_FORMATS = ("gadget", "swift", "csv")
"""The formats whose writers convert to physical units (`ic.to_physical()`)."""
"""The formats that keep the gas's internal energies and smoothing lengths."""
GRAVOTURB_RENAMED = {"threshold_kappa": "kappa"}
"""Recipe keys spelled differently from `star_builder`'s keywords: `kappa` is the
tidal truncation's sharpness on the command line."""
GRAVOTURB_CHOICES = {"threshold_mode": THRESHOLD_MODES, "geometry": GEOMETRIES}
IMF_KEYS = {
    "kroupa": ("alpha", "m_min", "m_max"),
    "salpeter": ("m_min", "m_max"),
    "equal": ("alpha",),
    "chabrier": ("alpha", "m_c", "sigma", "m_min", "m_max"),
    "power-law": ("imf_slopes", "imf_breaks"),
}
ALL_IMF_KEYS = ("m_min", "m_max", "m_c", "sigma", "imf_slopes", "imf_breaks")
TIDAL_KEYS = ("host_mass", "V_c", "R", "r_t_tidal", "kappa", "tidal_mode")
BINARY_CHOICES = {
    "binary_period": tuple(PERIODS),
    "binary_eccentricity": tuple(ECCENTRICITIES),
    "binary_mass_ratio": tuple(MASS_RATIOS),
    "binary_pairing": PAIRINGS,
}
BINARY_KEYS = ("binary_fraction", *BINARY_CHOICES)
OUTPUT_KEYS = ("format", "output")


def model_keys(model: str) -> tuple[str, ...]:
    """The recipe keys the model (a name of `MODELS`) takes, besides the common ones."""
    if model == "fractal":
        return FRACTAL_KEYS + SEGREGATION_KEYS
    if model == "gravoturb":
        return GRAVOTURB_KEYS
    if model == "cloud":
        return CLOUD_KEYS
    if model not in REGISTRY:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    own = tuple(p.name for p in REGISTRY[model].PARAMETERS)
    return own + SEGREGATION_KEYS + ROTATION_KEYS + (MULTIMASS_KEYS if model in MULTIMASS else ())


def all_keys() -> tuple[str, ...]:
    """Every key a recipe may hold."""
    keys = dict.fromkeys(COMMON_KEYS + ALL_IMF_KEYS + TIDAL_KEYS + BINARY_KEYS + OUTPUT_KEYS)
    for model in MODELS:
        keys.update(dict.fromkeys(model_keys(model)))
    return tuple(keys)


def flag(key: str) -> str:
    """The command-line flag of a recipe key (`r_h` -> `--r-h`)."""
    return "--" + key.replace("_", "-")


def _flags(keys) -> str:
    return ", ".join(flag(k) for k in keys)


def check_recipe(recipe: Mapping[str, Any]) -> None:
    """Refuse a key the model, IMF or tidal choice does not take, naming what it takes."""
    unknown = sorted(set(recipe) - set(all_keys()))
    if unknown:
        raise ValueError(f"unknown recipe key(s) {unknown}; known: {', '.join(all_keys())}")
    model = recipe.get("model")
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    takes = model_keys(model)
    if model == "cloud":
        _check_gas(recipe)
    model_specific = set().union(*(model_keys(m) for m in MODELS)) - {"r_h"}
    for key in recipe:
        if (key in model_specific or key == "r_h") and key not in takes:
            owners = [m for m in MODELS if key in model_keys(m)]
            raise ValueError(
                f"{flag(key)} only applies to the {', '.join(owners)} model(s), not {model} "
                f"(which takes {_flags(takes)})"
            )
    imf = recipe.get("imf", "kroupa")
    if imf not in IMFS:
        raise ValueError(f"imf must be one of {', '.join(IMFS)}, got {imf!r}")
    for key in ALL_IMF_KEYS + ("alpha",):
        if key in recipe and key not in IMF_KEYS[imf]:
            owners = [name for name, keys in IMF_KEYS.items() if key in keys]
            raise ValueError(
                f"{flag(key)} applies to --imf {' or '.join(owners)}, not --imf {imf} "
                f"(which takes {_flags(IMF_KEYS[imf]) or 'no IMF flags'})"
            )
    fmt = recipe.get("format")
    if recipe.get("units") == "henon" and fmt in PHYSICAL_FORMATS:
        raise ValueError(
            f"--format {fmt} is written in physical units (pc, Msun, km/s), not --units henon: "
            "drop --units henon, or write hdf5/npz, nbody6/petar or amuse"
        )
    if imf == "power-law" and not {"imf_slopes", "imf_breaks"} <= set(recipe):
        raise ValueError("--imf power-law needs --imf-slopes (K slopes) and --imf-breaks (K + 1 masses, Msun)")
    _check_tidal(recipe)


def _check_gas(recipe: Mapping[str, Any]) -> None:
    """The `cloud` model is gas in physical units: refuse the keys of star clusters."""
    stellar = [k for k in ("Q", "imf", "alpha", *ALL_IMF_KEYS, *TIDAL_KEYS, *BINARY_KEYS) if k in recipe]
    if stellar:
        raise ValueError(
            f"{flag(stellar[0])} applies to star clusters, not the cloud model (SPH gas, which takes "
            f"{_flags(('n', 'seed') + CLOUD_KEYS)})"
        )
    if recipe.get("units", "physical") != "physical":
        raise ValueError(f"the cloud model (SPH gas) is written in physical units only, not --units {recipe['units']}")
    fmt = recipe.get("format")
    if fmt is not None and fmt not in GAS_FORMATS:
        raise ValueError(
            f"--format {fmt} cannot hold SPH gas (internal energy, smoothing length); "
            f"the cloud model is written as {', '.join(GAS_FORMATS)}"
        )


def _check_tidal(recipe: Mapping[str, Any]) -> None:
    given = [k for k in ("host_mass", "V_c", "r_t_tidal") if k in recipe]
    if len(given) > 1:
        raise ValueError(f"give one tidal radius: {_flags(given)} are alternatives")
    if given and given[0] != "r_t_tidal" and "R" not in recipe:
        raise ValueError(f"{flag(given[0])} needs --R, the galactocentric radius in pc")
    if "R" in recipe and given[:1] not in (["host_mass"], ["V_c"]):
        raise ValueError("--R (galactocentric radius) needs --host-mass (point-mass host) or --V-c (flat rotation)")
    if not given and ({"kappa", "tidal_mode"} & set(recipe)):
        raise ValueError("--kappa and --tidal-mode need a tidal radius: --host-mass or --V-c with --R, or --r-t-tidal")
    if recipe.get("tidal_mode", "sigmoid") not in TIDAL_MODES:
        raise ValueError(f"tidal_mode must be one of {TIDAL_MODES}, got {recipe['tidal_mode']!r}")


def make_imf(recipe: Mapping[str, Any]):
    """The builder's `imf=` argument for the recipe (a name where it is enough)."""
    imf = recipe.get("imf", "kroupa")
    limits = {k: recipe[k] for k in ("m_min", "m_max") if k in recipe}
    if imf == "kroupa":
        return kroupa(recipe.get("alpha", 2.3), **limits) if limits else "kroupa"
    if imf == "salpeter":
        return salpeter(**limits) if limits else "salpeter"
    if imf == "chabrier":
        shape = {k: recipe[k] for k in ("m_c", "sigma", "alpha") if k in recipe}
        return ChabrierIMF(**shape, **limits)
    if imf == "power-law":
        return PowerLawIMF(list(recipe["imf_breaks"]), list(recipe["imf_slopes"]))
    return imf


def make_binaries(recipe: Mapping[str, Any]) -> BinaryPopulation | None:
    """The population the `binary_*` keys describe, or None without `binary_fraction`."""
    given = [name for name in BINARY_CHOICES if name in recipe]
    if "binary_fraction" not in recipe:
        if given:
            raise ValueError(f"{flag(given[0])} needs --binary-fraction (the binaries' share of systems)")
        return None
    fraction = recipe["binary_fraction"]
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"--binary-fraction must be in [0, 1], got {fraction}")
    return BinaryPopulation(
        fraction,
        recipe.get("binary_period", "kroupa95"),
        recipe.get("binary_eccentricity"),
        recipe.get("binary_mass_ratio"),
        recipe.get("binary_pairing", "ratio"),
    )


def _builder_call(recipe: Mapping[str, Any]):
    """The builder and its keyword arguments (only what the recipe gives, so a
    default build is the builder's default call)."""
    model = recipe["model"]
    kwargs: dict[str, Any] = {"n": recipe.get("n", 10_000)}
    for key in model_keys(model):
        if key in recipe:
            kwargs[key] = recipe[key]
    if model == "cloud":
        return cloud_builder, kwargs
    kwargs["alpha"] = recipe.get("alpha", 2.3) if recipe.get("imf", "kroupa") in ("kroupa", "equal") else 2.3
    kwargs["imf"] = make_imf(recipe)
    kwargs["binaries"] = make_binaries(recipe)
    if model == "fractal":
        return fractal_builder, {**kwargs, "Q": _virial_ratio(recipe.get("Q", 0.5))}
    if model == "gravoturb":
        kwargs = {GRAVOTURB_RENAMED.get(k, k): v for k, v in kwargs.items()}
        kwargs["alpha"] = recipe.get("alpha", IMF_ALPHA)
        if "alpha" in recipe:
            # --alpha is the IMF's slope, as star_builder's alpha is since 0.2.0; it warns
            # about 0.1.0's meaning (pdf_slope) unless pdf_slope is passed as well.
            kwargs["pdf_slope"] = np.float64(kwargs.get("pdf_slope", PDF_SLOPE))
        return star_builder, {**kwargs, "Q": _virial_ratio(recipe.get("Q", "none"))}
    kwargs["Q"] = _virial_ratio(recipe.get("Q", REGISTRY[model].DEFAULT_Q))
    if model in MULTIMASS and "mass_bins" in recipe:
        return (king_builder if model == "king" else limepy_builder), kwargs
    for key in MULTIMASS_KEYS:
        if key in kwargs:
            raise ValueError(f"{flag(key)} needs --mass-bins (the multi-mass {model} model)")
    return (lambda key, **kw: model_builder(key, REGISTRY[model], **kw)), kwargs


def _virial_ratio(Q):
    """A recipe's Q: a number, or "none" (the model's own velocities, `Q=None`)."""
    if isinstance(Q, str):
        if Q.lower() != "none":
            raise ValueError(f"Q must be a number or 'none' (the model's own velocities), got {Q!r}")
        return None
    return Q


def _tidal_radius(recipe: Mapping[str, Any], cluster_mass) -> Any:
    if "r_t_tidal" in recipe:
        return recipe["r_t_tidal"]
    if "host_mass" in recipe:
        return jacobi_radius_point_mass(cluster_mass, recipe["host_mass"], recipe["R"])
    return jacobi_radius_flat_rotation(cluster_mass, recipe["V_c"], recipe["R"])


def build_from_recipe(recipe: Mapping[str, Any]):
    """Build the cluster a recipe describes; returns `(ic, full_recipe)`.

    The full recipe adds the defaults that were used (`n`, `seed`, `imf`,
    `units`, `Q`) so that it rebuilds the same arrays should a default change.
    With a tidal truncation the cluster is built in physical units, its
    weights multiplied by `apply_tidal_truncation` at the Jacobi radius of
    its mass (pc), then converted to `units`. The `cloud` model returns SPH
    gas (a `progenax.gravoturb.GasCloud`, physical units).
    """
    recipe = dict(recipe)
    check_recipe(recipe)
    _check_choices(recipe)
    builder, kwargs = _builder_call(recipe)
    seed = recipe.get("seed", 0)
    if recipe["model"] == "cloud":
        return builder(as_key(seed), **kwargs), {"n": kwargs["n"], "seed": seed, **recipe}
    units = recipe.get("units", "physical")
    if units not in UNITS:
        raise ValueError(f"units must be one of {UNITS}, got {units!r}")
    tidal = any(k in recipe for k in ("host_mass", "V_c", "r_t_tidal"))
    if recipe["model"] == "fractal" and recipe.get("profile", "plummer") not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {recipe['profile']!r}")
    ic = builder(as_key(seed), units="physical" if tidal else units, **kwargs)
    if tidal:
        r_t = _tidal_radius(recipe, ic.state.masses.sum())
        ic = apply_tidal_truncation(ic, r_t, recipe.get("kappa", 10.0), recipe.get("tidal_mode", "sigmoid"))
        if not np.any(np.asarray(ic.weights) > 0):
            raise ValueError(
                f"the tidal radius {float(r_t):.4g} pc leaves no star with a weight above 0: "
                "raise it (--r-t-tidal, or a lighter --host-mass or a larger --R)"
            )
        ic = ic.to_henon() if units == "henon" else ic
    full = {"n": kwargs["n"], "seed": seed, "imf": recipe.get("imf", "kroupa"), "units": units}
    if kwargs["Q"] is not None:
        full["Q"] = kwargs["Q"]
    return ic, {**full, **recipe}


def _check_choices(recipe: Mapping[str, Any]) -> None:
    for key, choices in GRAVOTURB_CHOICES.items():
        if key in recipe and recipe[key] not in choices:
            raise ValueError(f"{key} must be one of {choices}, got {recipe[key]!r}")


def recipe_command(recipe: Mapping[str, Any], output: str | None = None) -> str:
    """The `progenax build` command line that rebuilds `recipe` (into `output`)."""
    parts = ["progenax", "build", str(recipe["model"])]
    for key, value in recipe.items():
        if key == "model":
            continue
        text = ",".join(repr(float(v)) for v in value) if isinstance(value, (list, tuple)) else _shown(value)
        parts += [flag(key), text]
    if output is not None:
        parts += ["-o", str(output)]
    return " ".join(parts)


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def dumps(recipe: Mapping[str, Any]) -> str:
    """The recipe as the JSON text the writers store."""
    return json.dumps(dict(recipe), sort_keys=False)


def loads(text: str | bytes) -> dict[str, Any]:
    """A recipe from the JSON text a writer stored."""
    return json.loads(text.decode() if isinstance(text, bytes) else text)


def load_toml(path) -> dict[str, Any]:
    """A recipe from a TOML file (top-level keys as the flags', `_` or `-`)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        data = tomllib.load(f)
    recipe = {key.replace("-", "_"): value for key, value in data.items()}
    unknown = sorted(set(recipe) - set(all_keys()))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; known: {', '.join(all_keys())}")
    return recipe


def recipe_of(path, format: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """`(recipe, version)`: the recipe stored in a file and the progenax version
    that wrote it (None for what the file does not hold)."""
    path = Path(path)
    fmt = _check_format(format, path)
    text, version = None, None
    if fmt in ("hdf5", "gadget"):
        with h5py.File(path, "r") as f:
            attrs = f["progenax"].attrs if fmt == "gadget" and "progenax" in f else f.attrs
            text, version = attrs.get("recipe"), attrs.get("progenax_version")
    elif fmt == "npz":
        with np.load(path, allow_pickle=False) as data:
            text = data["recipe"][()] if "recipe" in data.files else None
            version = data["progenax_version"][()] if "progenax_version" in data.files else None
    elif fmt == "nbody6":
        side = sidecar_path(path)
        meta = json.loads(side.read_text()) if side.is_file() else {}
        recipe, version = meta.get("recipe"), meta.get("progenax_version")
        text = None if recipe is None else json.dumps(recipe)
    elif fmt == "csv":
        with open(path) as f:
            line = f.readline()
        if line.startswith(RECIPE_PREFIX) and " recipe: " in line:
            version, text = line[len(RECIPE_PREFIX) :].split(" recipe: ", 1)
    if isinstance(version, bytes):
        version = version.decode()
    recipe = None if text is None else loads(text if isinstance(text, bytes) else str(text))
    return recipe, None if version is None else str(version)
