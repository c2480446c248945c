"""Progress output of fit/evaluate: a live bar on a terminal, plain lines otherwise, or nothing."""

import io
import re
import time

import numpy as np

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.train import evaluate, fit
from tinyopt.train.progress import bar, format_seconds


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def _data(n=100):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=n).astype(np.int64)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    x[:, 0] += 2 * y
    return x, y


def _fit(progress, epochs=2, **kw):
    to.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x, y = _data()
    return fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
               epochs=epochs, batch_size=16, val_split=0.2, progress=progress, seed=0, **kw)


def test_terminal_gets_a_live_bar_per_phase(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = FakeTTY()
    _fit(out)
    text = out.getvalue()
    assert "\r" in text
    lines = [s for s in re.split(r"[\r\n]", text) if s.strip()]
    # every phase ends with a complete bar followed by a newline: 2 epochs x (train, val)
    assert text.count("\n") == 4
    last_train = [ln for ln in lines if ln.startswith("epoch 2/2 train")][-1].rstrip()
    assert re.search(r"\[=+\] 5/5 ", last_train)  # 80 samples / 16 = 5 batches, all done
    assert re.search(r"[\d,]+/s", last_train)  # samples per second
    assert re.search(r"loss \d+\.\d{4}±\d+\.\d{4}", last_train)
    assert re.search(r"acc \d+\.\d{2}±\d+\.\d{2}%", last_train)
    assert re.search(r"\d\d:\d\d<\d\d:\d\d$", last_train)  # elapsed<remaining
    assert any(ln.startswith("epoch 1/2 val") for ln in lines)


def test_redraw_pads_over_a_longer_previous_line():
    from tinyopt.train.progress import Progress
    from tinyopt.train.results import Accumulator

    out = FakeTTY()
    p = Progress(out, refresh=1e9)
    acc = Accumulator()
    acc.add(10, 123456.0, 5, 10)
    p.update("a long label", 1, 3, acc, 0.0)
    acc2 = Accumulator()
    acc2.add(10, 0.5)
    p.update("x", 2, 3, acc2, 0.0)
    first, second = out.getvalue().split("\r")[1:]
    assert len(second) >= len(first)


def test_not_a_terminal_gets_one_plain_line_per_epoch():
    out = io.StringIO()
    h = _fit(out, epochs=3)
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines, 1):
        assert line.startswith(f"epoch {i}/3: train loss ")
        assert "accuracy" in line and "(80 samples" in line and "; val loss" in line
        assert "(20 samples" in line
    assert f"{h[-1].train.loss:.4f} ± {h[-1].train.loss_unc:.4f}" in lines[-1]


def test_progress_false_prints_nothing(capsys):
    _fit(False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_true_writes_to_stderr(capsys):
    _fit(True, epochs=1)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("epoch 1/1: train loss")


def test_evaluate_progress():
    to.manual_seed(0)
    model = nn.Linear(4, 2)
    x, y = _data()
    out = io.StringIO()
    evaluate(model, (x, y), nn.CrossEntropyLoss(), 32, progress=out)
    assert out.getvalue().startswith("evaluate: loss ") and out.getvalue().count("\n") == 1
    tty = FakeTTY()
    evaluate(model, (x, y), nn.CrossEntropyLoss(), 32, progress=tty)
    assert tty.getvalue().startswith("\revaluate [") and tty.getvalue().endswith("\n")


def test_the_line_fits_the_terminal_and_keeps_the_times(monkeypatch):
    from tinyopt.train.progress import Progress
    from tinyopt.train.results import Accumulator

    acc = Accumulator()
    acc.add(64, 0.43121 * 64, 55, 64)
    for columns in (200, 100, 80, 60, 40, 30):
        monkeypatch.setenv("COLUMNS", str(columns))
        out = FakeTTY()
        p = Progress(out, refresh=1e9)
        start = time.perf_counter()
        p.begin("epoch 12/100 train", 2350)
        p.update("epoch 12/100 train", 1, 2350, acc, start)
        p.update("epoch 12/100 train", 1200, 2350, acc, start)
        drawn = [d.rstrip() for d in out.getvalue().split("\r")[1:]]
        assert "compiling…" in drawn[0]
        for line in drawn:
            assert len(line) <= columns - 1, (columns, line)
        last = drawn[-1]
        assert re.search(r"1200/2350  .*\d\d:\d\d<\d\d:\d\d$", last), last  # times never cut
        for part in last.split("1200/2350  ")[1].split("  ")[:-1]:  # the parts shown are whole
            assert re.fullmatch(r"[\d,]+/s|loss \d+\.\d{4}(±\d+\.\d{4})?|"
                                r"acc \d+\.\d\d(±\d+\.\d\d)?%", part), part
        if columns >= 100:
            assert "/s" in last and "acc" in last and "loss" in last and "[" in last
        if columns == 80:
            assert "loss" in last and "[" in last  # the rate and accuracy went first
    assert drawn[1].endswith("--:--")  # no estimate from the first batch (it compiles)


def test_estimates_leave_out_the_first_batch(monkeypatch):
    from tinyopt.train import progress as P
    from tinyopt.train.results import Accumulator

    monkeypatch.setenv("COLUMNS", "200")
    clock = iter([10.0, 11.0, 12.0])  # batch 1 done at 10 s (a 10 s compile), then 1 s each
    monkeypatch.setattr(P.time, "perf_counter", lambda: next(clock))
    out = FakeTTY()
    p = P.Progress(out, refresh=1e9)
    acc = Accumulator()
    for done in (1, 2, 3):
        acc.add(100, 50.0, 50, 100)
        p.update("train", done, 10, acc, 0.0)
    last = out.getvalue().split("\r")[-1]
    assert "100/s" in last and last.rstrip().endswith("00:12<00:07")  # 7 batches of 1 s left


def test_bar_and_time_formats():
    assert bar(0, 4, 8) == "[        ]"
    assert bar(2, 4, 8) == "[====>   ]"
    assert bar(4, 4, 8) == "[========]"
    assert format_seconds(65) == "01:05"
    assert format_seconds(3725) == "1:02:05"
