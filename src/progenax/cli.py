"""The `progenax` command line.

```
progenax build plummer --n 10000 --r-h 1.0 --alpha 2.3 --Q 0.5 --seed 1 -o cluster.h5
progenax build eff --n 10000 --gamma 3.0 --r-t 20 -o cluster.npz
progenax build king --n 10000 --W0 6 --r-h 1.0 -o king.h5
progenax build dehnen --n 10000 --gamma 1 -o hernquist.h5
progenax info cluster.h5
progenax plot cluster.h5 -o quicklook.png
progenax audit
progenax demo --output-dir demo_output
```

Clusters are built in float64 (the command line turns on `jax_enable_x64`) and
written in progenax's own schema (`progenax.io`). A bad argument prints one line
on stderr and exits with status 2; a failed write (disk full, `ulimit -f`) prints
one line and exits with 1, leaving any old output file as it was (the writers are
atomic); `audit` exits with 1 when a check fails.
"""

from __future__ import annotations

import argparse
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
from .binaries import PAIRINGS, BinaryPopulation
from .binaries.distributions import ECCENTRICITIES, MASS_RATIOS, PERIODS
from .builders import model_builder, plummer_builder
from .io.amuse import require_amuse
from .models import REGISTRY
from .plotting import quicklook, relax_before_after
from .sph.relax import relax

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

IMFS = ("kroupa", "salpeter", "equal")
UNITS = ("physical", "henon")


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


def _png_path(text: str) -> Path:
    if Path(text).suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"the figure is a PNG: the path must end in .png, got {text!r}")
    return Path(text)


FORMAT_HELP = (
    "file format: our own hdf5/npz schema (default, from the extension), "
    "gadget/swift HDF5, nbody6/petar ASCII (Henon units), csv, or amuse (needs AMUSE installed)"
)


def _formats() -> tuple[str, ...]:

    return pio.FORMATS


def _checked_format(path: Path, fmt: str | None) -> str | None:
    """Without --format the extension must name our own schema."""
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

    b = sub.add_parser("build", help="build a cluster and write it to a file")
    b.add_argument("model", choices=sorted(REGISTRY), help="density model")
    b.add_argument("--n", type=_positive_int, default=10_000, help="number of stars (default 10000)")
    b.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="high-mass slope of the Kroupa IMF (default 2.3; not with --imf salpeter)",
    )
    b.add_argument(
        "--Q",
        dest="Q",
        type=float,
        default=None,
        help="virial ratio T/|W| (default 0.5; king, limepy: the model's own equilibrium velocities)",
    )
    b.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    _add_model_flags(b)
    _add_binary_flags(b)
    b.add_argument("--imf", choices=IMFS, default="kroupa", help="initial mass function (default kroupa)")
    b.add_argument("--units", choices=UNITS, default="physical", help="unit system of the file (default physical)")
    b.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("cluster.h5"),
        help="output file; without --format, .h5/.hdf5 or .npz (default cluster.h5)",
    )
    b.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    b.set_defaults(func=_cmd_build)

    i = sub.add_parser("info", help="summarise a cluster file")
    i.add_argument("path", type=Path, help="a cluster file (.h5/.hdf5/.npz, or any with --format)")
    i.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    i.set_defaults(func=_cmd_info)

    p = sub.add_parser("plot", help="quick-look figure of a cluster file")
    p.add_argument("path", type=Path, help="a cluster file (.h5/.hdf5/.npz, or any with --format)")
    p.add_argument("--format", choices=_formats(), default=None, help=FORMAT_HELP)
    p.add_argument("-o", "--output", type=_png_path, default=None, help="PNG to write (default: next to the file)")
    p.set_defaults(func=_cmd_plot)

    r = sub.add_parser("relax", help="relax a cluster towards its model density (SPH density loss)")
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
    r.set_defaults(func=_cmd_relax)

    a = sub.add_parser("audit", help="run the gradient audit of every builder")
    a.set_defaults(func=_cmd_audit)

    d = sub.add_parser("demo", help="build a 10,000-star Plummer cluster, write it and a figure")
    d.add_argument("--output-dir", type=Path, default=Path("demo_output"), help="default demo_output")
    d.add_argument("--n", type=_positive_int, default=10_000, help="number of stars (default 10000)")
    d.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    d.set_defaults(func=_cmd_demo)
    return parser


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
    for name, owners in sorted(_model_flags().items()):
        each = []
        for cls, p in sorted(owners, key=lambda owner: owner[0].NAME):
            unit = f" {p.unit}" if p.unit else ""
            default = "" if p.default is None else f", default {p.default}"
            each.append(f"{cls.NAME}: {p.doc}, {p.support.describe()}{unit}{default}")
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=int if owners[0][1].static else float,
            default=None,
            help="; ".join(each),
        )


_BINARY_CHOICES = {
    "binary_period": tuple(PERIODS),
    "binary_eccentricity": tuple(ECCENTRICITIES),
    "binary_mass_ratio": tuple(MASS_RATIOS),
    "binary_pairing": PAIRINGS,
}


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
    for name, choices in _BINARY_CHOICES.items():
        group.add_argument("--" + name.replace("_", "-"), choices=choices, default=None, help=helps[name])


