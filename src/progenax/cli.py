"""The `progenax` command line.

```
progenax build plummer --n 10000 --r-h 1.0 --alpha 2.3 --Q 0.5 --seed 1 -o cluster.h5
progenax build eff --n 10000 --gamma 3.0 --r-t 20 -o cluster.npz
progenax build king --n 10000 --W0 6 --r-h 1.0 --mass-bins 8 --delta 0.5 -o king.h5
progenax build limepy --n 10000 --W0 6 --g 1.5 --imf chabrier -o limepy.h5
progenax build fractal --n 10000 --D 1.6 --profile box --segregation 0.5 -o fractal.h5
progenax build plummer --host-mass 1e11 --R 8000 --tidal-mode hard -o truncated.h5
progenax build --config cluster.toml --seed 2 -o cluster.h5
progenax info cluster.h5
progenax plot cluster.h5 -o quicklook.png
progenax audit
progenax demo --output-dir demo_output
```

Clusters are built in float64 (the command line turns on `jax_enable_x64`) and
written in progenax's own schema (`progenax.io`), each file with its recipe
(`progenax.io.recipe`; `progenax info` prints the command that rebuilds it).
Compiled XLA programs are kept in a persistent cache (`enable_compile_cache`:
`~/.cache/progenax/xla`, or `$PROGENAX_COMPILE_CACHE`; `PROGENAX_COMPILE_CACHE=0`
or `--no-compile-cache` switches it off), so a second build of the same shape
skips compilation. A bad argument prints one line
on stderr and exits with status 2; a failed write (disk full, `ulimit -f`) prints
one line and exits with 1, leaving any old output file as it was (the writers are
atomic); `audit` exits with 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import equinox as eqx
import jax

from . import audit
from . import io as pio
from ._version import __version__
from .builders import plummer_builder
from .builders.fractal import PROFILES
from .gravoturb import cloud_builder, star_builder
from .io import recipe as recipes
from .io._paths import atomic_write
from .io.amuse import require_amuse
from .io.gadget import is_gas
from .models import REGISTRY, NoAnalyticFormError
from .plotting import quicklook, relax_before_after
from .sph.relax import model_density, profile_density, relax
from .structure.tidal import MODES as TIDAL_MODES

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

IMFS = recipes.IMFS
UNITS = recipes.UNITS
FIT_MODEL_NAMES = ("plummer", "king")  # progenax.infer.FIT_MODELS (imported only by `fit`: start-up time)
CACHE_ENV = "PROGENAX_COMPILE_CACHE"
"""Environment variable: the compilation cache's directory, or 0/off/false/no to switch it off."""
CACHE_MAX_BYTES = 1 << 30
"""The compilation cache is kept below 1 GiB (least recently used entries go first)."""


