"""Physics and gradient tests run in float64; float32 smoke tests opt out locally."""

import jax

jax.config.update("jax_enable_x64", True)
