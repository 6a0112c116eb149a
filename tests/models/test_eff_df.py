"""EFF velocities from the model's isotropic DF (the generic Eddington inversion).

Acceptance (slow, N = 1e5, Q = None): no star is unbound in the model's
potential, and the kurtosis of v_r in radial bins matches the isotropic DF's,
<v_r^4> / sigma^4, with both moments from the Jeans equations computed here on
a log grid (cumulative trapezoid, independent of the sampler):

    rho sigma^2(r)  = int_r^inf rho G M(r') / r'^2 dr'          (2nd order)
    rho <v_r^4>(r)  = int_r^inf 3 rho sigma^2 G M(r') / r'^2 dr' (4th order, isotropic)

A bin's prediction is the mass-weighted means' ratio <v_r^4>_bin / <v_r^2>_bin^2,
the sample's the same ratio of bin means; the tolerance is 3 standard errors of
the sample ratio by the delta method, with the sample (co)variances of v_r^4 and
v_r^2 over n (the DF's kurtosis is 2.5-2.8 in these bins: a Gaussian-velocity sampler,
kurtosis 3, fails by many of them).
"""

import jax
import numpy as np
import pytest
from scipy.integrate import cumulative_trapezoid

import progenax

N = 100_000


def _jeans_fourth_order(model, r_lo=1e-5, r_hi=1e9, size=40_001):
    """(r, rho, rho sigma^2, rho <v_r^4>) on a log grid (pc, Msun pc^-3, (km/s)^2, (km/s)^4)."""
    r = np.geomspace(r_lo, r_hi, size)
    rho = np.asarray(model.density(r))
    g = model.G * np.asarray(model.enclosed_mass(r)) / r**2
    lnr = np.log(r)
    # integrals from r to the grid's end, in ln r (integrand * r)
    p2 = cumulative_trapezoid((rho * g * r)[::-1], -lnr[::-1], initial=0.0)[::-1]
    p4 = cumulative_trapezoid((3.0 * p2 * g * r)[::-1], -lnr[::-1], initial=0.0)[::-1]
    return r, rho, p2, p4


@pytest.fixture(scope="module")
def eff_builds():
    # gamma is traced: one compile for both
    return {
        g: progenax.eff_builder(jax.random.PRNGKey(11), n=N, gamma=g, r_h=1.0, Q=None, imf="equal") for g in (3.0, 5.0)
    }


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [3.0, 5.0])
def test_eff_df_bound_and_kurtosis(eff_builds, gamma):
    ic = eff_builds[gamma]
    model = ic.model
    x, v = np.asarray(ic.state.positions), np.asarray(ic.state.velocities)
    r = np.linalg.norm(x, axis=1)
    psi = -np.asarray(model.potential(r))
    assert np.sum(0.5 * np.sum(v * v, axis=1) >= psi) == 0
    vr = np.sum(v * x, axis=1) / r
    grid, rho, p2, p4 = _jeans_fourth_order(model)
    w = rho * grid**3  # mass weight per ln r
    edges = np.quantile(r, [0.0, 0.2, 0.4, 0.6, 0.8, 0.95])
    kurtoses = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        s = (r >= lo) & (r < hi)
        n = s.sum()
        A, B = np.mean(vr[s] ** 4), np.mean(vr[s] ** 2)
        cov = np.cov(vr[s] ** 4, vr[s] ** 2) / n
        dA, dB = 1.0 / B**2, -2.0 * A / B**3
        se = np.sqrt(dA**2 * cov[0, 0] + dB**2 * cov[1, 1] + 2.0 * dA * dB * cov[0, 1])
        g = (grid >= lo) & (grid < hi)
        mass = np.trapezoid(w[g], np.log(grid[g]))
        m2 = np.trapezoid((p2 * grid**3)[g], np.log(grid[g])) / mass
        m4 = np.trapezoid((p4 * grid**3)[g], np.log(grid[g])) / mass
        assert abs(A / B**2 - m4 / m2**2) < 3.0 * se, (lo, hi, A / B**2, m4 / m2**2, se)
        kurtoses.append(m4 / m2**2)
    assert min(kurtoses) < 2.9  # the DF is not Gaussian: the test can tell


@pytest.mark.slow
def test_truncated_eff_df_stays_inside_r_t():
    r_t = 10.0
    ic = progenax.eff_builder(jax.random.PRNGKey(12), n=N, gamma=3.0, r_h=1.0, r_t=r_t, Q=None, imf="equal")
    model = ic.model
    x, v = np.asarray(ic.state.positions), np.asarray(ic.state.velocities)
    r = np.linalg.norm(x, axis=1)
    assert r.max() <= r_t
    # every orbit stays inside r_t: E_rel >= Psi(r_t), up to the frame shift the finish
    # removed (the sample's centre-of-mass velocity, below 5 sigma / sqrt(N) per axis)
    psi, psi_t = -np.asarray(model.potential(r)), -float(model.potential(r_t))
    speed = np.linalg.norm(v, axis=1)
    shift = 5.0 * np.sqrt(3.0) * np.std(v) / np.sqrt(N)
    e_rel = psi - 0.5 * speed**2
    assert np.all(e_rel > psi_t - speed * shift - 0.5 * shift**2)
    # the core's dispersion is the Jeans one (within 3 standard errors of the bin mean)
    inner = r < 1.0
    v2 = np.sum(v * v, axis=1)[inner] / 3.0
    sigma2 = np.asarray(model.velocity_dispersion(r[inner])) ** 2
    assert abs(v2.mean() - sigma2.mean()) < 3.0 * v2.std() / np.sqrt(inner.sum())