def _binaries(args: argparse.Namespace) -> BinaryPopulation | None:
    """The population the binary flags describe, or None without --binary-fraction."""
    given = [name for name in _BINARY_CHOICES if getattr(args, name) is not None]
    if args.binary_fraction is None:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --binary-fraction (the binaries' share of systems)")
        return None
    if not 0.0 <= args.binary_fraction <= 1.0:
        raise UsageError(f"--binary-fraction must be in [0, 1], got {args.binary_fraction}")
    try:
        return BinaryPopulation(
            args.binary_fraction,
            args.binary_period or "kroupa95",
            args.binary_eccentricity,
            args.binary_mass_ratio,
            args.binary_pairing or "ratio",
        )
    except ValueError as err:
        raise UsageError(str(err)) from None


def _build(args: argparse.Namespace):
    """Build the cluster the `build` arguments describe."""

    model = REGISTRY[args.model]
    takes = {p.name for p in model.PARAMETERS}
    for name, owners in sorted(_model_flags().items()):
        if getattr(args, name) is not None and name not in takes:
            models = ", ".join(sorted(c.NAME for c, _ in owners))
            raise UsageError(f"--{name.replace('_', '-')} only applies to the {models} model(s), not {args.model}")
    if args.imf == "salpeter" and args.alpha is not None:
        raise UsageError("--alpha sets the Kroupa high-mass slope; --imf salpeter has its fixed slope 2.35")
    parameters = {name: getattr(args, name) for name in takes if getattr(args, name) is not None}
    return model_builder(
        jax.random.PRNGKey(args.seed),
        model,
        n=args.n,
        alpha=2.3 if args.alpha is None else args.alpha,
        Q=model.DEFAULT_Q if args.Q is None else args.Q,
        imf=args.imf,
        units=args.units,
        binaries=_binaries(args),
        **parameters,
    )


def _cmd_build(args: argparse.Namespace) -> int:

    path = args.output
    fmt = _checked_format(path, args.format)
    ic = _build(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    pio.write(ic, path, format=fmt)
    print(f"{pio.summary_line(ic)} -> {path}")
    return EXIT_OK


def _cmd_info(args: argparse.Namespace) -> int:

    ic = pio.read(args.path, format=args.format)
    print(f"{'file':<17} {args.path}")
    print(pio.format_summary(ic))
    return EXIT_OK


def _cmd_plot(args: argparse.Namespace) -> int:

    ic = pio.read(args.path, format=args.format)
    out = args.output or args.path.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    quicklook(ic, out)
    print(f"wrote {out}")
    return EXIT_OK


def _cmd_relax(args: argparse.Namespace) -> int:

    if args.eta <= 0:
        raise UsageError(f"--eta must be positive, got {args.eta}")
    ic = pio.read(args.path, format=args.format)
    out_format = _checked_format(args.output, None)
    try:
        pio.check_finite_arrays(ic)  # NaN in would be NaN out, after the whole relaxation
    except ValueError as err:
        raise UsageError(f"{args.path}: {err}; nothing to relax") from None
    relaxed = relax(ic, steps=args.steps, eta=args.eta, progress=args.progress)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    pio.write(relaxed, args.output, format=out_format)
    print(f"{pio.summary_line(relaxed)} -> {args.output}")
    if args.plot is not None:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        relax_before_after(ic, relaxed, args.plot, eta=args.eta)
        print(f"wrote {args.plot}")
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
    out.mkdir(parents=True, exist_ok=True)
    ic = plummer_builder(jax.random.PRNGKey(args.seed), n=args.n, r_h=1.0, alpha=2.3, Q=0.5, imf="kroupa")
    cluster = pio.write(ic, out / "cluster.h5")
    figure = quicklook(ic, out / "quicklook.png")
    print(f"Plummer cluster, Kroupa IMF (seed {args.seed})")
    print(pio.format_summary(ic))
    print()
    print(f"wrote {cluster}    (inspect with: progenax info {cluster})")
    print(f"wrote {figure}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`); return the exit status.

    Used as the `progenax` console script, whose caller exits with the returned
    status. A bad argument or unreadable file prints one line and returns 2; a
    write or run that fails (`OSError` such as a full disk, `RuntimeError`)
    prints one line and returns 1 (set the environment variable
    `PROGENAX_DEBUG=1` to see the traceback instead).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    _enable_float64()
    prog = f"progenax {args.command}"
    try:
        return args.func(args)
    except (UsageError, ValueError, ImportError, FileNotFoundError, IsADirectoryError, PermissionError) as err:
        return _report(prog, err)
    except RuntimeError as err:
        # A parameter that only a traced check can judge (r_h against r_t, say)
        # is reported by `equinox.error_if` at run time: still a bad argument.
        # Any other (HDF5's "unable to extend file") is a failure, in one line too.
        bad_argument = isinstance(err, getattr(eqx, "EquinoxRuntimeError", ()))
        return _report(prog, err, EXIT_USAGE if bad_argument else EXIT_FAILED)
    except OSError as err:
        # A disk full, `ulimit -f`, an I/O error: the atomic writers left the old file.
        return _report(prog, err, EXIT_FAILED)


def _report(prog: str, err: BaseException, status: int = EXIT_USAGE) -> int:
    if os.environ.get("PROGENAX_DEBUG"):
        raise err
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    # equinox may put its JIT stack before the message: take the line it marks.
    marked = [line.split("EquinoxRuntimeError:", 1)[1].strip() for line in lines if "EquinoxRuntimeError:" in line]
    message = marked[-1] if marked else lines[0] if lines else type(err).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
