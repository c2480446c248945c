"""Result statistics: ggml_opt_result_loss / ggml_opt_result_accuracy formulas."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tinyopt.train.results import Accumulator, EpochRecord, History, Result


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=2, max_size=20), st.integers(1, 64))
def test_equal_batches_give_ggml_loss_uncertainty(losses, size):
    acc = Accumulator()
    for loss in losses:
        acc.add(size, loss)
    b = len(losses)
    # ggml: var = sum(l^2)/b - mean^2 (no Bessel correction), unc = sqrt(var / (b - 1));
    # np.var is the same quantity computed without cancellation
    x = np.array(losses, dtype=np.float64)
    var = float(np.var(x))
    assert acc.loss == pytest.approx(float(np.mean(losses)))
    # The bound of the running (West) update: the running mean is off by <= b eps max|l|, which
    # moves each squared deviation by <= 2 |l - mean| b eps max|l|; the sums add b eps var.
    # np.var's two passes have an error of the same form; 4 covers both (measured: <= 0.25).
    eps = np.finfo(np.float64).eps
    bound = 4 * b * eps * (float(np.abs(x).max()) * math.sqrt(var) + var)
    assert abs(acc.loss_unc ** 2 * (b - 1) - var) <= bound
    assert acc.n == b * size and acc.batches == b


@given(st.floats(0.0, 10.0), st.integers(2, 20), st.integers(1, 64))
def test_equal_batch_losses_give_zero_uncertainty(loss, b, size):
    acc = Accumulator()
    for _ in range(b):
        acc.add(size, loss)
    assert acc.loss == loss and acc.loss_unc == 0.0


def test_short_last_batch_weights_the_mean_by_samples():
    acc = Accumulator()
    acc.add(30, 1.0)
    acc.add(10, 3.0)
    assert acc.loss == pytest.approx(1.5)  # the per-sample mean
    var = (30 * 0.25 + 10 * 2.25) / 40
    assert acc.loss_unc == pytest.approx(math.sqrt(var / 1))


def test_accuracy_binomial_standard_error_and_degenerate_cases():
    acc = Accumulator()
    assert math.isnan(acc.loss) and math.isnan(acc.loss_unc) and acc.accuracy is None
    acc.add(10, 0.5, correct=7, counted=10)
    assert math.isnan(acc.loss_unc)  # one batch
    acc.add(10, 0.5, correct=8, counted=10)
    assert acc.accuracy == 0.75
    assert acc.accuracy_unc == pytest.approx(math.sqrt(0.75 * 0.25 / 19))


def test_predictions_land_at_their_rows():
    acc = Accumulator(size=5, predictions=True)
    acc.add(2, 0.0, pred=np.array([1, 2]), index=np.array([4, 0]))
    acc.add(3, 0.0, pred=np.array([3, 4, 5]), index=np.array([1, 2, 3]))
    np.testing.assert_array_equal(acc.result(1.0).predictions, [2, 3, 4, 5, 1])
    assert Accumulator(size=5).result(1.0).predictions is None


def test_result_text_and_history():
    r = Result(n=100, batches=4, loss=0.25, loss_unc=0.01, accuracy=0.9, accuracy_unc=0.03,
               seconds=2.0)
    assert str(r) == "loss 0.2500 ± 0.0100, accuracy 90.00 ± 3.00%"
    assert r.samples_per_second == 50
    assert str(Result(1, 1, 0.5, math.nan)) == "loss 0.5000"
    h = History([EpochRecord(0, r, None, [0.1], 2.5)])
    assert h.train == [r] and h.val == [None] and len(h) == 1 and h[0].lr == [0.1]
    assert json.loads(json.dumps(h.as_dict()))["epochs"][0]["train"]["accuracy"] == 0.9


def test_combined_sums_are_those_of_one_pass_over_every_batch():
    # what DistributedDataParallel's fit does with each rank's sums (Chan et al.'s update)
    rng = np.random.default_rng(1)
    batches = [(int(n), float(loss), int(c)) for n, loss, c in
               zip(rng.integers(1, 9, 12), rng.normal(2.0, 0.7, 12), rng.integers(0, 2, 12))]
    whole, parts = Accumulator(), [Accumulator(), Accumulator(), Accumulator()]
    for i, (n, loss, c) in enumerate(batches):
        whole.add(n, loss, c, n)
        parts[i % 3].add(n, loss, c, n)
    parts.insert(1, Accumulator())  # a rank without a batch changes nothing
    every = [p.sums() for p in parts]
    for p in parts:
        p.combine(every)
    for p in parts:
        assert p.sums() == parts[0].sums()
    assert (parts[0].n, parts[0].batches, parts[0].correct) == (whole.n, whole.batches,
                                                                 whole.correct)
    assert parts[0].loss == pytest.approx(whole.loss, rel=1e-12)
    assert parts[0].loss_unc == pytest.approx(whole.loss_unc, rel=1e-9)
    assert parts[0].accuracy_unc == whole.accuracy_unc
