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
