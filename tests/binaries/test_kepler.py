"""solve_kepler against a 130-bit mpmath reference, its implicit-function gradients and float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.binaries import solve_kepler, true_anomaly
from progenax.binaries.kepler import solve_kepler_sin_cos

mpmath = pytest.importorskip("mpmath")

TWO_PI = 2.0 * np.pi


def _grid() -> tuple[np.ndarray, np.ndarray]:
    """A dense (M, e) grid with the hard corners: M near 0, pi and 2 pi, e near 1."""
    M = np.concatenate(
        [
            np.linspace(0.0, TWO_PI, 120, endpoint=False),
            [1e-300, 1e-100, 1e-16, 1e-12, 1e-8, 1e-5, 1e-3, 1e-2],
            np.pi + np.array([-1e-8, -1e-12, -1e-15, 0.0, 1e-15, 1e-12, 1e-8]),
            TWO_PI - np.array([1e-3, 1e-8, 1e-12, 1e-15]),
            [np.nextafter(TWO_PI, 0.0)],
        ]
    )
    e = np.concatenate([np.linspace(0.0, 0.999, 50), [0.9, 0.99, 0.995, 0.998, 0.9985, 0.999]])
    MM, ee = np.meshgrid(M, e, indexing="ij")
    return MM.ravel(), ee.ravel()


def _reference(M: np.ndarray, e: np.ndarray, start: np.ndarray) -> list:
    """E to ~1e-35 by Newton in 130-bit arithmetic from a double-precision start.

    Two steps from an error of ~1e-16 reach the 130-bit floor (quadratic
    convergence), and Newton's root is the unique root of E - e sin E = M.
    """
    out = []
    with mpmath.workprec(130):
        for Mi, ei, Ei in zip(M, e, start):
            m, ec, x = mpmath.mpf(float(Mi)), mpmath.mpf(float(ei)), mpmath.mpf(float(Ei))
            for _ in range(2):
                x = x - (x - ec * mpmath.sin(x) - m) / (1 - ec * mpmath.cos(x))
            out.append(x)
    return out


@pytest.fixture(scope="module")
def solved():
    M, e = _grid()
    E = np.asarray(jax.jit(solve_kepler)(M, e))
    return M, e, E, _reference(M, e, E)


def test_error_in_ulp(solved):
    M, e, E, ref = solved
    ulp = np.array([abs(float(mpmath.mpf(float(x)) - r)) / np.spacing(abs(float(r))) for x, r in zip(E, ref)])
    print(f"solve_kepler: max error {ulp.max():.2f} ulp of |E| over {ulp.size} grid points (mean {ulp.mean():.2f})")
    assert ulp.max() <= 4.0


def test_gradients_match_closed_forms(solved):
    M, e, _, ref = solved
    dE_dM, dE_de = jax.jit(jax.vmap(jax.grad(solve_kepler, argnums=(0, 1))))(M, e)
    with mpmath.workprec(130):
        slope = [1 - mpmath.mpf(float(ei)) * mpmath.cos(r) for ei, r in zip(e, ref)]
        want_M = np.array([float(1 / s) for s in slope])
        want_e = np.array([float(mpmath.sin(r) / s) for r, s in zip(ref, slope)])
    err_M = np.max(np.abs(np.asarray(dE_dM) - want_M) / np.abs(want_M))
    err_e = np.max(np.abs(np.asarray(dE_de) - want_e) / np.maximum(np.abs(want_e), np.abs(want_M)))
    print(f"solve_kepler gradients: max relative error dE/dM {err_M:.1e}, dE/de {err_e:.1e}")
    assert err_M < 1e-12 and err_e < 1e-12


def test_any_branch_and_broadcasting():
    M = jnp.array([-20.0, -3.0, -1e-9, 7.0, 40.0])[:, None]
    e = jnp.array([0.0, 0.5, 0.95])[None, :]
    E = solve_kepler(M, e)
    assert E.shape == (5, 3)
    assert np.allclose(E - e * jnp.sin(E), M, rtol=0, atol=1e-13)
    assert np.all(np.abs(E - M) <= np.pi)
    with pytest.raises(ValueError, match="newton_steps"):
        solve_kepler(1.0, 0.1, newton_steps=-1)


def test_true_anomaly_matches_position():
    E = jnp.linspace(-3.0, 3.0, 13)
    e = 0.7
    nu = true_anomaly(E, e)
    r = 1 - e * jnp.cos(E)
    assert np.allclose(r * jnp.cos(nu), jnp.cos(E) - e) and np.allclose(
        r * jnp.sin(nu), jnp.sqrt(1 - e * e) * jnp.sin(E)
    )


def test_float32_finite():
    with jax.enable_x64(False):
        M = jnp.linspace(0.0, TWO_PI, 721, dtype=jnp.float32)
        e = jnp.array([0.0, 0.5, 0.9, 0.99, 0.999, 0.9999], jnp.float32)
        E = jax.jit(solve_kepler)(M[:, None], e[None, :])
        grads = jax.jit(jax.vmap(jax.vmap(jax.grad(solve_kepler, argnums=(0, 1)), (None, 0)), (0, None)))(M, e)
        assert E.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(E)))
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
        # Float32 residual: a few ulp of 2 pi.
        assert float(jnp.max(jnp.abs(E - e * jnp.sin(E) - M[:, None]))) < 2e-6


def test_sin_cos_of_the_root_and_stored_copy(solved):
    """solve_kepler_sin_cos: E as solve_kepler, sin E and cos E to a few eps of
    the sines of that E (the addition formulas from the last Newton step), and
    the stored variant bit for bit the same."""
    M, e, E, _ = solved
    plain = jax.jit(lambda M, e: solve_kepler_sin_cos(M, e))(M, e)
    stored = jax.jit(lambda M, e: solve_kepler_sin_cos(M, e, store=True))(M, e)
    assert np.array_equal(np.asarray(plain[0]), E)
    for a, b in zip(plain, stored):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # |d sin| <= |dE| + rounding: E is within a few ulp of |E| <= 2 pi of its root.
    tol = 8 * np.finfo(np.float64).eps * np.maximum(1.0, np.abs(E))
    assert np.all(np.abs(np.asarray(plain[1]) - np.sin(E)) <= tol)
    assert np.all(np.abs(np.asarray(plain[2]) - np.cos(E)) <= tol)
