"""The EFF builder: the `EFF` model, an IMF and the common finish."""

from __future__ import annotations

from jax.sharding import Mesh

from .._types import ArrayLike, Key
from ..binaries import BinaryPopulation
from ..imf import PowerLawIMF
from ..models import EFF
from ..state import InitialConditions
from ._common import check_common_arguments
from .spherical import build_model_cluster


def eff_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    gamma: ArrayLike = 3.0,
    r_h: ArrayLike = 1.0,
    r_t: ArrayLike | None = None,
    ra: ArrayLike | None = None,
    alpha: ArrayLike = 2.3,
    Q: ArrayLike | None = 0.5,
    imf: str | PowerLawIMF | None = None,
    units: str = "physical",
    segregation: ArrayLike = 0.0,
    segregation_temperature: ArrayLike = 1.0,
    binaries: BinaryPopulation | None = None,
    rotation: ArrayLike | None = None,
    rotation_scale: ArrayLike = 0.0,
    mesh: Mesh | None = None,
) -> InitialConditions:
    r"""An Elson, Fall & Freeman (1987) cluster, optionally truncated at `r_t`.

    $\rho(r) \propto (1 + r^2/a^2)^{-(\gamma+1)/2}$ for $r \le r_t$, whose surface
    density falls as $(1 + R^2/a^2)^{-\gamma/2}$; $a$ is solved so that the 3D
    half-mass radius is `r_h` (`progenax.profiles.eff.eff_scale_radius`). Radii by
    inverse CDF of M(r) (`eff_sample_radii`). **Velocities come from the model's
    isotropic DF**, the numerical Eddington inversion of its density in its
    potential (`progenax.models.eddington`): the speed distribution at each radius
    is the model's and no star exceeds the local escape speed (truncated: the DF
    of the density less its edge value, whose orbits all stay inside `r_t`; see
    `progenax.models.eff`). Velocities are moved to the centre-of-mass frame and
    scaled to `Q` (None keeps the DF's equilibrium velocities). **Positions stay about the
    model centre** (the origin), not the centre of mass: for an untruncated
    model with gamma <= 4 the centre of mass has infinite variance, and a few halo
    stars would move the core by parsecs.

    **Measured r_h of a finite sample.** About the model centre (the origin,
    `half_mass_radius(..., centre=jnp.zeros(3))`) it is `r_h` up to sampling
    noise; about the centre of mass it is not, for heavy tails: the mean radius
    diverges for gamma <= 3, and at gamma = 2.5 a few stars at ~1e9 pc move the
    centre of mass by kiloparsecs (n = 1e5: 3e3 pc about it, 0.995 pc about the
    origin). Untruncated, gamma must exceed 2.153 in float64 (2.544 in float32),
    where the largest uniform the sampler draws still maps to a representable
    radius (`progenax.profiles.eff.untruncated_gamma_floor`); below it a finite
    sample cannot be stored, and the call raises naming gamma. Truncate with
    `r_t` for flatter profiles.

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed); `n`: number of stars (static).
    - `gamma`: surface-density slope; > 2.153 untruncated (> 2.544 in float32),
      > 0 with `r_t`.
    - `r_h`: 3D half-mass radius in pc (> 0; below 2^(-1/3) `r_t` when truncated).
    - `r_t`: truncation radius in pc, or None for the infinite model.
    - `ra`: None (isotropic) or the Osipkov-Merritt anisotropy radius in pc (as
      for `plummer_builder`); its consistency limit is numerical
      (`progenax.models.osipkov_merritt.osipkov_merritt_limit`), and an `ra` below it
      raises naming `ra`.
    - `alpha`, `Q`, `imf`, `units`, `segregation`, `segregation_temperature`,
      `binaries`, `rotation`, `rotation_scale`, `mesh`: as for `plummer_builder`.

    **Returns:** `InitialConditions` whose `model` is a `progenax.models.EFF`; differentiable in gamma,
    r_h, r_t, ra, alpha and Q; partially in `segregation`, `rotation` and `rotation_scale`.

    ```python
    ic = progenax.eff_builder(jax.random.PRNGKey(0), n=10_000, gamma=3.0, r_h=1.0)
    ```
    """
    c = check_common_arguments(n, units, imf, r_h, alpha, Q)
    parameters = {"gamma": gamma, "r_h": c.r_h, "r_t": r_t, "ra": ra}
    return build_model_cluster(
        key, EFF, c, parameters, segregation, segregation_temperature, binaries, rotation, rotation_scale, mesh
    )
