"""density_centre: the sorted-distance shrinking spheres equal the plain loop."""

import numpy as np
import pytest

from progenax.diagnostics import density_centre


def plain_shrinking_spheres(x, w):
    """The definition, step by step over every star (O(N) per step)."""
    centre = (w[:, None] * x).sum(axis=0) / w.sum()
    radius = np.sqrt(((x - centre) ** 2).sum(axis=1)).max()
    keep_min = max(50, x.shape[0] // 100)
    while True:
        radius *= 0.975
        inside = ((x - centre) ** 2).sum(axis=1) < radius**2
        if np.count_nonzero(inside) < keep_min:
            return centre
        centre = (w[inside, None] * x[inside]).sum(axis=0) / w[inside].sum()


def _clumpy(rng, n):
    """A core plus an off-centre clump and a sparse halo: the centre drifts far
    from the first centroid, which forces re-sorting the distances."""
    core = rng.normal(size=(n // 2, 3)) * 0.3 + [3.0, 0.0, 0.0]
    clump = rng.normal(size=(n // 4, 3)) * 0.1 + [-2.0, 1.0, 0.0]
    halo = rng.standard_cauchy(size=(n - n // 2 - n // 4, 3))
    return np.concatenate([core, clump, halo])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["gaussian", "clumpy", "planar"])
def test_density_centre_equals_the_plain_loop(seed, kind):
    rng = np.random.default_rng(seed)
    n = 5000
    x = {"gaussian": rng.normal(size=(n, 3)), "clumpy": _clumpy(rng, n), "planar": rng.normal(size=(n, 2))}[kind]
    w = rng.uniform(0.1, 2.0, n)
    expected = plain_shrinking_spheres(x, w)
    # Prefix sums add the same terms in another order: agreement to rounding
    # (a few ulp of the largest |w x| summed), not bit for bit.
    np.testing.assert_allclose(density_centre(x, w), expected, rtol=0, atol=1e-12 * np.abs(x).max())
    np.testing.assert_allclose(density_centre(x), plain_shrinking_spheres(x, np.ones(n)), atol=1e-12 * np.abs(x).max())


def test_small_samples_return_the_centroid():
    x = np.arange(30.0).reshape(10, 3)
    np.testing.assert_allclose(density_centre(x), x.mean(axis=0))
