"""Importing progenax makes glibc keep freed memory, so that a program's
temporaries stop page-faulting on every call (`progenax._allocator`).

The measure is the process's minor page faults (`getrusage`) during one call of
the SPH density loss of 200,000 particles (2D, periodic, float32), whose
temporaries take about 44 MB (XLA's `memory_analysis`), fewest over three
calls after a first one: a count of pages, not a time. With glibc's defaults
each call maps that buffer afresh and touches every page of it; kept, a call
reuses the pages of the one before.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

import progenax  # noqa: F401  (the import is what sets the allocator)
from progenax import _allocator

N = 200_000
MMAP_THRESHOLD_PAGES = 32 * 2**20 // 4096  # glibc's largest mmap threshold, 32 MiB

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or _allocator._glibc_mallopt() is None, reason="glibc's mallopt only"
)


def faults_and_temporary_pages() -> tuple[int, int]:
    """(fewest minor page faults of one call over three after a first, pages of the temporaries)."""
    import jax
    import jax.numpy as jnp

    from progenax.sph import density_loss

    box = (N / 10.0) ** 0.5
    x = jax.random.uniform(jax.random.PRNGKey(0), (N, 2), jnp.float32) * box
    program = jax.jit(lambda x: density_loss(x, 1.0, 0.5, 10.0, box=box)).lower(x).compile()
    pages = program.memory_analysis().temp_size_in_bytes // 4096
    program(x).block_until_ready()
    return _allocator.fewest_page_faults(lambda: program(x).block_until_ready()), pages


@glibc_only
@pytest.mark.skipif(os.environ.get(_allocator.DEFAULTS_ENV) == "1", reason="this process opted out")
def test_temporaries_reuse_their_pages_after_import():
    assert _allocator.KEPT
    faults, pages = faults_and_temporary_pages()
    assert pages > MMAP_THRESHOLD_PAGES  # the premise: glibc's defaults would map them afresh
    # Kept: a few pages at most (the result, the runtime's bookkeeping); a
    # tenth of the temporaries' pages leaves room for those and still fails
    # if they are mapped afresh.
    assert faults < pages // 10


@glibc_only
def test_glibc_defaults_fault_on_every_call():
    """The counterfactual, in a process that opts out (PROGENAX_MALLOC_DEFAULTS=1):
    every call touches the temporaries' pages anew (at least half of them)."""
    env = {**os.environ, _allocator.DEFAULTS_ENV: "1"}
    result = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    faults, pages = map(int, result.stdout.split()[-2:])
    assert faults > pages // 2


def test_opting_out_leaves_the_allocator_alone(monkeypatch):
    monkeypatch.setenv(_allocator.DEFAULTS_ENV, "1")
    assert _allocator.keep_freed_memory() is False


def test_no_glibc_means_nothing_is_set(monkeypatch):
    monkeypatch.delenv(_allocator.DEFAULTS_ENV, raising=False)
    monkeypatch.setattr(_allocator, "_glibc_mallopt", lambda: None)
    assert _allocator.keep_freed_memory() is False


if __name__ == "__main__":
    print(*faults_and_temporary_pages())