class UsageError(Exception):
    """A bad command-line argument, reported in one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= `minimum` (`what` names it in errors)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {value}")
    return value


def _virial_ratio(text: str) -> float | str:
    """An argparse type: a number, or "none" (kept as the string, the recipe's spelling of None)."""
    if text.strip().lower() == "none":
        return "none"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or none, got {text!r}") from None


def _floats(text: str) -> list[float]:
    """An argparse type: comma-separated numbers ("1.3,2.3")."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _png_path(text: str) -> Path:
    if Path(text).suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"the figure is a PNG: the path must end in .png, got {text!r}")
    return Path(text)


FORMAT_HELP = (
    "file format: our own hdf5/npz schema (default, from the extension), "
    "gadget/swift HDF5, nbody6/petar ASCII (Henon units), csv, or amuse (needs AMUSE installed)"
)


def _add_particle_type_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--particle-type",
        type=int,
        choices=range(6),
        default=None,
        metavar="K",
        help="gadget/swift: the PartType group to read (0 gas, 4 stars; default: the only one filled)",
    )


def _check_output_folder(path: Path) -> None:
    """Refuse, before building, an output whose folder cannot be made: its
    nearest existing ancestor is a file (`-o cluster.h5/c.h5`)."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"cannot write {str(path)!r}: {str(parent)!r} is a file, not a folder")
            return


def _read(args: argparse.Namespace):
    """The file of `info` or `plot`, with `--particle-type` for a Gadget/SWIFT file."""
    if args.format is None:
        _checked_format(args.path, None)  # an unknown extension: the error suggests --format
    if args.particle_type is None:
        return pio.read(args.path, format=args.format)
    if args.format not in ("gadget", "swift"):
        raise UsageError(f"--particle-type applies to --format gadget or swift, not {args.format or 'our own schema'}")
    return pio.read(args.path, format=args.format, particle_type=args.particle_type)


def _formats() -> tuple[str, ...]:

    return pio.FORMATS


_EXTENSION_FORMATS = {
    ".h5": ("hdf5", "gadget", "swift", "amuse"),
    ".hdf5": ("hdf5", "gadget", "swift", "amuse"),
    ".npz": ("npz",),
    ".csv": ("csv",),
}


def _checked_format(path: Path, fmt: str | None) -> str | None:
    """Without --format the extension must name our own schema; with it, the
    extension must not name another format (`--format csv -o a.h5`)."""
    allowed = _EXTENSION_FORMATS.get(path.suffix.lower())
    if fmt is not None and allowed is not None and fmt not in allowed:
        raise UsageError(
            f"--format {fmt} contradicts the extension of {str(path)!r} ({' or '.join(allowed)}): "
            f"change the extension or --format"
        )
    if fmt is None:
        try:
            pio.file_format(path)
        except ValueError as err:
            raise UsageError(f"{err}; or give --format") from None
    if fmt == "amuse":
        require_amuse()  # ImportError with install instructions, before building anything
    return fmt


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="progenax",
        description="Differentiable star-cluster initial conditions in JAX.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    b = _subcommand(sub, "build", "build a cluster and write it to a file (with its recipe)")
    b.add_argument(
        "model", nargs="?", choices=recipes.MODELS, default=None, help="cluster model (or `model` in --config)"
    )
    b.add_argument("--config", type=Path, default=None, help="TOML recipe with the flags' keys; flags override it")
    b.add_argument(
        "--n",
        type=_positive_int,
        default=None,
        help="number of stars (systems with binaries, gas particles for cloud; default 10000)",
    )
    b.add_argument("--seed", type=_seed, default=None, help="random seed (default 0)")
    b.add_argument(
        "--Q",
        dest="Q",
        type=_virial_ratio,
        default=None,
        help="virial ratio T/|W| the velocities are scaled to exactly (default 0.5), or none: the "
        "model's own equilibrium velocities (the default of king and limepy; what progenax fit's Q means)",
    )
    _add_model_flags(b)
    _add_structure_flags(b)
    _add_imf_flags(b)
    _add_tidal_flags(b)
    _add_binary_flags(b)
    b.add_argument("--units", choices=UNITS, default=None, help="unit system of the file (default physical)")
    b.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="output file; without --format, .h5/.hdf5 or .npz (default cluster.h5)",
    )
    b.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    _add_cache_flag(b)
    b.set_defaults(func=_cmd_build, build_parser=b)

    i = _subcommand(sub, "info", "summarise a cluster file and print the command that rebuilds it")
    i.add_argument("path", type=Path, help="a cluster file (.h5/.hdf5/.npz, or any with --format)")
    i.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    _add_particle_type_flag(i)
    _add_cache_flag(i)
    i.set_defaults(func=_cmd_info)

    p = _subcommand(sub, "plot", "quick-look figure of a cluster file")
    p.add_argument("path", type=Path, help="a cluster file (.h5/.hdf5/.npz, or any with --format)")
    p.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    p.add_argument("-o", "--output", type=_png_path, default=None, help="PNG to write (default: next to the file)")
    _add_particle_type_flag(p)
    _add_cache_flag(p)
    p.set_defaults(func=_cmd_plot)

    r = _subcommand(sub, "relax", "relax a cluster towards its model density (SPH density loss)")
    r.add_argument("path", type=Path, help="a cluster file built by progenax (.h5/.hdf5/.npz, or any with --format)")
    r.add_argument("-o", "--output", type=Path, required=True, help="file to write the relaxed cluster to")
    r.add_argument("--steps", type=_non_negative_int, default=200, help="relaxation steps (default 200)")
    r.add_argument("--eta", type=float, default=1.2, help="smoothing length in local spacings (default 1.2)")
    r.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    r.add_argument(
        "--plot",
        type=_png_path,
        default=None,
        help="PNG of the density error against radius before and after, and a projected slice",
    )
    r.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    _add_cache_flag(r)
    r.set_defaults(func=_cmd_relax)

    f = _subcommand(sub, "fit", "fit a Plummer or King model to a catalogue with NUTS (numpyro, ArviZ)")
    f.add_argument("catalogue", type=Path, help="stars: our HDF5/npz, or CSV and the other formats with --format")
    f.add_argument("--model", choices=FIT_MODEL_NAMES, required=True, help="the model to fit")
    f.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    f.add_argument("--num-warmup", type=_positive_int, default=500, help="NUTS warm-up steps per chain (default 500)")
    f.add_argument("--num-samples", type=_positive_int, default=500, help="posterior draws per chain (default 500)")
    f.add_argument("--num-chains", type=_positive_int, default=2, help="chains, run vectorized (default 2)")
    f.add_argument("--seed", type=_seed, default=0, help="random seed of the sampler (default 0)")
    f.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="prefix of the files written: PREFIX_posterior.nc, PREFIX_summary.txt, PREFIX_corner.png "
        "(default: the catalogue's path without its extension, plus _fit)",
    )
    f.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    _add_cache_flag(f)
    f.set_defaults(func=_cmd_fit)

    a = _subcommand(sub, "audit", "run the gradient audit of every builder")
    _add_cache_flag(a)
    a.set_defaults(func=_cmd_audit)

    d = _subcommand(sub, "demo", "build a 10,000-star Plummer cluster, write it and a figure")
    d.add_argument("--output-dir", type=Path, default=Path("demo_output"), help="default demo_output")
    d.add_argument("--n", type=_positive_int, default=10_000, help="number of stars (default 10000)")
    d.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    _add_cache_flag(d)
    d.set_defaults(func=_cmd_demo)
    return parser


