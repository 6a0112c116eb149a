"""cloud_builder and star_builder: shapes, placement, thresholds, gradients, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.diagnostics import half_mass_radius
from progenax.gravoturb import cloud_builder, dense_gas_fraction, star_builder, star_formation_weights

KEY = jax.random.PRNGKey(7)
GRID = 16
N = 2000
M0, ALPHA0 = 5.0, 2.0


def _cloud_observable(mach, alpha):
    cloud = cloud_builder(KEY, n=N, grid=GRID, mach=mach, pdf_slope=alpha)
    return dense_gas_fraction(cloud.field), cloud


def _stars_observable(mach, alpha):
    ic = star_builder(KEY, n=N, grid=GRID, mach=mach, pdf_slope=alpha)
    origin = jnp.zeros(3, ic.state.positions.dtype)
    return half_mass_radius(ic.state.positions, ic.state.masses, centre=origin), ic


# One compilation per builder: values, the full output (aux) and gradients together.
_cloud_vg = jax.jit(jax.value_and_grad(_cloud_observable, argnums=(0, 1), has_aux=True))
_stars_vg = jax.jit(jax.value_and_grad(_stars_observable, argnums=(0, 1), has_aux=True))


def _f64(x):
    """A strongly typed float64 scalar: every call of a jitted function sees the same type."""
    return jnp.asarray(x, jnp.float64)


@pytest.fixture(scope="module")
def cloud():
    return _cloud_vg(_f64(M0), _f64(ALPHA0))


@pytest.fixture(scope="module")
def stars():
    return _stars_vg(_f64(M0), _f64(ALPHA0))


def _central_difference(vg, mach, alpha, which):
    """Central difference with the relative step 1e-5 of the gradient audit (same key)."""
    h = 1e-5 * (mach, alpha)[which]
    dm, da = (h, 0.0) if which == 0 else (0.0, h)
    up = vg(_f64(mach + dm), _f64(alpha + da))[0][0]
    down = vg(_f64(mach - dm), _f64(alpha - da))[0][0]
    return float((up - down) / (2.0 * h))


# -- gas ------------------------------------------------------------------------------
def test_cloud_particles(cloud):
    (_, gas), _ = cloud
    s = gas.state
    assert s.positions.shape == (N, 3) and s.velocities.shape == (N, 3) and s.masses.shape == (N,)
    assert float(jnp.sum(s.masses)) == pytest.approx(1000.0, rel=1e-12)
    r = np.linalg.norm(np.asarray(s.positions), axis=-1)
    cell = float(gas.field.cell_size)
    # The density interpolates between the centres inside the unit sphere and the zero
    # centres beside them: a particle lies within one cell diagonal of an inside centre.
    assert r.max() <= 1.0 + np.sqrt(3.0) * cell
    np.testing.assert_allclose(np.asarray(gas.internal_energy), 0.2**2 / (5.0 / 3.0 - 1.0), rtol=1e-12)
    h = np.asarray(gas.smoothing_length)
    assert np.all(np.isfinite(h)) and np.all(h > 0)
    np.testing.assert_allclose(np.asarray(jnp.sum(s.velocities, axis=0)), 0.0, atol=1e-9)


def test_cloud_particles_follow_cell_masses(cloud):
    """Stratified in x: the count left of the face m is within 1 of n F_x(m), where the
    smoothstep-interpolated cell masses give F_x(m) = sum_{i<m} W_i - (5/64)(W_{m-1} - W_m)
    (W_i: the gas mass of the x-slab i; 5/64 of a centre's weight lies beyond the face)."""
    (_, gas), _ = cloud
    w = np.asarray(gas.field.cell_mass_weights()).sum(axis=(1, 2))
    t_x = (np.asarray(gas.state.positions)[:, 0] + 0.5 * float(gas.field.box_size)) / float(gas.field.cell_size)
    for m in range(1, GRID):
        expected = N * (w[:m].sum() - 5 / 64 * (w[m - 1] - w[m])) / w.sum()
        assert abs(np.sum(t_x < m) - expected) <= 1.0 + 1e-9


def test_dense_gas_fraction_gradient_matches_central_differences(cloud):
    (value, _), grads = cloud
    assert 0.0 < float(value) < 1.0
    for which in (0, 1):
        fd = _central_difference(_cloud_vg, M0, ALPHA0, which)
        assert float(grads[which]) == pytest.approx(fd, rel=1e-5)


# -- stars ----------------------------------------------------------------------------
def _corner_log_densities(ic, field):
    """(n, 8) s at the 8 cell centres around each star: the centres its placement
    density interpolates between (clamped at the faces of the box)."""
    g = field.grid
    t = (np.asarray(ic.state.positions) + 0.5 * float(field.box_size)) / float(field.cell_size)
    c = np.clip(t - 0.5, 0.0, g - 1.0)
    i0 = np.minimum(np.floor(c).astype(int), g - 2)
    s = np.asarray(field.log_density)
    corners = [s[i0[:, 0] + a, i0[:, 1] + b, i0[:, 2] + d] for a in (0, 1) for b in (0, 1) for d in (0, 1)]
    return np.stack(corners, axis=-1)


def _fraction_far_below_threshold(ic, field, kappa=10.0):
    """Observed fraction of stars whose 8 surrounding centres all have s < s_t - 5 / kappa,
    and the model's weight in cells below that level. There the placement density
    is a mix of those cells' weights, and each cell's interpolated weight
    integrates to its own, so the model fraction bounds the expected observed one."""
    low = np.all(_corner_log_densities(ic, field) < float(field.threshold) - 5.0 / kappa, axis=-1)
    w = np.asarray(star_formation_weights(field, kappa, False)).ravel()
    s_all = np.asarray(field.log_density).ravel()
    model_low = w[s_all < float(field.threshold) - 5.0 / kappa].sum() / w.sum()
    return float(np.mean(low)), float(model_low)


def test_star_count_and_threshold_sigmoid(stars, cloud):
    (_, ic), _ = stars
    (_, gas), _ = cloud  # same key and field arguments: the stars' field
    assert ic.state.positions.shape == (N, 3) and ic.n == N
    observed, model = _fraction_far_below_threshold(ic, gas.field)
    # The model's weight below s_t - 5/kappa is sigma(-5) ~ 0.7% of a cell's mass at most;
    # with stratified sampling the observed fraction is binomial-like around it
    # (sd sqrt(model / N) < 0.2%): both stay below the 1% of the spec.
    assert model < 0.01
    assert observed < 0.01


def test_star_threshold_hard_mode_places_no_star_below(cloud):
    (_, gas), _ = cloud
    ic = star_builder(KEY, n=N, grid=GRID, mach=M0, pdf_slope=ALPHA0, threshold_mode="hard")
    assert ic.n == N
    # The density is 0 where all 8 surrounding centres are below s_t: no star there.
    assert np.all(np.any(_corner_log_densities(ic, gas.field) > float(gas.field.threshold), axis=-1))


def test_star_half_mass_radius_gradient_matches_central_differences(stars):
    (value, ic), grads = stars
    assert np.isfinite(float(value)) and float(value) > 0
    for which in (0, 1):
        fd = _central_difference(_stars_vg, M0, ALPHA0, which)
        assert float(grads[which]) == pytest.approx(fd, rel=1e-5)


# -- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"mach": 0.0}, "mach"),
        ({"mach": -2.0}, "mach"),
        ({"pdf_slope": 1.0}, "pdf_slope"),
        ({"pdf_slope": 0.5}, "pdf_slope"),
        ({"b": 0.0}, "b"),
        ({"b": 1.2}, "b"),
        ({"grid": 12}, "grid"),
        ({"grid": 4}, "grid"),
        ({"geometry": "cylinder"}, "geometry"),
        ({"mach": float("nan")}, "mach"),
    ],
)
@pytest.mark.parametrize("builder", [cloud_builder, star_builder])
def test_bad_input_raises_clear_error(builder, kwargs, name):
    with pytest.raises(ValueError, match=name):
        builder(KEY, n=10, **kwargs)


