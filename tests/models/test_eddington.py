"""The generic Eddington inversion against the Plummer sphere's closed forms."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.stats  # noqa: E402

import progenax  # noqa: E402
from progenax.kinematics.plummer_df import speed_fraction_cdf  # noqa: E402
from progenax.models import EFF, Dehnen, eddington  # noqa: E402
from progenax.models.plummer import Plummer  # noqa: E402
from progenax.profiles.plummer import plummer_sample_radii  # noqa: E402

MODEL = Plummer(r_h=1.0, total_mass=1000.0)


def plummer_df(model, E):
    """f(E) = 24 sqrt(2) / (7 pi^3) a^2 / (G^5 M^4) E^(7/2) (Msun pc^-3 (km/s)^-3)."""
    a, G, M = model.scale_radius, model.G, model.total_mass
    return 24.0 * np.sqrt(2.0) / (7.0 * np.pi**3) * a**2 / (G**5 * M**4) * E**3.5


def plummer_speed_cdf(q):
    return np.asarray(speed_fraction_cdf(np.arcsin(np.clip(np.asarray(q), 0.0, 1.0))))


def test_df_matches_plummer_closed_form():
    psi0 = -MODEL.potential(0.0)
    E = psi0 * jnp.linspace(0.01, 0.99, 99)
    rel = np.abs(np.asarray(jax.jit(eddington.eddington_df)(MODEL, E)) / plummer_df(MODEL, E) - 1.0)
    # measured: 6.5e-8 (16 panels x 8 Gauss-Legendre nodes)
    assert rel.max() < 1e-6, rel.max()


def test_speed_table_matches_closed_form_cdf():
    """Every row of the tabulated CDF against F(arcsin q) at its column nodes."""
    table = jax.jit(eddington.eddington_speed_table)(MODEL)
    first, last, step = eddington._ROW_GRID
    x = first + step * np.arange(table.cdf.shape[0])[:, None]
    s = eddington._S_MAX * np.linspace(0.0, 1.0, table.cdf.shape[1])
    psi = lambda y: -np.asarray(MODEL.potential(MODEL.r_h * np.exp(y)))
    q = np.sqrt(np.clip(1.0 - psi(x + s**2) / psi(x), 0.0, 1.0))
    err = np.abs(np.asarray(table.cdf) - plummer_speed_cdf(q))
    assert err.max() < 1e-7, err.max()  # measured 7e-9


def test_speeds_pass_ks_against_closed_form():
    """q = v / v_e pooled over radii drawn from the model: g(q) ~ q^2 (1 - q^2)^(7/2).

    Under the null hypothesis the p-value is uniform, so a fixed key fails a
    0.01 threshold with probability 0.01; the table's own CDF error (< 1e-8,
    test above) is far below the KS resolution 1.36 / sqrt(n) = 4e-3 at n = 1e5.
    """
    n = 100_000
    k_r, k_v = jax.random.split(jax.random.PRNGKey(0))
    radii = plummer_sample_radii(jax.random.uniform(k_r, (n,), minval=1e-9, maxval=1.0 - 1e-9), MODEL.scale_radius)
    speeds = jax.jit(eddington.sample_eddington_speeds)(MODEL, k_v, radii)
    q = np.asarray(speeds / MODEL.escape_speed(radii))
    assert np.all(np.isfinite(q)) and q.min() >= 0.0 and q.max() <= 1.0
    p = scipy.stats.kstest(q, plummer_speed_cdf).pvalue
    assert p > 0.01, p  # measured 0.36


def test_radii_invert_plummer_mass_fraction():
    """Closed-form radii to 1e-10; dr/dr_h = r / r_h (radii scale as r_h) through the implicit root."""
    u = jnp.concatenate([jnp.logspace(-12, -1, 45), jnp.linspace(0.1, 0.999, 45)])
    # Far tail: r is ill-conditioned (dr/r = du / (2 (1 - u))), M(<r) is not.
    u_tail = 1.0 - jnp.logspace(-3, -14, 12)

    def radii(r_h):
        return eddington.radii_from_mass_fraction(Plummer(r_h=r_h, total_mass=1000.0), jnp.concatenate([u, u_tail]))

    r, slope = jax.jit(lambda r_h: jax.jvp(radii, (r_h,), (1.0,)))(1.0)
    r, r_tail = np.asarray(r[: u.shape[0]]), r[u.shape[0] :]
    assert np.max(np.abs(r / plummer_sample_radii(u, MODEL.scale_radius) - 1.0)) < 1e-10
    assert np.max(np.abs(np.asarray(MODEL.mass_fraction(r_tail) - u_tail))) < 1e-15
    np.testing.assert_allclose(slope[: u.shape[0]], r, rtol=1e-12)


def _mean_square_speed(r_h, radii, key):
    return jnp.mean(eddington.sample_eddington_speeds(Plummer(r_h=r_h, total_mass=1000.0), key, radii) ** 2)


def test_speed_gradient_matches_central_difference():
    """d<v^2>/dr_h at fixed radii (stars move across the table's rows) vs central differences."""
    radii = jnp.logspace(-2.0, 1.5, 64)
    key = jax.random.PRNGKey(3)
    value_and_grad = jax.jit(jax.value_and_grad(_mean_square_speed))
    _, grad = value_and_grad(1.0, radii, key)
    h = 1e-5
    fd = (value_and_grad(1.0 + h, radii, key)[0] - value_and_grad(1.0 - h, radii, key)[0]) / (2 * h)
    assert np.isfinite(grad)
    np.testing.assert_allclose(grad, fd, rtol=1e-5)  # measured 8e-10


def test_float32_runs_without_nan():
    """Float32 end to end, and float32 radii with a float64 model (a builder under x64)."""
    k_r, k_v = jax.random.split(jax.random.PRNGKey(5))
    # The ends of float32's (0, 1) as sampling.uniform_open draws it, and uniforms between.
    u = jnp.concatenate(
        [jnp.asarray([1.2e-7, 1.0 - 1.2e-7], jnp.float32), jax.random.uniform(k_r, (4094,), jnp.float32)]
    )

    @jax.jit
    def run(m):
        radii = eddington.radii_from_mass_fraction(m, u)
        return radii, eddington.sample_eddington_speeds(m, k_v, radii)

    for r_h in (jnp.float32(1.0), jnp.float64(1.0)):
        model = Plummer(r_h=r_h, total_mass=jnp.asarray(1000.0, r_h.dtype))
        radii, speeds = run(model)
        assert radii.dtype == jnp.float32 and speeds.dtype == jnp.float32
        assert np.all(np.isfinite(radii)) and np.all(np.isfinite(speeds))
        assert np.all(speeds <= model.escape_speed(radii) * (1 + 1e-5))


def _escape_fractions(ic) -> np.ndarray:
    """|v| / v_esc(r) of each star, in the model's potential (float64 NumPy)."""
    x, v = ic.state.positions, ic.state.velocities
    v_esc = jnp.sqrt(-2.0 * ic.model.potential(jnp.linalg.norm(x, axis=1)))
    return np.asarray(jnp.linalg.norm(v, axis=1) / v_esc, np.float64)


FLOAT32_BUILDS = {
    "eff": lambda key, **p: progenax.eff_builder(key, n=4000, **{"gamma": 3.0, **p}),
    "dehnen": lambda key, **p: progenax.model_builder(key, "dehnen", n=4000, **{"gamma": 1.0, "r_h": 1.0, **p}),
}


def _model(name: str, dtype):
    """The models the builds above draw from, at a fixed total mass (the DF scales with it)."""
    c = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    if name == "eff":
        return EFF(gamma=c(3.0), r_h=c(1.0), total_mass=c(1000.0)).profile().tabulated()
    return Dehnen(gamma=c(1.0), r_h=c(1.0), total_mass=c(1000.0))


@pytest.mark.parametrize("name", sorted(FLOAT32_BUILDS))
def test_float32_df_and_speeds_match_float64(name):
    # Untruncated EFF and Dehnen invert their density out to e^36 r_h, where
    # float32's r^3 (EFF's mass table), (r + a)^4 (Dehnen's density) and the
    # second derivative of ln(1 + q^2) overflow: the DF was NaN and every star
    # moved at the escape speed (Q = 2.07 asked 0.5). Now the float32 DF is the
    # float64 one to 1e-3 over the radii a float32 sample reaches (mass
    # fractions 6e-8 to 1 - 6e-8; measured 1.8e-4 EFF, 1.1e-4 Dehnen: float32
    # round-off amplified by the core's cancellation in D_x), and the speeds'
    # fractions of the escape speed follow the float64 ones: two-sample KS
    # distance below c sqrt(2/n), c = sqrt(-ln(alpha/2)/2) = 1.95 at
    # alpha = 1e-3 (0.044 at n = 4000; measured 0.018 and 0.020; before, 0.9).
    build = FLOAT32_BUILDS[name]
    x = np.linspace(-3.0, 8.0, 23)
    f64 = np.asarray(jax.jit(eddington.df_at_radius)(_model(name, jnp.float64), jnp.asarray(x)))
    q64 = _escape_fractions(build(1, Q=None))
    with jax.enable_x64(False):
        f32 = np.asarray(jax.jit(eddington.df_at_radius)(_model(name, jnp.float32), jnp.asarray(x, jnp.float32)))
        ic = build(1, Q=None)
        assert ic.state.velocities.dtype == jnp.float32
        q32 = _escape_fractions(ic)
    np.testing.assert_allclose(f32, f64, rtol=1e-3)
    assert scipy.stats.ks_2samp(q32, q64).statistic < 1.95 * np.sqrt(2.0 / q32.size)


@pytest.mark.parametrize("name, parameter, value", [("eff", "r_h", 1.0), ("dehnen", "gamma", 1.0)])
def test_float32_speed_gradient_is_finite_and_matches_central_difference(name, parameter, value):
    # The reverse pass of the float32 DF met 0 * inf where the density
    # underflows (its cotangents there reach 1e17): the gradient was NaN.
    # Central difference at h = 0.01 in float32: the sum of 4000 |v|^2 (~1e4)
    # rounds to ~10 eps of itself (6e-3), 0.3 in the difference quotient,
    # 3e-3 of a gradient of ~100; 1e-2 leaves room for the h^2 truncation.
    def observable(p):
        return jnp.sum(FLOAT32_BUILDS[name](jax.random.PRNGKey(0), **{parameter: p}).state.velocities ** 2)

    h = 0.01
    with jax.enable_x64(False):
        grad = float(jax.grad(observable)(jnp.float32(value)))
        fd = (float(observable(jnp.float32(value + h))) - float(observable(jnp.float32(value - h)))) / (2 * h)
    assert np.isfinite(grad)
    np.testing.assert_allclose(grad, fd, rtol=1e-2)


def test_eff_model_called_eagerly_compiles_each_function_once():
    """Each eager call of an EFF model's function traced and compiled its loops
    anew (the scale-radius solve, the series' scan: new closures each time),
    25 ms to 0.29 s and a program kept per call, until the process ran out
    of memory maps."""
    model = progenax.models.REGISTRY["eff"](gamma=3.0, r_h=1.0, total_mass=1e3)
    for name in ("density", "mass_fraction", "potential", "velocity_dispersion"):
        compiled = getattr(EFF, name).compiled
        before = compiled._cache_size()
        values = [float(getattr(model, name)(r)) for r in (0.3, 0.5, 0.7)]
        assert compiled._cache_size() - before <= 1, name
        assert all(np.isfinite(values)), name
    # The same values as the traced path a builder takes.
    r = jnp.asarray([0.3, 0.5])
    np.testing.assert_allclose(model.mass_fraction(r), jax.jit(lambda r: model.mass_fraction(r))(r), rtol=1e-14)


def test_float32_parameters_keep_float32_under_x64():
    # A float32 model (a float32 file read in a float64 session) computed in
    # float64 (its checked parameters were widened to the default float), so
    # `relax` of a float32 EFF or King file failed on mixed loop carries; a
    # float32 sample of a float64 King model failed on a mixed subtraction.
    f32 = jnp.float32
    r = jnp.linspace(0.1, 2.0, 5, dtype=f32)
    models = {
        "eff": EFF(gamma=f32(3.0), r_h=f32(1.0)),
        "king": progenax.models.King(W0=f32(6.0), r_h=f32(1.0)),
        "dehnen": Dehnen(gamma=f32(1.0), r_h=f32(1.0)),
    }
    for name, model in models.items():
        assert model.density(r).dtype == f32, name
    assert progenax.imf.kroupa(f32(2.3)).icdf(jnp.array([0.5], f32)).dtype == f32
    assert progenax.structure.tidal.tidal_weights(r, f32(2.0)).dtype == f32
    keys = tuple(jax.random.split(jax.random.PRNGKey(0), 4))
    for model in (progenax.models.King(W0=6.0, r_h=1.0), progenax.models.LoweredIsothermal(W0=6.0, g=1.5, r_h=1.0)):
        x, v = model.sample_phase_space(keys, 50, f32)
        assert x.dtype == v.dtype == f32 and np.all(np.isfinite(np.asarray(v)))
