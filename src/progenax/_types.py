"""Array shape aliases used in signatures and docstrings."""

from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

Positions = Float[Array, "n 3"]
Velocities = Float[Array, "n 3"]
Masses = Float[Array, " n"]
Weights = Float[Array, " n"]
Scalar = Float[Array, ""]
ScalarLike = Float[ArrayLike, ""]
Key = PRNGKeyArray

__all__ = [
    "Array",
    "ArrayLike",
    "Key",
    "Masses",
    "Positions",
    "Scalar",
    "ScalarLike",
    "Velocities",
    "Weights",
]