EXAMPLES = {
    "build": """examples:
  progenax build plummer --n 10000 --r-h 1.0 --Q 0.5 --seed 1 -o cluster.h5
  progenax build king --W0 6 --mass-bins 8 --imf chabrier -o king.h5
  progenax build fractal --D 1.6 --profile box -o fractal.h5
  progenax build plummer --imf power-law --imf-slopes 1.3,2.3 --imf-breaks 0.08,0.5,100 -o c.h5
  progenax build eff --gamma 3 --host-mass 1e11 --R 8000 --tidal-mode hard -o c.h5
  progenax build --config cluster.toml --seed 2 -o c.h5   (flags override the file)
  progenax build plummer --format nbody6 -o fort.10
  progenax build cloud --n 100000 --mach 8 --m-cloud 1e4 --format gadget -o gas.h5   (SPH gas)""",
    "info": "example:\n  progenax info cluster.h5\n  progenax info stars.csv --format csv",
    "plot": "example:\n  progenax plot cluster.h5 -o quicklook.png",
    "relax": "example:\n  progenax relax cluster.h5 -o relaxed.h5 --steps 200 --plot relax.png",
    "audit": "example:\n  progenax audit",
    "fit": """example:
  progenax build plummer --n 2000 --Q none --format csv -o stars.csv
  progenax fit stars.csv --format csv --model plummer --num-warmup 300 --num-samples 300
  (writes stars_fit_posterior.nc, stars_fit_summary.txt and stars_fit_corner.png)""",
    "demo": "example:\n  progenax demo --output-dir demo_output --n 10000",
}


