r"""Freed memory kept in the process, so that XLA's temporaries do not page-fault on every call.

XLA's CPU runtime allocates a program's temporaries with `malloc` on every call
and frees them at its end. glibc serves a request of more than
`M_MMAP_THRESHOLD` (at most 32 MiB) with an `mmap` of its own and unmaps it on
`free`, so each call touches fresh zero pages: one page fault per 4 KiB, a few
microseconds each, in the kernels that first write them. A million-particle
pair sum holds 250-400 MB of temporaries. `python benchmarks/sph.py --sizes
1e5 1e6`, once with `PROGENAX_MALLOC_DEFAULTS=1` (glibc's defaults) and once
without, on the project's 2-core machine (float64, best of 5; faults: the
minor page faults of one gradient call, `getrusage`):

    N = 1e6                glibc's defaults              kept (this module)
    2D forward / gradient  0.416 / 0.685 s, 71,533       0.332 / 0.536 s, 0
    3D forward / gradient  1.03 / 2.41 s, 94,971         0.804 / 2.12 s, 0

(an earlier pair of runs: 2D 0.415 / 0.605 -> 0.340 / 0.540 s, 3D 0.901 /
2.21 -> 0.791 / 2.04 s). At N = 1e5 the 2D temporaries stay under the
threshold (no faults either way) and the 3D gradient's took 9,595 faults.

`keep_freed_memory()` (run when this module is imported, the first thing
`import progenax` does; `KEPT` says whether it took effect) sets glibc's
`M_MMAP_MAX` to 0, so every allocation comes from the heap, and
`M_TRIM_THRESHOLD` to `TRIM_THRESHOLD`, so the heap keeps that much freed
memory at its top rather than returning it to the system: the next call
reuses the same pages. The price is resident memory that stays at the
process's high-water mark (plus up to `TRIM_THRESHOLD` free at the top) after
a large computation, the usual trade of a numerical code's allocator.
Results are unchanged: only where the memory comes from.

It reaches every allocation of the calling thread, and those under 64 MiB of
XLA's worker threads. A worker thread's allocation of 64 MiB or more (a large
program's single buffer, a sort's scratch) comes from glibc's per-thread
arena, which maps it afresh whatever these settings: the pair sums above keep
their pages, a program whose one temporary is a 64 MiB array does not.
`M_ARENA_MAX = 1` would send those to the heap too, but it made builders
compile 20-35% slower (King's gradient at n = 1e4: 4.2-5.5 s against
5.7-7.3 s, alternated), the compiler's threads then sharing one lock, so it
is not set.

It applies to the whole process (NumPy's and other libraries' allocations
too) and only under glibc (Linux); elsewhere it does nothing. Set
`PROGENAX_MALLOC_DEFAULTS=1` in the environment before importing progenax to
keep glibc's defaults.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
"""glibc's `mallopt` parameter numbers (malloc.h)."""

TRIM_THRESHOLD = 2**30
"""Free memory (bytes) the heap may keep at its top: more than the temporaries
of a million-particle 3D gradient (about 370 MB)."""

DEFAULTS_ENV = "PROGENAX_MALLOC_DEFAULTS"


def _glibc_mallopt():
    """glibc's `mallopt`, or None (another C library, or none found)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, ValueError):  # no confstr name, no symbol, no C library
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory in the process (module notes); whether it
    was set (False: not glibc, or `PROGENAX_MALLOC_DEFAULTS=1`)."""
    if os.environ.get(DEFAULTS_ENV) == "1":
        return False
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    # mallopt returns 1 on success, 0 on error.
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def fewest_page_faults(call: Callable[[], object], calls: int = 3) -> int:
    """The fewest minor page faults (`getrusage`) one of `calls` runs of
    `call()` took: the pages a program's temporaries touch afresh (call it
    once before, so that compiling and first use are not counted; block on
    its result inside `call`). Unix only (`resource`)."""
    import resource  # not on Windows, where importing progenax must still work

    counts = []
    for _ in range(calls):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        call()
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return min(counts)


KEPT = keep_freed_memory()
