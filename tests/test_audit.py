"""Every exported builder is audited, and every full audit entry passes."""

import pytest

import progenax
from progenax.audit import FULL_TOLERANCE, REGISTRY, AuditEntry, _load_registry, check_entry, format_table, run_audit

_load_registry()


def _exported_builders():
    return sorted(name for name in progenax.__all__ if name.endswith("_builder"))


def test_every_exported_builder_has_an_audit_entry():
    audited = {entry.builder for entry in REGISTRY}
    missing = [name for name in _exported_builders() if name not in audited]
    assert not missing, f"builders without gradient-audit entries: {missing}"


def test_partial_entries_state_a_reason():
    for entry in REGISTRY:
        assert entry.status in ("full", "partial")
        if entry.status == "partial":
            assert entry.reason


def test_only_partial_entries_use_another_observable():
    assert all(e.observable == "default" for e in REGISTRY if e.status == "full")
    with pytest.raises(ValueError, match="only a partial entry"):
        AuditEntry("plummer_builder", "Q", 0.5, (1e-3, 5.0), observable="other")
    with pytest.raises(ValueError, match="needs a reason"):
        AuditEntry("plummer_builder", "Q", 0.5, (1e-3, 5.0), status="partial")


def test_audit_shows_progress(capsys):
    assert run_audit(builders=["no_such_builder"], progress=True) == []
    assert "gradient audit" in capsys.readouterr().err


# Each builder's entries share one compile of it (check_entry), so an entry is
# moved here only with every entry of its compile. These run in `make validate`
# and in `progenax audit`:
# - LIMEPY's ra entry compiles the anisotropic builder on its own (about 50 s).
# - King's entries compile the lowered-isothermal builder a second time (about
#   40 s): LIMEPY's W0, g, r_h and Q entries, in the default suite, check the
#   same builder (_lowered_isothermal; King is g = 1 with Q = None, the DF's
#   velocities unscaled), and segregation's partial entry has its fast twins
#   for plummer_builder, eff_builder and fractal_builder (the same `segregate`).
# - EFF's truncated entries (r_t, and gamma with r_t) compile the truncated
#   builder (about 35 s): its composition is the one eff_builder's untruncated
#   entries check, and the gradients of the truncated pieces it composes are
#   checked against central differences in tests/profiles/test_eff.py
#   (test_scale_radius_gradients, test_sampled_radii_gradients,
#   test_dispersion_gradients: eff_scale_radius, eff_sample_radii,
#   eff_velocity_dispersion with r_t).
# - The ra and rotation entries of eff_builder and king_builder compile each
#   builder once more (about 30 s and 15 s) for the Osipkov-Merritt sampler and
#   the flips that plummer_builder's and model_builder's (Dehnen) entries check in
#   the default suite (the same `models.osipkov_merritt` and `structure.rotation`).
# - The hard-mode binary fraction (partial: zero pathwise gradient) compiles the
#   binary builder a second time (fraction_width=None is static); its soft
#   twin, the full entry, stays in the default suite.
_SLOW_ENTRIES = {
    ("limepy_builder", "ra"),
    ("king_builder", "W0"),
    ("king_builder", "r_h"),
    ("king_builder", "alpha"),
    ("king_builder", "segregation"),
    ("king_builder", "rotation"),
    ("eff_builder", "ra"),
    ("eff_builder", "rotation"),
}


def _is_slow(entry):
    if entry.builder == "audit.plummer_with_binaries" and "fraction_width" in entry.static:
        return True
    return (entry.builder, entry.parameter) in _SLOW_ENTRIES or (
        entry.builder == "eff_builder" and "r_t" in {entry.parameter, *entry.kwargs}
    )


def _audit_params():
    return [pytest.param(e, marks=pytest.mark.slow) if _is_slow(e) else e for e in REGISTRY]


@pytest.mark.parametrize("entry", _audit_params(), ids=lambda e: f"{e.builder}-{e.parameter}-{e.value}")
def test_audit_entry(entry):
    # Autodiff against central differences at both keys and both steps (row.checks);
    # a full entry's worst relative error is within FULL_TOLERANCE.
    row = check_entry(entry)
    assert len(row.checks) == 4
    assert row.edges_finite, format_table([row])
    if entry.status == "full":
        assert row.relative_error <= FULL_TOLERANCE, (format_table([row]), row.checks)


def test_relative_error_where_the_finite_difference_is_zero():
    # A partial entry's step that sees no jump gives a finite difference of
    # exactly 0: the table printed 4.6e+303 (|ad - fd| / 1e-300).
    from progenax.audit import _relative_error

    assert _relative_error(3.0, 0.0) == float("inf")
    assert _relative_error(0.0, 0.0) == 0.0
    assert _relative_error(1.1, 1.0) == pytest.approx(0.1)