def test_star_specific_bad_input():
    with pytest.raises(ValueError, match="kappa"):
        star_builder(KEY, n=10, kappa=0.0)
    with pytest.raises(ValueError, match="threshold_mode"):
        star_builder(KEY, n=10, threshold_mode="soft")
    with pytest.raises(ValueError, match="n must"):
        cloud_builder(KEY, n=0)
    with pytest.raises(ValueError, match="alpha"):
        star_builder(KEY, n=10, alpha=-1.0, pdf_slope=2.0)


# -- float32 --------------------------------------------------------------------------
def test_float32_smoke_no_nan():
    with jax.enable_x64(False):
        key = jax.random.PRNGKey(0)

        def stars(mach, alpha):
            ic = star_builder(key, n=64, grid=8, mach=mach, pdf_slope=alpha, Q=0.5)
            origin = jnp.zeros(3, ic.state.positions.dtype)
            return half_mass_radius(ic.state.positions, ic.state.masses, centre=origin), ic

        def gas(mach, alpha):
            cloud = cloud_builder(key, n=64, grid=8, mach=mach, pdf_slope=alpha)
            return dense_gas_fraction(cloud.field) + jnp.mean(cloud.smoothing_length), cloud

        def both(mach, alpha):
            (r_h, ic), (f, cloud) = stars(mach, alpha), gas(mach, alpha)
            return r_h + f, (ic, cloud)

        # One compilation for both builders' values and gradients.
        (value, outputs), grads = jax.jit(jax.value_and_grad(both, argnums=(0, 1), has_aux=True))(
            jnp.float32(5.0), jnp.float32(2.0)
        )
        for out in outputs:
            leaves = [x for x in jax.tree_util.tree_leaves(out) if hasattr(x, "dtype")]
            assert out.state.positions.dtype == jnp.float32
            assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)
        assert np.isfinite(float(value)) and all(np.isfinite(float(g)) for g in grads)


