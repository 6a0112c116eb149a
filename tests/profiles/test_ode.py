"""The fixed-grid Tsit5 integrator of the profile solves (`progenax.profiles.ode`)."""

from __future__ import annotations

import diffrax
import jax.numpy as jnp
import numpy as np

from progenax.profiles.ode import _tsit5_coefficients, integrate_on_grid


def test_tableau_is_diffrax_tsit5():
    """The coefficients written in ode.py are diffrax's Tsit5 tableau, exactly
    (the same decimal literals), with the first-same-as-last stage dropped."""
    tableau = diffrax.Tsit5.tableau
    matrix, nodes, weights = _tsit5_coefficients()
    for i, row in enumerate(tableau.a_lower[:5]):
        np.testing.assert_array_equal(matrix[i + 1, : len(row)], np.asarray(row, float))
    np.testing.assert_array_equal(nodes[1:], np.asarray(tableau.c[:5], float))
    np.testing.assert_array_equal(weights, np.asarray(tableau.b_sol[:6], float))
    assert float(tableau.b_sol[6]) == 0.0


def test_fifth_order_convergence():
    """y' = y cos t from y(0) = 1 (exact e^{sin t}) on [0, 2]: halving the step
    divides the global error by 2^p, p the observed order; it must lie in
    [4.5, 6.5] (measured 5.8 and 5.6 at 10 -> 20 -> 40 steps, still above the
    asymptotic 5; a wrong coefficient drops p to 4 or below)."""
    exact = np.exp(np.sin(2.0))
    errors = []
    for steps in (10, 20, 40):
        ts = jnp.linspace(0.0, 2.0, steps + 1)
        y = integrate_on_grid(lambda t, y: y * jnp.cos(t), jnp.asarray(1.0), ts)
        errors.append(abs(float(y[-1]) - exact))
    orders = [np.log2(errors[0] / errors[1]), np.log2(errors[1] / errors[2])]
    assert all(4.5 < p < 6.5 for p in orders), (errors, orders)
