"""``History.plot``: fit's loss and accuracy curves with standard-error bands, to a file or into
given axes; a clear error naming the ``plot`` extra without matplotlib."""

from __future__ import annotations

import math
import struct
import sys

import numpy as np
import pytest

from tinyopt.train import EpochRecord, History, Result


def _history(classification: bool = True, val: bool = True) -> History:
    records = []
    for e in range(4):
        acc = (0.5 + 0.1 * e, 0.02) if classification else (None, None)
        train = Result(n=1000, batches=10, loss=1.0 / (e + 1), loss_unc=0.05,
                       accuracy=acc[0], accuracy_unc=acc[1])
        held = Result(n=200, batches=2 if e else 1, loss=1.2 / (e + 1),
                      loss_unc=0.08 if e else math.nan,  # one batch: no standard error
                      accuracy=acc[0] and acc[0] - 0.05, accuracy_unc=acc[1])
        records.append(EpochRecord(epoch=e, train=train, val=held if val else None, lr=[1e-3],
                                   seconds=0.5))
    return History(records)


def test_plot_writes_a_png_with_both_panels(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "curves.png"
    h = _history()
    text = repr(h)
    fig = h.plot(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 480)  # 10 x 4 inches at 120 dpi
    assert len(data) > 20_000  # curves, bands, labels: not a blank image
    loss_ax, acc_ax = fig.axes
    assert loss_ax.get_ylabel() == "loss" and acc_ax.get_ylabel() == "accuracy (%)"
    assert repr(h) == text  # the text summary is unchanged


def test_plot_into_given_axes_draws_means_and_bands(tmp_path):
    figure = pytest.importorskip("matplotlib.figure")
    fig = figure.Figure()
    loss_ax, acc_ax = fig.subplots(1, 2)
    h = _history()
    assert h.plot(axes=(loss_ax, acc_ax)) is fig
    train, val = loss_ax.get_lines()
    assert train.get_label() == "train" and val.get_label() == "validation"
    np.testing.assert_array_equal(train.get_xdata(), [1, 2, 3, 4])
    np.testing.assert_allclose(val.get_ydata(), [1.2 / (e + 1) for e in range(4)])
    np.testing.assert_allclose(acc_ax.get_lines()[0].get_ydata(), [50, 60, 70, 80])
    bands = loss_ax.collections
    assert len(bands) == 2
    top = bands[0].get_paths()[0].vertices[:, 1].max()  # the train band reaches mean + unc
    assert top == pytest.approx(1.0 + 0.05)
    # validation's first epoch has no standard error: its band starts at epoch 2
    assert bands[1].get_paths()[0].vertices[:, 0].min() == pytest.approx(2.0)


def test_plot_of_a_regression_history_has_the_loss_only(tmp_path):
    pytest.importorskip("matplotlib")
    fig = _history(classification=False, val=False).plot(tmp_path / "loss.svg")
    assert (tmp_path / "loss.svg").read_text().lstrip().startswith("<?xml")
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.get_lines()] == ["train"]


def test_without_matplotlib_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'tinyopt\[plot\]'"):
        _history().plot(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_an_empty_history_plots_empty_axes_without_warnings(tmp_path, recwarn):
    pytest.importorskip("matplotlib")
    fig = History().plot(tmp_path / "empty.png")
    assert (tmp_path / "empty.png").exists() and fig.axes[0].get_lines() == []
    assert not [w for w in recwarn if "legend" in str(w.message)]