def _subcommand(sub, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with its examples (`EXAMPLES`)."""
    return sub.add_parser(
        name,
        help=text,
        description=text,
        epilog=EXAMPLES.get(name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )


def _version() -> str:

    return __version__


def _enable_float64() -> None:

    jax.config.update("jax_enable_x64", True)


# ------------------------------------------------------------------------ commands


def _model_flags() -> dict[str, list]:
    """Every model parameter's flag -> the models that take it (declared in
    `progenax.models`: a new model's parameters become flags by themselves)."""
    flags: dict[str, list] = {}
    for cls in REGISTRY.values():
        for p in cls.PARAMETERS:
            flags.setdefault(p.name, []).append((cls, p))
    return flags


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model parameters (each flag says which models take it)")
    for name, owners in sorted(_model_flags().items()):
        each = []
        for cls, p in sorted(owners, key=lambda owner: owner[0].NAME):
            unit = f" {p.unit}" if p.unit else ""
            default = "" if p.default is None else f", default {p.default}"
            each.append(f"{cls.NAME}: {p.doc}, {p.support.describe()}{unit}{default}")
        if name == "r_h":
            each.append("fractal: 3D half-mass radius, > 0 pc, default 1.0")
        if name == "gamma":
            each.append("cloud: adiabatic index of the gas, > 1, default 5/3")
        group.add_argument(
            recipes.flag(name),
            dest=name,
            type=int if owners[0][1].static else float,
            default=None,
            help="; ".join(each),
        )
    group.add_argument(
        "--D", dest="D", type=float, default=None, help="fractal: fractal dimension in [1.6, 3], default 1.6"
    )
    group.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="fractal: plummer (radii remapped onto a Plummer sphere, default) or box (the pure box fractal)",
    )
    _add_gravoturb_flags(parser)


def _add_gravoturb_flags(parser: argparse.ArgumentParser) -> None:
    """`progenax.gravoturb.star_builder`'s and `cloud_builder`'s keywords (their defaults in the help)."""
    group = parser.add_argument_group(
        "gravoturb (stars born in the dense gas of a turbulent cloud) and cloud (that cloud's SPH gas); "
        "experimental. The field's flags are shared; the cloud takes neither --dispersion nor --threshold-*"
    )
    defaults = {name: p.default for name, p in inspect.signature(star_builder).parameters.items()}
    helps = {
        "mach": "turbulent Mach number of the gas",
        "pdf_slope": "slope of the power-law tail of the gas density PDF",
        "b": "turbulent forcing parameter (1/3 solenoidal ... 1 compressive)",
        "threshold_kappa": "sharpness of the star-formation threshold in ln density (star_builder's kappa)",
        "threshold_mode": "sigmoid (differentiable) or hard threshold",
        "grid": "cells per side of the turbulent field",
        "r_cloud": "cloud radius, pc",
        "sound_speed": "gas sound speed, km/s",
        "dispersion": "stellar velocity dispersion about the gas flow, km/s",
        "beta": "power spectrum slope of the density field",
        "velocity_beta": "power spectrum slope of the velocity field",
        "geometry": "sphere or box",
    }
    for key in recipes.GRAVOTURB_KEYS:
        default = defaults[recipes.GRAVOTURB_RENAMED.get(key, key)]
        choices = recipes.GRAVOTURB_CHOICES.get(key)
        kind = None if choices else _positive_int if key == "grid" else float
        shown = f"{default:.6g}" if isinstance(default, float) else default
        group.add_argument(
            recipes.flag(key), type=kind, choices=choices, default=None, help=f"{helps[key]} (default {shown})"
        )
    cloud = {name: p.default for name, p in inspect.signature(cloud_builder).parameters.items()}
    group.add_argument(
        "--m-cloud", type=float, default=None, help=f"cloud: gas mass, Msun (default {cloud['m_cloud']:.6g})"
    )
    group.add_argument(
        "--eta", type=float, default=None, help=f"cloud: smoothing length in local spacings (default {cloud['eta']})"
    )


