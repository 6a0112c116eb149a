import jax
import jax.numpy as jnp
import numpy as np
import pytest

from progenax.diagnostics import half_mass_radius, lagrangian_radii, potential_energy


def _reference_radii(x, m, fractions, centre, projected):
    """Mass-weighted quantiles of |x - centre| in NumPy: each star at the
    mid-point of its cumulative mass fraction, linear in between."""
    d = np.asarray(x) - np.asarray(centre)
    r = np.linalg.norm(d[:, :2] if projected else d, axis=1)
    order = np.argsort(r)
    w = np.asarray(m)[order]
    cum = (np.cumsum(w) - 0.5 * w) / np.sum(w)
    return np.interp(fractions, cum, r[order])


@pytest.mark.parametrize("projected", [False, True])
def test_lagrangian_radii_match_a_numpy_reference(projected):
    k1, k2 = jax.random.split(jax.random.PRNGKey(3))
    x = jax.random.normal(k1, (2000, 3)) * jnp.array([1.0, 2.0, 0.5])
    m = jax.random.uniform(k2, (2000,), minval=0.1, maxval=3.0)
    centre = jnp.array([0.1, -0.2, 0.05])
    fractions = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
    got = lagrangian_radii(x, m, fractions, projected=projected, centre=centre)
    np.testing.assert_allclose(got, _reference_radii(x, m, fractions, centre, projected), rtol=1e-12)


def test_stars_of_zero_weight_change_no_lagrangian_radius():
    # A traced binary build keeps its absent companions as weight-0 slots: they
    # made interpolation knots of their own, so a jitted build's r_h differed
    # from the eager one's (1.0530314 against 1.0530357) and so did its gradient.
    # Now the radii and the gradient in the other stars' masses are those
    # without them (the same knots, so to round-off: 1e-12), the innermost
    # and outermost fractions included (zero-weight stars inside the first
    # and beyond the last star of positive weight).
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(5), 3)
    x = jax.random.normal(k1, (1000, 3))
    m = jax.random.uniform(k2, (1000,), minval=0.1, maxval=3.0)
    extra = jnp.concatenate([jax.random.normal(k3, (500, 3)) * 2.0, jnp.zeros((1, 3)), jnp.full((1, 3), 40.0)])
    x0, m0 = jnp.concatenate([x, extra]), jnp.concatenate([m, jnp.zeros(502)])
    fractions = jnp.array([1e-5, 0.1, 0.5, 0.9, 1.0 - 1e-5])
    radii = lambda x, m: lagrangian_radii(x, m, fractions, centre=jnp.zeros(3))  # noqa: E731
    np.testing.assert_allclose(radii(x0, m0), radii(x, m), rtol=1e-12)
    g0 = jax.grad(lambda m: radii(x0, m)[2])(m0)[:1000]
    np.testing.assert_allclose(g0, jax.grad(lambda m: radii(x, m)[2])(m), rtol=1e-12, atol=1e-15)


def test_half_mass_radius_gradient_is_finite_with_a_star_at_the_centre():
    x = jax.random.normal(jax.random.PRNGKey(4), (101, 3)).at[0].set(0.0)
    m = jnp.ones(101)
    g = jax.grad(lambda x: half_mass_radius(x, m, centre=jnp.zeros(3)))(x)
    assert np.all(np.isfinite(np.asarray(g)))
    assert float(jnp.abs(g).sum()) > 0


def test_half_mass_radius_and_spherical_energy_sort_once_in_one_program():
    # The command line's summary measures both about one centre in one program:
    # they order the same squared radii, so XLA keeps a single sort.
    x = jax.random.normal(jax.random.PRNGKey(5), (5000, 3))
    m = jnp.ones(5000)

    def both(x, m, c):
        return half_mass_radius(x, m, centre=c), potential_energy(x, m, method="spherical", centre=c)

    text = jax.jit(both).lower(x, m, jnp.zeros(3)).compile().as_text()
    assert text.count(" sort(") == 1


def test_a_nan_position_gives_nan_radii_not_zero():
    # `safe_sqrt` read a NaN squared radius as 0: with the centre of mass as
    # centre every radius was NaN, and the half-mass radius came out 0.
    x = jax.random.normal(jax.random.PRNGKey(0), (1000, 3)).at[0, 0].set(jnp.nan)
    m = jnp.ones(1000)
    assert np.isnan(float(half_mass_radius(x, m)))
    assert np.all(np.isnan(np.asarray(lagrangian_radii(x, m))))
