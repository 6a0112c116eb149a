"""The Plummer builder: the `Plummer` model, an IMF and the common finish."""

from __future__ import annotations

from jax.sharding import Mesh

from .._types import ArrayLike, Key
from ..binaries import BinaryPopulation
from ..imf import PowerLawIMF
from ..models import Plummer
from ..state import InitialConditions
from ._common import check_common_arguments
from .spherical import build_model_cluster


def plummer_builder(
    key: Key | int,
    *,
    n: int = 10_000,
    r_h: ArrayLike = 1.0,
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
    r"""A Plummer (1911) sphere sampled from its exact distribution function.

    Radii invert $M(<r) = M r^3 / (r^2 + a^2)^{3/2}$ exactly, with
    $a = r_h \sqrt{2^{2/3} - 1}$; speeds are drawn by inverse CDF from the
    isotropic DF $f(E) \propto (-E)^{7/2}$ at each radius
    (`progenax.kinematics.plummer_df`); directions are isotropic. The cluster is
    moved to its centre-of-mass frame, then velocities are scaled so that
    $T/|W| = Q$ exactly (`Q=None` keeps the equilibrium velocities of the DF,
    whose expected Q is 1/2).

    **Arguments:**

    - `key`: a `jax.random` key (or an int seed).
    - `n`: number of stars (static).
    - `r_h`: 3D half-mass radius in pc (> 0).
    - `ra`: None (isotropic) or the Osipkov-Merritt anisotropy radius in pc:
      velocities from $f(Q)$, $Q = \mathcal E - L^2/(2 r_a^2)$, isotropic in the
      centre and radial outside, $\beta(r) = r^2/(r^2 + r_a^2)$
      (`progenax.models.osipkov_merritt.sample_osipkov_merritt`); at least the
      consistency limit $0.75\,a$ (0.575 `r_h`), below which $f < 0$ and the
      call raises naming `ra`.
    - `alpha`: high-mass slope of the Kroupa (2001) IMF (0.08-100 Msun, slopes
      1.3 / alpha, break 0.5 Msun), or of Chabrier's; ignored unless `imf` is
      None / "kroupa" / "equal" / "chabrier".
    - `Q`: virial ratio T/|W| (>= 0; 0 is a cold start), or None.
    - `imf`: None or "kroupa" (Kroupa with `alpha`), "salpeter", "equal",
      "chabrier" (`progenax.imf.ChabrierIMF(alpha=alpha)`: Chabrier 2003's
      log-normal below 1 Msun), or any `progenax.imf.PowerLawIMF` or `ChabrierIMF`.
    - `units`: "physical" (pc, Msun, km/s) or "henon" (G = M = 1, E = -1/4 at
      Q = 1/2).
    - `segregation`: primordial mass segregation S in [0, 1), energy-ordered as
      in Baumgardt, De Marchi & Kroupa (2008) (`progenax.structure.segregation`); a
      concrete 0 skips it. Partially differentiable (relaxed ranking).
    - `segregation_temperature`: width of the relaxed ranking that gives S its
      gradient, in units of the mean key spacing, in (0, 8].
    - `binaries`: None (single stars, the default) or a
      `progenax.BinaryPopulation`: `n` then counts **systems**, each a single
      star or a binary; the systems' centre-of-mass velocities are scaled to
      `Q`, then the orbits are added (`progenax.builders._binaries`), and
      `ic.pairs` lists the (primary, secondary) indices. An eager build in the
      default hard mode drops the absent companions: it has n + (number of
      binaries) stars.
    - `rotation`, `rotation_scale`: None (no net rotation, the default) or the
      rotation parameter k in [-1, 1] and the angular-momentum scale
      L_0 >= 0 (pc km/s): each star's v_phi sign is drawn with probability
      (1 + k tanh(|L_z|/L_0))/2 for L_z > 0 (`progenax.structure.rotation`).
    - `mesh`: None (one device) or a one-axis `jax.sharding.Mesh`
      (`progenax.sharding.particle_mesh()`): the stars are drawn as shares of
      n / D on its D devices and returned laid out over them, no device
      holding the whole set (`progenax.builders.sharded`; not with
      `segregation` or `binaries`; n a multiple of D).

    **Returns:** `InitialConditions` whose `model` is a `progenax.models.Plummer`; differentiable in
    r_h, ra, alpha and Q; partially in `segregation`,
    `rotation` and `rotation_scale`.

    ```python
    ic = progenax.plummer_builder(jax.random.PRNGKey(0), n=10_000, r_h=1.0)
    ```
    """
    c = check_common_arguments(n, units, imf, r_h, alpha, Q)
    parameters = {"r_h": c.r_h, "ra": ra}
    return build_model_cluster(
        key, Plummer, c, parameters, segregation, segregation_temperature, binaries, rotation, rotation_scale, mesh
    )
