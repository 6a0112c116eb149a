"""progenax.plotting.quicklook on hand-made clusters (no builder needed), and on one
small anisotropic, rotating build for the extra kinematic panels."""

import jax

jax.config.update("jax_enable_x64", True)  # also done by tests/conftest.py when present

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import progenax  # noqa: E402
from progenax.diagnostics import density_centre  # noqa: E402
from progenax.imf import ChabrierIMF, kroupa, salpeter  # noqa: E402
from progenax.plotting import _imf_of, _quicklook_figure, quicklook  # noqa: E402
from progenax.profiles.plummer import plummer_scale_radius  # noqa: E402
from progenax.state import InitialConditions, ParticleState  # noqa: E402
from progenax.units import physical_units  # noqa: E402


def _plummer_ic(n, model="plummer", masses=None, seed=0, offset=(0.0, 0.0, 0.0)):
    rng = np.random.default_rng(seed)
    a = float(plummer_scale_radius(1.0))
    u = rng.uniform(1e-6, 1 - 1e-6, n)
    r = a * (u ** (-2.0 / 3.0) - 1.0) ** -0.5  # Plummer radii by inverse CDF
    d = rng.standard_normal((n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    if masses is None:
        masses = kroupa(2.3).icdf(rng.uniform(0.0, 1.0, n))
    x = r[:, None] * d + np.asarray(offset)
    state = ParticleState(jnp.asarray(x), jnp.asarray(0.1 * d), jnp.asarray(masses))
    params = {"r_h": jnp.asarray(1.0), "alpha": jnp.asarray(2.3), "Q": jnp.asarray(0.5)}
    return InitialConditions(state, jnp.ones(n), model, params, physical_units())


def _is_png(path):
    data = path.read_bytes()
    return len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "n, model, equal",
    [(50, "plummer", False), (3000, "plummer", True), (6000, "plummer", False), (800, "king", False)],
)
def test_quicklook_writes_png(tmp_path, n, model, equal):
    masses = jnp.full((n,), 0.5) if equal else None
    ic = _plummer_ic(n, model=model, masses=masses)
    out = quicklook(ic, tmp_path / "q.png")
    assert _is_png(out)


def test_quicklook_in_henon_units(tmp_path):
    assert _is_png(quicklook(_plummer_ic(1000).to_henon(), tmp_path / "h.png"))


def test_density_centre_finds_an_offset_cluster():
    # 20,000 stars: the shrinking-sphere centre of a Plummer sphere (a = 0.77)
    # lands within ~0.1 pc of the true one, its noise being set by the core stars.
    ic = _plummer_ic(20_000, offset=(3.0, -2.0, 1.0))
    x = np.asarray(ic.state.positions)
    centre = density_centre(x, np.ones(x.shape[0]))
    assert np.linalg.norm(centre - np.array([3.0, -2.0, 1.0])) < 0.1


def test_imf_comes_from_recorded_parameters():
    ic = progenax.plummer_builder(0, n=100, imf="salpeter")
    found, label = _imf_of(ic)
    assert found is not None and "2.35" in label
    np.testing.assert_allclose(found.mean_mass(), salpeter().mean_mass())
    found, _ = _imf_of(progenax.plummer_builder(0, n=100, imf="equal"))
    assert found is None


def test_chabrier_imf_comes_from_recorded_parameters():
    # The quick-look drew no IMF over a Chabrier build's masses (only power laws were read).
    found, label = _imf_of(progenax.plummer_builder(0, n=100, imf="chabrier"))
    assert isinstance(found, ChabrierIMF) and "Chabrier" in label
    np.testing.assert_allclose(found.mean_mass(), ChabrierIMF().mean_mass(), rtol=1e-6)


@pytest.mark.parametrize("case", ["one star", "all at one point"])
def test_quicklook_of_a_cluster_with_no_radial_extent(tmp_path, case):
    # Every star at the density centre left no radius > 0 to bin: IndexError.
    n = 1 if case == "one star" else 300
    ic = _plummer_ic(n)
    state = ParticleState(jnp.ones((n, 3)), ic.state.velocities, ic.state.masses)
    ic = InitialConditions(state, ic.weights, ic.model, ic.params, ic.units)
    assert _is_png(quicklook(ic, tmp_path / "q.png"))


def test_model_curves_are_the_models_own_values():
    # The density and IMF curves come from one jitted program each: the
    # model's eager values to round-off, and no curve for a model without an
    # analytic density (its NoAnalyticFormError is raised while tracing).
    from progenax.plotting import _analytic_density, _imf_curve

    ic = _plummer_ic(300, model="king")
    mass = float(jnp.sum(ic.state.masses))
    grid = np.geomspace(0.05, 5.0, 9)
    rho, label = _analytic_density(ic, mass, grid)
    eager = np.asarray(ic.model.prepared().with_mass(mass).density(grid))
    np.testing.assert_allclose(rho, eager, rtol=1e-13)
    assert label.startswith("king, W0 = ")
    imf = kroupa(2.3)
    np.testing.assert_allclose(np.asarray(_imf_curve(imf, jnp.asarray(grid))), np.asarray(imf.pdf(grid)), rtol=1e-13)
    assert _analytic_density(_plummer_ic(300, model="fractal"), mass, grid) == (None, None)


def test_default_figure_keeps_three_panels():
    # 1000 stars: points, no colorbar axes; no ra, no rotation: no extra panels
    assert len(_quicklook_figure(_plummer_ic(1000)).axes) == 3


def test_quicklook_adds_anisotropy_and_rotation_panels(tmp_path):
    # One small build (one compile) with both set; the params without
    # `rotation` stand for a build with ra only.
    ic = progenax.plummer_builder(0, n=2000, ra=1.0, rotation=0.5, Q=None)
    assert _is_png(quicklook(ic, tmp_path / "kin.png"))
    fig = _quicklook_figure(ic)
    assert len(fig.axes) == 5
    assert "anisotropy" in fig.axes[3].get_title() and "rotation" in fig.axes[4].get_title()
    assert len(fig.axes[3].get_lines()) >= 1  # the model's beta(r) is drawn
    params = {k: v for k, v in ic.params.items() if k != "rotation"}
    ra_only = InitialConditions(ic.state, ic.weights, ic.model, params, ic.units)
    assert len(_quicklook_figure(ra_only).axes) == 4
    no_spin = InitialConditions(ic.state, ic.weights, ic.model, {**ic.params, "rotation": 0.0}, ic.units)
    assert len(_quicklook_figure(no_spin).axes) == 4
