# TEMPORARY STUB (main engineer) so the package imports; helper-1 replaces this file.
def radii_from_mass_fraction(model, u):
    raise NotImplementedError


def sample_eddington_speeds(model, key, radii):
    raise NotImplementedError
