"""Rotation in equilibrium (`rotation=k`, `rotation_scale=L_0`): the flip of v_phi.

`apply_rotation` is checked on its own (cheap, eager), then through the builder:
positions bit-identical to the non-rotating build at the same key, v_z
bit-identical, each star's |v| equal up to the frame shift the finish removes
(the centre-of-mass velocity of the flipped set, a few sigma / sqrt(N)), and the
mean v_phi in radial bins equal to k <|v_phi|> (L_0 = 0) within 3 standard errors
(the sample standard deviation of v_phi in the bin over sqrt(n)).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import progenax
from progenax.diagnostics.energy import kinetic_energy
from progenax.structure.rotation import apply_rotation, prograde_probability


def _cylindrical(x, v):
    R = np.hypot(x[:, 0], x[:, 1])
    L_z = x[:, 0] * v[:, 1] - x[:, 1] * v[:, 0]
    return R, L_z, L_z / R


def _gaussian_cloud(n=4000, seed=0):
    kx, kv = jax.random.split(jax.random.PRNGKey(seed))
    return jax.random.normal(kx, (n, 3)), jax.random.normal(kv, (n, 3))


def test_flip_changes_only_the_sign_of_v_phi():
    x, v = _gaussian_cloud()
    out = apply_rotation(jax.random.PRNGKey(1), x, v, 0.5)
    xn, vn, on = np.asarray(x), np.asarray(v), np.asarray(out)
    np.testing.assert_array_equal(on[:, 2], vn[:, 2])
    np.testing.assert_allclose(np.linalg.norm(on, axis=1), np.linalg.norm(vn, axis=1), rtol=1e-13)
    R, L0, phi0 = _cylindrical(xn, vn)
    _, L1, phi1 = _cylindrical(xn, on)
    np.testing.assert_allclose(np.abs(L1), np.abs(L0), rtol=1e-12)
    v_R0 = (xn[:, 0] * vn[:, 0] + xn[:, 1] * vn[:, 1]) / R
    v_R1 = (xn[:, 0] * on[:, 0] + xn[:, 1] * on[:, 1]) / R
    np.testing.assert_allclose(v_R1, v_R0, rtol=1e-10, atol=1e-12)
    # k = 0.5, L_0 = 0: P(L_z > 0) = 3/4; binomial standard error sqrt(p (1-p) / n)
    frac = np.mean(L1 > 0)
    assert abs(frac - 0.75) < 3.0 * np.sqrt(0.75 * 0.25 / len(L1))


@pytest.mark.parametrize("k,sign", [(1.0, 1), (-1.0, -1)])
def test_full_rotation_puts_every_star_on_one_side(k, sign):
    x, v = _gaussian_cloud(500)
    out = np.asarray(apply_rotation(jax.random.PRNGKey(2), x, v, k))
    _, L_z, _ = _cylindrical(np.asarray(x), out)
    assert np.all(sign * L_z > 0)


def test_prograde_probability_shape():
    L = jnp.array([-2.0, 0.0, 0.5, 100.0])
    np.testing.assert_allclose(prograde_probability(L, 0.5, 0.0), [0.75] * 4)
    np.testing.assert_allclose(prograde_probability(L, 1.0, 1.0), 0.5 * (1.0 + np.tanh(np.abs(L))))
    assert bool(jnp.all(jnp.isfinite(jax.grad(lambda s: prograde_probability(L, 0.5, s).sum())(0.0))))


def test_rotation_stream_leaves_other_draws_alone():
    ic0 = progenax.plummer_builder(0, n=1000, Q=None)
    ic1 = progenax.plummer_builder(0, n=1000, Q=None, rotation=0.5)
    ic2 = progenax.plummer_builder(0, n=1000, Q=None, rotation=0.0)  # same compile as ic1
    for ic in (ic1, ic2):
        # Positions and v_z come from the same draws; only the centre-of-mass
        # mean subtracted from them is a reduction that two compiled programs may
        # order differently (v_z 1 ulp on an AMD AVX2 CPU; positions 1.8e-15
        # absolute, under 1 ulp of the largest |x|, on an Intel AVX-512 one). A
        # changed stream would move them by ~r_h and ~sigma.
        for same, same0 in (
            (ic.state.positions, ic0.state.positions),
            (ic.state.velocities[:, 2], ic0.state.velocities[:, 2]),
        ):
            same, same0 = np.asarray(same), np.asarray(same0)
            np.testing.assert_allclose(same, same0, rtol=0, atol=4 * np.finfo(same.dtype).eps * np.abs(same0).max())
        np.testing.assert_array_equal(np.asarray(ic.state.masses), np.asarray(ic0.state.masses))
        # |v| agrees up to the removed centre-of-mass velocity of the flipped set
        shift = np.abs(np.linalg.norm(ic.state.velocities, axis=1) - np.linalg.norm(ic0.state.velocities, axis=1))
        sigma = float(np.std(ic0.state.velocities))
        assert shift.max() < 5.0 * sigma / np.sqrt(1000) * np.sqrt(3.0)
    assert float(ic1.params["rotation"]) == 0.5 and float(ic1.params["rotation_scale"]) == 0.0
    assert "rotation" not in ic0.params


def test_bad_rotation_eager():
    with pytest.raises(ValueError, match="rotation must be >= -1.0 and <= 1.0"):
        progenax.plummer_builder(0, n=100, rotation=1.5)
    with pytest.raises(ValueError, match="rotation_scale must be >= 0.0"):
        progenax.eff_builder(0, n=100, rotation=0.5, rotation_scale=-1.0)
    with pytest.raises(ValueError, match="rotation must be a scalar"):
        progenax.king_builder(0, n=100, rotation=jnp.ones(2))


def test_bad_rotation_under_jit_grad():
    # k and L_0 enter only through the flips (pathwise gradient 0): a jit(grad) keeps
    # no forward value, and the checks must still run.
    def observable(k, scale):
        v = progenax.plummer_builder(0, n=64, rotation=k, rotation_scale=scale).state.velocities
        return jnp.sum(v[:, 0] + v[:, 1] ** 2)

    gradient = jax.jit(jax.grad(observable, argnums=(0, 1)))
    assert [float(g) for g in gradient(0.5, 1.0)] == [0.0, 0.0]
    for args, name in (((1.5, 1.0), "rotation"), ((float("nan"), 1.0), "rotation"), ((0.5, -1.0), "rotation_scale")):
        with pytest.raises(Exception, match=f"{name} must be"):
            jax.block_until_ready(gradient(*args))


@pytest.fixture(scope="module")
def rotating_plummer():
    kw = dict(n=100_000, Q=None, imf="equal")
    return progenax.plummer_builder(5, **kw), progenax.plummer_builder(5, rotation=0.5, **kw)


@pytest.mark.slow
def test_rotation_curve_and_invariants(rotating_plummer):
    ic0, ic1 = rotating_plummer
    x = np.asarray(ic1.state.positions)
    v0, v1 = np.asarray(ic0.state.velocities), np.asarray(ic1.state.velocities)
    np.testing.assert_array_equal(x, np.asarray(ic0.state.positions))
    R, _, phi0 = _cylindrical(x, v0)
    _, L1, phi1 = _cylindrical(x, v1)
    edges = np.quantile(R, [0.0, 0.2, 0.4, 0.6, 0.8, 0.98])
    for lo, hi in zip(edges[:-1], edges[1:]):
        s = (R >= lo) & (R < hi)
        expected = 0.5 * np.mean(np.abs(phi0[s]))
        se = np.std(phi1[s]) / np.sqrt(s.sum())
        assert abs(np.mean(phi1[s]) - expected) < 3.0 * se, (lo, hi, np.mean(phi1[s]), expected, se)
    # total L_z = k sum m |L_z| (L_0 = 0): 3 standard errors of the sum of m L_z
    m = np.asarray(ic1.state.masses)
    Lz_total, expected = np.sum(m * L1), 0.5 * np.sum(m * np.abs(L1))
    assert abs(Lz_total - expected) < 3.0 * np.sqrt(np.sum((m * L1) ** 2) * (1 - 0.25))
    # virial ratio unchanged (the flips keep every |v|): T equal up to the removed frame shift
    T0 = float(kinetic_energy(v0, m))
    T1 = float(kinetic_energy(v1, m))
    assert abs(T1 / T0 - 1.0) < 1e-3


def test_rotation_scale_without_rotation_is_refused():
    # It was ignored: the cluster did not rotate and nothing was recorded.
    with pytest.raises(ValueError, match="rotation_scale applies to a rotating cluster"):
        progenax.plummer_builder(0, n=100, rotation_scale=3.0)
