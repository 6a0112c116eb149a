r"""Freed memory kept in the process, so that XLA's temporaries do not page-fault on every call.

XLA's CPU runtime allocates a program's temporaries with `malloc` on every call
and frees them at its end. glibc serves a request of more than
`M_MMAP_THRESHOLD` (at most 32 MiB) with an `mmap` of its own and unmaps it on
`free`, so each call touches fresh zero pages: one page fault per 4 KiB, a few
microseconds each, in the kernels that first write them. A million-particle
pair sum holds 250-400 MB of temporaries: the SPH density loss of
`benchmarks/sph.py` at N = 1e6 took 66,400 faults a call in 2D (71,500 for
its gradient) and 90,100 in 3D (95,000), and under 1,000 with this module
(`getrusage`'s minor faults). The benchmark's times, each way in its own
run on the project's 2-core machine (`PROGENAX_MALLOC_DEFAULTS=1` for
glibc's defaults; float64, best of 5):

    N = 1e6                glibc's defaults      kept (this module)
    2D forward / gradient  0.415 / 0.605 s       0.340 / 0.540 s
    3D forward / gradient  0.901 / 2.21 s        0.791 / 2.04 s
    N = 1e5, 2D gradient   0.0602 s              0.0479 s

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


KEPT = keep_freed_memory()