def _add_structure_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("mass segregation")
    group.add_argument(
        "--segregation", type=float, default=None, help="primordial mass segregation S in [0, 1) (default 0: none)"
    )
    group.add_argument(
        "--segregation-temperature", type=float, default=None, help="width of the relaxed ranking, in (0, 8]"
    )
    group.add_argument(
        "--mass-bins",
        type=_positive_int,
        default=None,
        help="king, limepy: K mass bins (1-64) of the self-consistent multi-mass model",
    )
    group.add_argument(
        "--delta", type=float, default=None, help="king, limepy with --mass-bins: velocity-scale index in [0, 2]"
    )
    group = parser.add_argument_group("net rotation (spherical models)")
    group.add_argument(
        "--rotation",
        type=float,
        default=None,
        help="k in [-1, 1]: each star's L_z is prograde with probability (1 + k tanh(|L_z|/L_0))/2 (default: none)",
    )
    group.add_argument(
        "--rotation-scale", type=float, default=None, help="with --rotation: L_0 in pc km/s (default 0: (1 + k)/2)"
    )


def _add_imf_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("initial mass function")
    group.add_argument("--imf", choices=IMFS, default=None, help="initial mass function (default kroupa)")
    group.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="high-mass slope: kroupa and equal (above 0.5 Msun), chabrier (above 1 Msun); default 2.3",
    )
    group.add_argument("--m-min", type=float, default=None, help="kroupa, salpeter, chabrier: lowest mass (Msun)")
    group.add_argument("--m-max", type=float, default=None, help="kroupa, salpeter, chabrier: highest mass (Msun)")
    group.add_argument("--m-c", type=float, default=None, help="chabrier: characteristic mass (default 0.079 Msun)")
    group.add_argument("--sigma", type=float, default=None, help="chabrier: log-normal width (default 0.69 dex)")
    group.add_argument("--imf-slopes", type=_floats, default=None, help="power-law: K slopes, e.g. 1.3,2.3")
    group.add_argument("--imf-breaks", type=_floats, default=None, help="power-law: K + 1 masses, e.g. 0.08,0.5,100")


def _add_tidal_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tidal truncation (membership weights at the Jacobi radius, physical units)")
    group.add_argument("--host-mass", type=float, default=None, help="point-mass host galaxy (Msun); needs --R")
    group.add_argument("--V-c", dest="V_c", type=float, default=None, help="flat rotation curve (km/s); needs --R")
    group.add_argument("--R", dest="R", type=float, default=None, help="galactocentric radius (pc)")
    group.add_argument("--r-t-tidal", type=float, default=None, help="the tidal radius itself (pc)")
    group.add_argument("--kappa", type=float, default=None, help="sharpness of the soft truncation (default 10)")
    group.add_argument("--tidal-mode", choices=TIDAL_MODES, default=None, help="sigmoid (default) or hard")


def _add_binary_flags(parser: argparse.ArgumentParser) -> None:
    """The `BinaryPopulation` flags (McLuster's -b, -p, -e, -q and pairing)."""
    group = parser.add_argument_group("primordial binaries (progenax.BinaryPopulation; --n then counts systems)")
    group.add_argument(
        "--binary-fraction", type=float, default=None, help="fraction of systems that are binaries, in [0, 1]"
    )
    helps = {
        "binary_period": "period distribution (default kroupa95; moe17: periods, q and e jointly)",
        "binary_eccentricity": "eccentricity distribution (default thermal; not with moe17)",
        "binary_mass_ratio": "mass-ratio distribution (default uniform; not with moe17)",
        "binary_pairing": "pairing of the two masses (default ratio; McLuster's: random, ordered, separate, split)",
    }
    for name, choices in recipes.BINARY_CHOICES.items():
        group.add_argument(recipes.flag(name), choices=choices, default=None, help=helps[name])


def _add_cache_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-compile-cache",
        dest="compile_cache",
        action="store_false",
        help=f"do not use the persistent XLA compilation cache (or set {CACHE_ENV}=0)",
    )


def _recipe(args: argparse.Namespace) -> dict:
    """The recipe of a `build`: the --config file's keys, overridden by the flags."""
    recipe = _checked_config(args.config, args.build_parser) if args.config is not None else {}
    for key in recipes.all_keys():
        value = getattr(args, key, None)
        if value is not None:
            recipe[key] = value
    if args.model is not None:
        recipe["model"] = args.model
    if "model" not in recipe:
        raise UsageError(f"give the MODEL ({', '.join(recipes.MODELS)}), on the command line or in --config")
    return recipe


