"""The fractal builder: exact n, radial remap onto Plummer, virial ratio, D checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax import fractal_builder
from progenax.diagnostics import half_mass_radius, virial_ratio
from progenax.diagnostics.structure import q_parameter
from progenax.structure.fractal import box_fractal

MESH_N = 1500  # the tests that lower EXACT_MAX_N build this n (see test_virial_ratio_with_mesh_energy)


@pytest.fixture(scope="module")
def cluster():
    return fractal_builder(jax.random.PRNGKey(0), n=1000, D=1.6, r_h=1.3, Q=0.3)


def test_exactly_n_stars():
    n = 2
    ic = fractal_builder(jax.random.PRNGKey(n), n=n)
    s = ic.state
    assert s.positions.shape == (n, 3) and s.velocities.shape == (n, 3) and s.masses.shape == (n,)
    assert np.all(np.isfinite(np.asarray(s.positions))) and np.all(np.isfinite(np.asarray(s.velocities)))
    # One star has no potential energy, so no virial ratio (it was ignored: zero velocities).
    with pytest.raises(ValueError, match="n must be >= 2 for a virial ratio Q"):
        fractal_builder(jax.random.PRNGKey(1), n=1)


def test_exactly_n_stars_1000(cluster):
    s = cluster.state
    assert s.positions.shape == (1000, 3) and s.masses.shape == (1000,)
    assert np.all(np.isfinite(np.asarray(s.positions))) and np.all(np.isfinite(np.asarray(s.velocities)))
    # n distinct stars: the selection never takes a slot twice.
    assert len(np.unique(np.asarray(s.positions), axis=0)) == 1000


@pytest.mark.slow
def test_exactly_n_stars_12345():
    ic = fractal_builder(jax.random.PRNGKey(5), n=12345, D=1.6)
    assert ic.state.positions.shape == (12345, 3)
    assert np.all(np.isfinite(np.asarray(ic.state.positions)))
    r_h = half_mass_radius(ic.state.positions, ic.state.masses)
    assert abs(float(r_h) - 1.0) < 0.03


def test_half_mass_radius_after_remap(cluster):
    # The remap gives each star the Plummer radius of its enclosed mass fraction,
    # about the centre of mass, so the half-mass radius is r_h up to the star
    # straddling the half-mass point and the residual centre offset: 3% is the
    # issue's requirement (measured: 0.1%).
    r_h = half_mass_radius(cluster.state.positions, cluster.state.masses)
    assert abs(float(r_h) / 1.3 - 1.0) < 0.03


def test_virial_ratio_is_the_request(cluster):
    s = cluster.state
    q = virial_ratio(s.positions, s.velocities, s.masses, method="exact")
    assert abs(float(q) - 0.3) < 0.01


def test_substructure_survives_the_remap():
    # CW04 Q of the remapped cluster still orders with D (Plummer alone gives ~0.85+).
    q = {}
    for D in (1.6, 3.0):
        vals = [q_parameter(fractal_builder(jax.random.PRNGKey(k), n=1000, D=D).state.positions) for k in range(3)]
        q[D] = np.mean(vals)
    assert q[1.6] < q[3.0] - 0.1, q


def test_gradients_r_h_and_Q():
    # Central finite differences at relative step 1e-6 in float64: truncation
    # error ~1e-12, rounding ~1e-10; 1e-6 relative is a loose bound on both.
    key = jax.random.PRNGKey(3)

    def obs(r_h, Q, D):
        ic = fractal_builder(key, n=64, D=D, r_h=r_h, Q=Q)
        s = ic.state
        return jnp.sum(s.masses * jnp.sum(s.positions**2, -1)) + jnp.sum(s.masses * jnp.sum(s.velocities**2, -1))

    vg = jax.jit(jax.value_and_grad(obs, argnums=(0, 1, 2)))

    def f(*args):
        return vg(*args)[0]

    g = vg(1.0, 0.5, 2.0)[1]
    h = 1e-6
    fd_r = (f(1.0 + h, 0.5, 2.0) - f(1.0 - h, 0.5, 2.0)) / (2 * h)
    fd_q = (f(1.0, 0.5 + h, 2.0) - f(1.0, 0.5 - h, 2.0)) / (2 * h)
    np.testing.assert_allclose(g[0], fd_r, rtol=1e-6)
    np.testing.assert_allclose(g[1], fd_q, rtol=1e-6)
    assert float(g[2]) == 0.0  # D: survival draws, zero pathwise gradient (documented)


@pytest.mark.parametrize("D", [1.5, 3.1, float("nan")])
def test_bad_D(D):
    with pytest.raises(ValueError, match="D must be"):
        fractal_builder(0, n=10, D=D)


def test_D_must_be_a_scalar():
    with pytest.raises(ValueError, match="D must be a scalar"):
        fractal_builder(0, n=10, D=jnp.array([2.0, 2.5]))


@pytest.mark.parametrize("D", [0.5, 4.0, float("nan")])
def test_box_fractal_refuses_a_D_its_generations_are_not_sized_for(D):
    # The public generator took any D: 4 acted as 3, and below 1.6 the tree can
    # hold fewer than n leaves.
    with pytest.raises(ValueError, match="D must be >= 1.6 and <= 3.0"):
        box_fractal(jax.random.PRNGKey(0), 100, D)


def test_box_fractal_refuses_no_stars():
    with pytest.raises(ValueError, match="n must be >= 1"):  # was "math domain error"
        box_fractal(jax.random.PRNGKey(0), 0, 2.0)


def test_bad_D_under_jit_grad():
    # D's pathwise gradient is 0: the check must still run when only the gradient is kept.
    def observable(D):
        ic = fractal_builder(jax.random.PRNGKey(0), n=64, D=D)
        return jnp.sum(ic.state.masses * jnp.sum(ic.state.positions**2, axis=1))

    gradient = jax.jit(jax.grad(observable))  # one compile for the four values
    assert float(gradient(2.0)) == 0.0
    for D in (1.5, 3.1, float("nan")):
        with pytest.raises(Exception, match="D must be >= 1.6 and <= 3.0 and finite"):
            jax.block_until_ready(gradient(D))


def test_Q_none_is_an_error():
    with pytest.raises(ValueError, match="Q"):
        fractal_builder(0, n=10, Q=None)


def test_float32():
    with jax.enable_x64(False):
        ic = fractal_builder(jax.random.PRNGKey(0), n=200, D=2.0, segregation=0.5)
        assert ic.state.positions.dtype == jnp.float32
        assert np.all(np.isfinite(np.asarray(ic.state.positions)))
        assert np.all(np.isfinite(np.asarray(ic.state.velocities)))


def test_virial_ratio_with_mesh_energy(monkeypatch):
    # Issue 4: above EXACT_MAX_N the fractal scales Q with the substructure-aware
    # mesh W (the spherical estimate gave Q = 0.36 for a request of 0.5 at
    # n = 30,000). A cheap stand-in for the slow test below: the threshold is
    # lowered so that n = 1500 takes the same path, then Q is measured exactly.
    # The threshold is read when the builder's core is traced, and a compiled
    # core serves every call with the same static arguments: n = 1500 is built
    # by no test without the lowered threshold (an n = 2000 fractal is, in
    # tests/diagnostics), and the recorded mesh W shows that this path ran.
    import progenax.builders._common
    from progenax.diagnostics.known_energy import recall_potential_energy

    monkeypatch.setattr(progenax.builders._common, "EXACT_MAX_N", 1000)
    ic = fractal_builder(jax.random.PRNGKey(4), n=MESH_N, D=1.6, Q=0.5)
    s = ic.state
    assert recall_potential_energy(s.positions, s.masses, ic.weights, "mesh") is not None
    q = virial_ratio(s.positions, s.velocities, s.masses, method="exact")
    # The mesh W is within 0.3% of the exact one (tests/diagnostics), so Q is
    # within 0.0015 of the request; the bound is 0.01.
    assert abs(float(q) - 0.5) < 0.01


def test_henon_units_take_the_mesh_w_of_the_scaling(monkeypatch):
    # The mesh W the velocities were scaled with sets the Henon length unit
    # (no second W); it is the W of the centred cluster to round-off. The
    # threshold is lowered as above, and the physical build is the one above
    # (same n and key: its compile serves).
    import progenax.builders._common
    from progenax.diagnostics import potential_energy
    from progenax.state import InitialConditions

    given = []
    to_henon = InitialConditions.to_henon
    monkeypatch.setattr(InitialConditions, "to_henon", lambda ic, w=None: given.append(w) or to_henon(ic, w=w))
    monkeypatch.setattr(progenax.builders._common, "EXACT_MAX_N", 1000)
    key = jax.random.PRNGKey(4)
    henon = fractal_builder(key, n=MESH_N, D=1.6, Q=0.5, units="henon")
    assert len(given) == 1 and given[0] is not None
    physical = fractal_builder(key, n=MESH_N, D=1.6, Q=0.5).state
    w = potential_energy(physical.positions, physical.masses, method="mesh")
    r_v = progenax.units.G_PHYSICAL * jnp.sum(physical.masses) ** 2 / (2.0 * jnp.abs(w))
    np.testing.assert_allclose(float(henon.units.length_pc), float(r_v), rtol=1e-12)


def test_the_summary_recalls_the_mesh_w_of_the_scaling(monkeypatch):
    # The builder records the mesh W it scaled with against the arrays it
    # returns (in their units), and the command line's summary takes it instead
    # of summing that W again: a 1e6-star fractal spent half its 68 s doing so.
    # Thresholds lowered as above, at the same n (their compiles serve).
    import progenax.builders._common
    import progenax.diagnostics.energy
    from progenax import io as pio
    from progenax.diagnostics import potential_energy
    from progenax.diagnostics.known_energy import recall_potential_energy

    monkeypatch.setattr(progenax.builders._common, "EXACT_MAX_N", 1000)
    monkeypatch.setattr(progenax.diagnostics.energy, "EXACT_MAX_N", 1000)
    key = jax.random.PRNGKey(4)
    for units in ("physical", "henon"):
        ic = fractal_builder(key, n=MESH_N, D=1.6, Q=0.5, units=units)
        s = ic.state
        recalled = recall_potential_energy(s.positions, s.masses, ic.weights, "mesh")
        w = potential_energy(s.positions, s.masses, G=ic.units.G, method="mesh")
        # Measured before the move to the centre of mass: the same W to round-off.
        np.testing.assert_allclose(float(recalled), float(w), rtol=1e-13)
        assert recall_potential_energy(s.positions, s.masses, ic.weights, "spherical") is None

    def no_second_w(*args, **kwargs):
        raise AssertionError("the summary summed W again")

    monkeypatch.setattr(progenax.diagnostics.energy, "potential_energy", no_second_w)
    figures = pio.summary_figures(ic)
    assert abs(figures["Q"] - 0.5) < 1e-12  # T / |W| with the very W the velocities were scaled by
    copied = jax.tree.map(jnp.copy, ic)  # the same values in new arrays: nothing recorded for them
    with pytest.raises(AssertionError, match="summed W again"):
        pio.summary_figures(copied)


@pytest.mark.slow
@pytest.mark.parametrize("n", [30_000])
def test_virial_ratio_above_exact_max_n(n):
    # Issue 4's acceptance: exact Q within 0.01 of the request (measured 0.49991).
    ic = fractal_builder(jax.random.PRNGKey(0), n=n, D=1.6, Q=0.5)
    s = ic.state
    q = virial_ratio(s.positions, s.velocities, s.masses, method="exact")
    assert abs(float(q) - 0.5) < 0.01


def test_traced_zero_segregation_is_no_segregation():
    # Issue 22: the audit traces every float argument, and a traced S = 0 used to
    # re-pair masses with orbits in an energy order that moves with alpha and Q.
    key = jax.random.PRNGKey(2)
    static = fractal_builder(key, n=64, D=2.0).state
    traced = jax.jit(lambda S: fractal_builder(key, n=64, D=2.0, segregation=S).state)(0.0)
    # Equal up to rounding (one jit against op-by-op): no star changed its orbit.
    np.testing.assert_allclose(np.asarray(traced.positions), np.asarray(static.positions), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(traced.velocities), np.asarray(static.velocities), rtol=1e-10)


def test_remap_order_does_not_depend_on_the_masses():
    # The radial order is taken once about the unweighted centroid, so other
    # masses (another alpha) give the same order: the remap is continuous in them.
    from progenax.structure.fractal import box_fractal, remap_to_plummer

    x, _ = box_fractal(jax.random.PRNGKey(0), 300, 1.6)
    m1 = jnp.ones(300)
    m2 = jax.random.uniform(jax.random.PRNGKey(1), (300,), minval=0.1, maxval=10.0)
    r1, r2 = (np.linalg.norm(np.asarray(remap_to_plummer(x, m, jnp.asarray(1.0))), axis=1) for m in (m1, m2))
    np.testing.assert_array_equal(np.argsort(r1), np.argsort(r2))