def test_built_gas_and_stars_write_to_one_gadget_snapshot(tmp_path, cloud, stars):
    import progenax.io as pio

    (_, gas), _ = cloud
    (_, ic), _ = stars
    path = pio.write(ic, tmp_path / "cloud.hdf5", format="gadget", gas=gas)
    back = pio.read(path, format="gadget", particle_type=0)
    np.testing.assert_array_equal(np.asarray(back.state.positions), np.asarray(gas.state.positions))
    np.testing.assert_array_equal(np.asarray(back.smoothing_length), np.asarray(gas.smoothing_length))
    assert pio.read(path, format="gadget", particle_type=4).n == N


# -- acceptance over the parameter grid (make validate) ---------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mach", [2.0, 5.0, 10.0])
@pytest.mark.parametrize("alpha", [1.5, 2.5])
@pytest.mark.parametrize("mode", ["sigmoid", "hard"])
def test_acceptance_stars_in_dense_gas_64(mach, alpha, mode):
    key = jax.random.PRNGKey(3)
    n = 5000
    ic = star_builder(key, n=n, grid=64, mach=mach, pdf_slope=alpha, threshold_mode=mode)
    assert ic.n == n
    field = cloud_builder(key, n=8, grid=64, mach=mach, pdf_slope=alpha).field
    observed, model = _fraction_far_below_threshold(ic, field)
    if mode == "hard":
        assert observed == 0.0
    else:
        # As in the default test: the model weight is < 1%, and the observed fraction
        # (binomial-like, sd sqrt(model / n) < 0.08%) stays below 1%.
        assert model < 0.01 and observed < 0.01


def test_dense_gas_fraction_needs_positive_kappa(cloud):
    (_, gas), _ = cloud
    with pytest.raises(ValueError, match="kappa"):
        dense_gas_fraction(gas.field, kappa=0.0)
    m = np.asarray(gas.field.cell_mass_weights())
    above = np.asarray(gas.field.log_density) > float(gas.field.threshold)
    assert float(dense_gas_fraction(gas.field, hard=True)) == pytest.approx(np.sum(m * above) / np.sum(m))


# -- the 0.1.0 keywords (deprecated aliases for one release) ---------------------------
def _positions(x):
    return np.asarray(x.state.positions)


def test_old_keywords_warn_and_give_the_same_cluster():
    kw = dict(grid=8, mach=M0)
    with pytest.warns(FutureWarning, match="n_gas= is deprecated"):
        old_gas = cloud_builder(KEY, n_gas=64, **kw)
    with pytest.warns(FutureWarning, match="alpha= is deprecated"):
        old_slope = cloud_builder(KEY, n=64, alpha=2.5, **kw)
    np.testing.assert_array_equal(_positions(old_gas), _positions(cloud_builder(KEY, n=64, **kw)))
    np.testing.assert_array_equal(_positions(old_slope), _positions(cloud_builder(KEY, n=64, pdf_slope=2.5, **kw)))
    with pytest.warns(FutureWarning, match="imf_alpha= is deprecated"):
        old_imf = star_builder(KEY, n=64, imf_alpha=2.7, pdf_slope=2.0, **kw)
    new_imf = star_builder(KEY, n=64, alpha=2.7, pdf_slope=2.0, **kw)
    np.testing.assert_array_equal(np.asarray(old_imf.state.masses), np.asarray(new_imf.state.masses))
    assert float(new_imf.params["alpha"]) == 2.7 and float(new_imf.params["pdf_slope"]) == 2.0


def test_alpha_alone_in_star_builder_warns_that_its_meaning_changed():
    # An 0.1.0 script's star_builder(alpha=2.5) meant the PDF slope; now it is the IMF's.
    with pytest.warns(FutureWarning, match="alpha is the IMF's high-mass slope"):
        star_builder(KEY, n=64, grid=8, alpha=2.5)


def test_old_and_new_name_together_is_an_error():
    with pytest.raises(TypeError, match="pass n= only"):
        cloud_builder(KEY, n=32, n_gas=64, grid=8)
