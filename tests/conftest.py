"""Physics and gradient tests run in float64; float32 smoke tests opt out locally."""

import glob
import os
import shutil
import tempfile

# XLA's CPU compiler with its legacy loop emitters instead of the newer fusion
# emitters: measured on tests/test_king_builder.py, 25% less CPU time (the suite
# is mostly compiles). Set before jax makes its CPU client. Numerics are IEEE in
# both; transcendental functions may round differently in the last bit, so the
# bit-for-bit output hashes are computed in a subprocess with the default flags
# (tests/builders/test_output_hashes.py), as users' programs run.
# PROGENAX_TEST_XLA_FLAGS=default runs the whole suite with the defaults.
#
# And LLVM at optimisation level 1, not XLA's default: the suite runs small
# programs once, and at its default level LLVM spends seconds on small static shapes
# (`gravoturb.star_builder(n=300, grid=16)` compiled in 6.1-7.8 s, 1.9-2.0 s at
# level 1; grid=32 3.0-3.1 s against 1.9 s). Test-only for the whole process:
# a user's own `jit` runs at the default level (the library's run-once
# programs take level 1 themselves, `progenax._compile.FAST_COMPILE`).
TEST_ONLY_XLA_FLAGS = ("--xla_cpu_use_fusion_emitters=false", "--xla_backend_optimization_level=1")
if os.environ.get("PROGENAX_TEST_XLA_FLAGS") != "default":
    _flags = os.environ.get("XLA_FLAGS", "")
    for _flag in TEST_ONLY_XLA_FLAGS:
        if _flag.split("=")[0] not in _flags:
            _flags = f"{_flags} {_flag}".strip()
    os.environ["XLA_FLAGS"] = _flags

import gc  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

from progenax.cli import CACHE_MAX_BYTES  # noqa: E402 (after x64 is on)

# Python's cyclic garbage collector rescans every live object (jax's caches
# and traced graphs) ever more often while a builder is traced: with the
# imported modules frozen out of its reach and a first threshold 70 times the
# default (700), tests/test_king_builder.py takes 10% less CPU time
# (interleaved runs: 58, 55 s against 64, 61 s). Cycles are still collected,
# only in larger batches.
gc.collect()
gc.freeze()
gc.set_threshold(50_000, 20, 20)

# One XLA compilation cache per test run, shared by the xdist workers and the
# subprocesses the tests start: most of the suite's time is compiling the same
# builders in several files and processes. The controller (imported first)
# makes the directory; workers and subprocesses inherit it through the
# environment, and the controller removes it at the end. Starts empty, so a run
# on a fresh machine gains exactly what a user's second build would.
_RUN_CACHE_ENV = "PROGENAX_TEST_XLA_CACHE"
if _RUN_CACHE_ENV not in os.environ:
    os.environ[_RUN_CACHE_ENV] = tempfile.mkdtemp(prefix="progenax-test-xla-")
    _OWNS_RUN_CACHE = True
else:
    _OWNS_RUN_CACHE = False
jax.config.update("jax_compilation_cache_dir", os.environ[_RUN_CACHE_ENV])
# `progenax.cli.main` (in-process, and in the subprocesses tests start) turns on
# its persistent cache: point it at the run's, never at ~/.cache
# (tests/test_cli.py checks the cache itself with its own directory).
os.environ.setdefault("PROGENAX_COMPILE_CACHE", os.environ[_RUN_CACHE_ENV])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
# The command line's cache is size-capped (least-recently-used eviction, with
# access-time files beside the entries): every process sharing the directory must
# run the cache in that mode.
jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)

_saved = {"hits": 0, "seconds": 0.0}


def _count_cache_hit(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        _saved["hits"] += 1


def _count_saved_time(event, duration, **kwargs):
    if event == "/jax/compilation_cache/compile_time_saved_sec":
        _saved["seconds"] += duration


jax.monitoring.register_event_listener(_count_cache_hit)
jax.monitoring.register_event_duration_secs_listener(_count_saved_time)


def pytest_sessionfinish(session):
    """Each process leaves its cache figures beside the cache for the summary."""
    directory = os.environ[_RUN_CACHE_ENV]
    if os.path.isdir(directory):
        with open(os.path.join(directory, f"saved-{os.getpid()}.txt"), "w") as out:
            out.write(f"{_saved['hits']} {_saved['seconds']}\n")


def pytest_terminal_summary(terminalreporter):
    hits, seconds = 0, 0.0
    for name in glob.glob(os.path.join(os.environ[_RUN_CACHE_ENV], "saved-*.txt")):
        with open(name) as f:
            h, s = f.read().split()
        hits, seconds = hits + int(h), seconds + float(s)
    terminalreporter.write_line(f"XLA run cache: {hits} hits, {seconds:.0f} s of compilation saved")


def pytest_unconfigure(config):
    if _OWNS_RUN_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ[_RUN_CACHE_ENV], ignore_errors=True)


def _count_memory_maps() -> int:
    """This process's memory mappings (0 where /proc is not there)."""
    try:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as limit:
            return int(limit.read())
    except (OSError, ValueError):
        return 65530  # Linux's default


# Every compiled program keeps its kernels' code in memory maps of its own
# (about 300 for a builder), and a worker that compiled a few hundred programs
# reached Linux's vm.max_map_count (65,530): a CI run segfaulted in XLA's cache
# write (an mmap that failed) with the other worker at 42,951 maps. Past half
# the limit, a worker drops JAX's caches after a test file; what the next
# files need again comes back from the run's persistent cache.
_MAPS_HIGH = _map_limit() // 2


@pytest.fixture(autouse=True, scope="module")
def _release_programs_when_memory_maps_run_high():
    yield
    if _count_memory_maps() > _MAPS_HIGH:
        jax.clear_caches()
        gc.collect()


# The longest files first. xdist hands each worker whole files (`--dist
# loadfile`) in collection order (`--no-loadscope-reorder` in the Makefile; its
# default order, most tests first, started the two single-test sharding files,
# two minutes each, last of all). Longest first leaves the shortest files to even
# out the two workers' ends. Seconds per file on the 2-core machine (the sum of
# `--durations=0` per file in `CI=true PYTEST_ADDOPTS=--durations=0 bash .ci/run`,
# an Intel AVX-512 machine, 2026-12-06), heaviest first; the rest keep their order.
LONGEST_FILES = (
    "tests/test_audit.py",  # 141 s
    "tests/sharding/test_builders.py",  # 120 s
    "tests/sharding/test_fractal.py",  # 104 s
    "tests/diagnostics/test_energy.py",  # 96 s
    "tests/sph/test_relax.py",  # 79 s
    "tests/sph/test_density.py",  # 67 s
    "tests/test_eff_builder.py",  # 48 s
    "tests/neighbours/test_engine.py",  # 44 s
    "tests/profiles/test_king.py",  # 36 s
    "tests/test_fractal.py",  # 35 s
    "tests/builders/test_output_hashes.py",  # 33 s
    "tests/sph/test_pairs.py",  # 32 s
    "tests/test_cli.py",  # 31 s
    "tests/test_examples.py",  # 28 s
)


def pytest_collection_modifyitems(config, items):
    stale = [path for path in LONGEST_FILES if not (config.rootpath / path).is_file()]
    if stale:  # a renamed or removed file: its place in the order would be lost silently
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FILES names missing files: {stale}")
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