def _checked_config(path: Path, parser: argparse.ArgumentParser) -> dict:
    """A --config TOML recipe, each value checked and converted as its flag's
    value would be (`--seed -1` is refused, so is `seed = -1`; a TOML list is
    the flag's comma-separated text)."""
    recipe = recipes.load_toml(path)
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    for key, value in recipe.items():
        action = by_flag.get(recipes.flag(key))
        if action is None:  # the model (positional), checked when the recipe is built
            continue
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        try:
            converted = action.type(text) if action.type is not None else text
        except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
            raise UsageError(f"{path}: {key} = {value!r}: {err}") from None
        if action.choices is not None and converted not in action.choices:
            raise UsageError(f"{path}: {key} = {value!r}: not one of {', '.join(map(str, action.choices))}")
        recipe[key] = converted
    return recipe


def _cmd_build(args: argparse.Namespace) -> int:

    recipe = _recipe(args)
    path = Path(args.output or recipe.pop("output", "cluster.h5"))
    recipe.pop("output", None)
    fmt = _checked_format(path, recipe.get("format"))
    _check_output_folder(path)
    ic, full = recipes.build_from_recipe(recipe)
    figures = pio.summary_figures(ic)
    with _writing(path):
        pio.write(ic, path, format=fmt, recipe=full, summary=figures)
    print(f"{pio.summary_line(ic, figures)} -> {path}")
    return EXIT_OK


