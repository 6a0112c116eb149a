"""ArviZ figures: the SBC rank plot, and figures saved atomically."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from progenax.infer import sbc_rank_plot  # noqa: E402
from progenax.plotting import save_png  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_sbc_rank_plot_writes_one_panel_per_parameter(tmp_path):
    rng = np.random.default_rng(0)
    ranks = {"r_h": rng.integers(0, 100, 120), "W0": rng.integers(0, 100, 120)}
    path = sbc_rank_plot(ranks, 99, tmp_path / "sbc.png", title="uniform ranks")
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary was renamed, not left behind


def test_a_failed_figure_save_keeps_the_old_file(tmp_path):
    path = tmp_path / "figure.png"
    path.write_bytes(b"old figure")
    figure = plt.figure()

    def broken_savefig(target, **kwargs):
        with open(target, "wb") as f:
            f.write(b"half a PNG")
        raise OSError("disk full")

    figure.savefig = broken_savefig
    with pytest.raises(OSError, match="disk full"):
        save_png(figure, path)
    plt.close(figure)
    assert path.read_bytes() == b"old figure"
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_second_fit_in_one_process():
    # numpyro keeps each site's `infer` dict in pytree metadata that JAX compares
    # with `==` against its caches: the starting values stored there as bare
    # arrays were the first fit's leaked tracers, and the second fit in a
    # process (its `to_inference_data`) raised "arrays cannot be passed as
    # metadata fields". They are wrapped (`initialization.StartValue`).
    import progenax
    import progenax.infer

    ic = progenax.plummer_builder(0, n=100, Q=None)
    for _ in range(2):
        idata = progenax.infer.fit_catalogue(ic, "plummer", num_warmup=5, num_samples=5, num_chains=1, progress=False)
        assert idata.posterior["r_h"].shape == (1, 5)