@contextlib.contextmanager
def _writing(path: Path):
    """Create `path`'s folder, then run the write: one that fails is a failure
    (exit 1), not a bad argument (exit 2, as for an input file that cannot be
    read), and is named by its target rather than the writer's temporary file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield
    except (FileNotFoundError, PermissionError, IsADirectoryError) as err:
        raise OSError(f"cannot write {str(path)!r}: {err.strerror or err}") from None


def _cmd_info(args: argparse.Namespace) -> int:

    ic = _read(args)
    print(f"{'file':<17} {args.path}")
    print(pio.format_summary(ic, pio.stored_summary(args.path, format=args.format)))
    recipe, version = recipes.recipe_of(args.path, format=args.format)
    if version is not None:
        print(f"{'written by':<17} progenax {version}")
    if recipe is not None:
        print(f"{'rebuild with':<17} {recipes.recipe_command(recipe, args.path)}")
    return EXIT_OK


def _cmd_plot(args: argparse.Namespace) -> int:

    ic = _read(args)
    out = args.output or args.path.with_suffix(".png")
    if os.path.realpath(out) == os.path.realpath(args.path):
        raise UsageError(f"the figure would overwrite its input {str(args.path)!r}: give -o/--output")
    with _writing(out):
        quicklook(ic, out)
    print(f"wrote {out}")
    return EXIT_OK


def _cmd_relax(args: argparse.Namespace) -> int:

    if args.eta <= 0:
        raise UsageError(f"--eta must be positive, got {args.eta}")
    ic = pio.read(args.path, format=args.format)
    if is_gas(ic):
        raise UsageError(
            f"{args.path} holds SPH gas: relax takes a star cluster (the gas is placed on its turbulent field, "
            "and its smoothing lengths belong to those positions)"
        )
    try:
        out_format = pio.file_format(args.output)  # --format names the input's format only
    except ValueError as err:
        raise UsageError(f"{err}: relax writes progenax's own format") from None
    try:
        pio.check_finite_arrays(ic)  # NaN in would be NaN out, after the whole relaxation
    except ValueError as err:
        raise UsageError(f"{args.path}: {err}; nothing to relax") from None
    target = _relax_target(ic)
    relaxed = relax(ic, target=target, keep_radii=True, steps=args.steps, eta=args.eta, progress=args.progress)
    figures = pio.summary_figures(relaxed)
    with _writing(args.output):
        pio.write(relaxed, args.output, format=out_format, summary=figures)
    print(f"{pio.summary_line(relaxed, figures)} -> {args.output}")
    if args.plot is not None:
        with _writing(args.plot):
            relax_before_after(ic, relaxed, args.plot, eta=args.eta, target=target)
        print(f"wrote {args.plot}")
    return EXIT_OK


def _relax_target(ic):
    """None (the model's own density) where the file names a model with one;
    otherwise (a Gadget or NBODY6 file, a fractal) the cluster's own smoothed
    radial profile (`sph.targets.profile_density`), said in one line."""
    try:
        model_density(ic.to_physical())
        return None
    except NoAnalyticFormError:
        print(f"{ic.model.name}: no model density in the file; relaxing towards the cluster's own radial profile")
        return profile_density(ic.to_physical())


def _cmd_fit(args: argparse.Namespace) -> int:

    ic = pio.read(args.catalogue, format=args.format)
    # numpyro and ArviZ load only for `fit`: every other command starts faster without them.
    from . import infer

    prefix = args.output or args.catalogue.with_name(args.catalogue.stem + "_fit")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    idata = infer.fit_catalogue(
        ic,
        args.model,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        seed=args.seed,
        progress=args.progress,
    )
    names = list(infer.fit.FIT_PARAMETERS[args.model])
    table = infer.posterior_summary(idata, names).to_string()
    divergences = int(idata.sample_stats["diverging"].sum()) if "diverging" in idata.sample_stats else 0
    summary = Path(f"{prefix}_summary.txt")
    with atomic_write(summary) as (temp,):
        temp.write_text(f"{args.model} fit of {args.catalogue} ({ic.n} stars), {divergences} divergences\n{table}\n")
    print(table)
    print(f"divergences: {divergences}")
    print(f"wrote {infer.write_posterior(idata, Path(f'{prefix}_posterior.nc'))}")
    print(f"wrote {summary}")
    title = f"{args.model} fit of {args.catalogue.name}"
    print(f"wrote {infer.pair_plot(idata, names, Path(f'{prefix}_corner.png'), title=title)}")
    return EXIT_OK


def _cmd_audit(args: argparse.Namespace) -> int:

    rows = list(audit.run_audit())
    print(audit.format_table(rows))
    failed = [row for row in rows if not row.passed]
    if failed:
        print(f"{len(failed)} of {len(rows)} audit checks failed", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:

    out = args.output_dir
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {str(out)!r} is a file, not a folder")
    ic = plummer_builder(args.seed, n=args.n, r_h=1.0, alpha=2.3, Q=0.5, imf="kroupa")
    figures = pio.summary_figures(ic)
    with _writing(out / "cluster.h5"):
        cluster = pio.write(ic, out / "cluster.h5", summary=figures)
    with _writing(out / "quicklook.png"):
        figure = quicklook(ic, out / "quicklook.png")
    print(f"Plummer cluster, Kroupa IMF (seed {args.seed})")
    print(pio.format_summary(ic, figures))
    print()
    print(f"wrote {cluster}    (inspect with: progenax info {cluster})")
    print(f"wrote {figure}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`); return the exit status.

    The `progenax` console script (`run`) exits with the returned status. A
    bad argument or unreadable file prints one line and returns 2; a write
    or run that fails (`OSError` such as a full disk, `RuntimeError`) prints
    one line and returns 1 (set the environment variable `PROGENAX_DEBUG=1`
    to see the traceback instead).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    _enable_float64()
    prog = f"progenax {args.command}"
    try:
        if getattr(args, "compile_cache", True):
            enable_compile_cache()
        return args.func(args)
    except (UsageError, ValueError, ImportError, FileNotFoundError, IsADirectoryError, PermissionError) as err:
        return _report(prog, err)
    except RuntimeError as err:
        # A parameter that only a traced check can judge (r_h against r_t, say)
        # is reported by `equinox.error_if` at run time: still a bad argument.
        # Any other (HDF5's "unable to extend file") is a failure, in one line too.
        bad_argument = isinstance(err, getattr(eqx, "EquinoxRuntimeError", ()))
        return _report(prog, err, EXIT_USAGE if bad_argument else EXIT_FAILED)
    except BrokenPipeError:
        # The reader of stdout has gone (`progenax info x.h5 | head -1`): stop quietly, as `cat` does.
        _drop_stdout()
        return EXIT_FAILED
    except OSError as err:
        # A disk full, `ulimit -f`, an I/O error: the atomic writers left the old file.
        return _report(prog, err, EXIT_FAILED)


def _drop_stdout() -> None:
    """Point stdout at the null device, so that what is still buffered for a
    reader that has gone is dropped without another error at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (a test's capture)
        pass


def compile_cache_dir() -> Path | None:
    """Where the command line keeps compiled XLA programs, or None when switched off.

    `$PROGENAX_COMPILE_CACHE` names the directory, or switches the cache off
    with 0, off, false or no; by default `$XDG_CACHE_HOME/progenax/xla`
    (`~/.cache/progenax/xla`).
    """
    value = os.environ.get(CACHE_ENV)
    if value is not None and value.strip().lower() in ("", "0", "off", "false", "no"):
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "progenax" / "xla"


def enable_compile_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache in `path` (default
    `compile_cache_dir()`); returns the directory, or None when switched off.

    JAX keys each entry by the program, its shapes, the jax/jaxlib version and
    the device, so a stale entry is never used: a second `progenax build` of
    the same shape loads its programs instead of compiling them. A program
    that holds a host callback (an `equinox.error_if` check inside it) has the
    callback's address in its key and compiles again in every process: the
    builders keep their checks out of their compiled cores
    (`progenax.validation.deferred_checks`). The cache is kept below `CACHE_MAX_BYTES`. Every program
    is kept, however quickly it compiled (JAX's default keeps those above 1 s):
    `progenax info` alone runs 45 small programs of about 30 ms each, 1.5 s of
    a warm command's time, against about 1.5 ms to read each from the cache. The library itself does not turn
    the cache on: writing to a user's home directory and changing JAX's global
    configuration at `import progenax` would surprise a program that embeds
    it; such a program calls this function, or sets `jax_compilation_cache_dir`.
    """
    directory = Path(path).expanduser() if path is not None else compile_cache_dir()
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: build without the cache rather than fail
    if jax.config.jax_compilation_cache_dir == str(directory):
        return directory  # the host program set this cache up itself: keep its settings
    add_missing_access_times(directory)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # JAX evicts the least recently used entries above this size: a program with
    # a host callback (a traced check outside the builders) has the callback's
    # address in its key, so it misses in every new process and would pile up.
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
    return directory


def add_missing_access_times(directory: Path) -> None:
    """Give every entry of a cache folder the access-time file JAX's size cap needs.

    JAX writes `KEY-atime` beside `KEY-cache` only while a size cap is set, and
    with a cap every write first reads the access time of every entry: one
    entry written without a cap (by an older progenax, or by a program that
    shares the folder) makes every later write fail with a warning. The entry's
    modification time stands in for its last access.
    """
    try:
        for entry in directory.glob("*-cache"):
            atime = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
            if not atime.exists():
                atime.write_bytes(entry.stat().st_mtime_ns.to_bytes(8, "little"))
    except OSError:
        pass  # a folder we cannot write: JAX's own writes will fail (and say so) too


def _report(prog: str, err: BaseException, status: int = EXIT_USAGE) -> int:
    if os.environ.get("PROGENAX_DEBUG"):
        raise err
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    # equinox may put its JIT stack before the message: take the line it marks.
    marked = [line.split("EquinoxRuntimeError:", 1)[1].strip() for line in lines if "EquinoxRuntimeError:" in line]
    message = marked[-1] if marked else lines[0] if lines else type(err).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def run() -> NoReturn:
    """The `progenax` console script: `main`, then exit with its status at once.

    Once a command has written its files, the interpreter's usual teardown
    (freeing every module, array and XLA's client) took 0.2 s of a 4 s
    `progenax build king --n 100000`. So this waits for any effects JAX
    still has pending, flushes stdout and stderr, and ends the process with
    `os._exit`. Everything a command writes goes through context managers
    that have closed by the time `main` returns.
    """
    status = main()
    jax.effects_barrier()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (`progenax info x.h5 | head -1`) or a closed stream
            pass
    os._exit(status)


if __name__ == "__main__":
    run()
