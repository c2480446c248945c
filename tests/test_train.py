"""fit() and evaluate(): learning, accumulation, validation split, schedulers, callbacks, errors,
plan reuse and determinism."""

import json
import math

import numpy as np
import pytest

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.data import Dataset, TensorDataset
from tinyopt.engine import cache_info
from tinyopt.train import Callback, History, Result, evaluate, fit


def blobs(n=240, d=6, classes=3, seed=0):
    """Separable Gaussian blobs: class c centred at 3 e_c."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = rng.normal(scale=0.5, size=(n, d)).astype(np.float32)
    x[np.arange(n), y] += 3.0
    return x, y


def mlp(d=6, classes=3, seed=0):
    to.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, classes))


def params(model):
    return [p.data.numpy().copy() for p in model.parameters()]


def test_small_model_learns_separable_problem():
    x, y = blobs()
    model = mlp()
    h = fit(model, (x, y), nn.CrossEntropyLoss(), optim.Adam(model.parameters(), lr=0.02),
            epochs=6, batch_size=32, val_split=0.25, seed=0, progress=False)
    assert isinstance(h, History) and len(h) == 6
    losses = [r.loss for r in h.train]
    assert losses[-1] < 0.5 * losses[0]
    assert h[-1].train.accuracy > 0.95 and h[-1].val.accuracy > 0.95
    # evaluate on the held-out tail agrees with the last validation result (same weights)
    r = evaluate(model, (x[180:], y[180:]), nn.CrossEntropyLoss(), batch_size=32)
    assert r.n == 60 and r.loss == pytest.approx(h[-1].val.loss, rel=1e-6)
    assert r.accuracy == h[-1].val.accuracy


@pytest.mark.parametrize("n", [160, 150])  # 150: a short last logical (and physical) batch
def test_accumulation_equals_large_batch_with_sgd(n):
    x, y = blobs(n)
    runs = []
    for batch, logical in ((10, 40), (40, None)):
        model = mlp()
        opt = optim.SGD(model.parameters(), lr=0.3)
        fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=2, batch_size=batch,
            logical_batch_size=logical, shuffle=False, progress=False)
        runs.append(params(model))
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_accumulation_counts_optimizer_steps():
    x, y = blobs(150)
    model = mlp()
    steps = []

    class Count(Callback):
        def on_before_step(self, step):
            steps.append(step)
            assert all(p.grad is not None for p in model.parameters())

    fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1), epochs=2,
        batch_size=10, logical_batch_size=40, callbacks=[Count()], progress=False)
    assert steps == list(range(8))  # ceil(150 / 40) = 4 steps per epoch


def test_val_split_is_taken_from_the_end():
    x, y = blobs(100)
    model = mlp()
    before = params(model)
    h = fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.0),
            epochs=1, batch_size=16, val_split=0.3, shuffle=False, predictions=True,
            progress=False)
    assert [a.tolist() for a in params(model)] == [b.tolist() for b in before]  # lr = 0
    assert h[0].train.n == 70 and h[0].val.n == 30
    tail = evaluate(model, (x[70:], y[70:]), nn.CrossEntropyLoss(), batch_size=16,
                    predictions=True)
    head = evaluate(model, (x[:70], y[:70]), nn.CrossEntropyLoss(), batch_size=16,
                    predictions=True)
    assert h[0].val.loss == pytest.approx(tail.loss, rel=1e-6)
    np.testing.assert_array_equal(h[0].val.predictions, tail.predictions)
    np.testing.assert_array_equal(h[0].train.predictions, head.predictions)


def test_shuffled_train_predictions_are_in_dataset_order():
    x, y = blobs(90)
    model = mlp()
    h = fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.0),
            epochs=1, batch_size=16, predictions=True, seed=3, progress=False)
    ref = evaluate(model, (x, y), nn.CrossEntropyLoss(), batch_size=16, predictions=True)
    np.testing.assert_array_equal(h[0].train.predictions, ref.predictions)


def test_val_data_and_history_contents():
    x, y = blobs(120)
    xv, yv = blobs(40, seed=1)
    model = mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    h = fit(model, (x, y), nn.functional.cross_entropy, opt, epochs=3, batch_size=32,
            val_data=TensorDataset(xv, yv), progress=False)
    assert len(h) == 3 and [r.epoch for r in h] == [0, 1, 2]
    for rec in h:
        assert rec.train.n == 120 and rec.train.batches == 4 and rec.val.n == 40
        assert rec.train.seconds > 0 and rec.seconds >= rec.train.seconds
        assert rec.lr == [0.1]
        assert 0 <= rec.train.accuracy <= 1 and rec.train.accuracy_unc >= 0
        assert rec.train.predictions is None
    d = h.as_dict()
    assert json.loads(json.dumps(d)) == d and d["stopped_early"] is False
    assert "3 epochs" in repr(h)


def test_regression_loss_has_no_accuracy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    t = (x @ np.array([[1.0], [-2.0], [0.5], [0.0]], np.float32))
    to.manual_seed(0)
    model = nn.Linear(4, 1)
    h = fit(model, (x, t), nn.MSELoss(), optim.SGD(model.parameters(), lr=0.1), epochs=5,
            batch_size=16, progress=False, seed=0)
    assert h[-1].train.accuracy is None and h[-1].train.accuracy_unc is None
    assert h[-1].train.loss < 0.1 * h[0].train.loss
    r = evaluate(model, (x, t), nn.MSELoss(), 16, predictions=True)
    assert r.predictions.shape == (64, 1)
    np.testing.assert_allclose(r.predictions, model(x).numpy(), rtol=1e-6)


def test_modes_train_for_training_eval_without_grad_for_validation():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 3)

        def forward(self, x):
            seen.append((self.training, to.is_grad_enabled()))
            return self.fc(x)

    x, y = blobs(64)
    model = Probe()
    model.eval()
    fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1), epochs=1,
        batch_size=32, val_split=0.5, progress=False)
    assert model.training is False  # mode restored
    # two shape probes (train and validation data: graphs built in eval mode, never run), then
    # one training batch and one validation batch
    assert seen == [(False, False), (False, False), (True, True), (False, False)]
    seen.clear()
    model.train()
    grads = [p.grad for p in model.parameters()]
    evaluate(model, (x, y), nn.CrossEntropyLoss(), 64)
    assert seen == [(False, False), (False, False)] and model.training
    assert all(g is p.grad for g, p in zip(grads, model.parameters()))


def test_no_new_plan_after_second_epoch():
    x, y = blobs(100)  # 100 = 3 * 32 + 4: two train shapes, two val shapes (80 / 20 split)
    model = mlp()
    misses = []
    fit(model, (x, y), nn.CrossEntropyLoss(), optim.Adam(model.parameters()), epochs=3,
        batch_size=32, logical_batch_size=64, val_split=0.2, progress=False,
        callbacks=lambda epoch, record: misses.append(cache_info().misses))
    # (a structure seen once an epoch, the last short batch, compiles in the second: eager.py)
    assert misses[2] == misses[1]


def test_same_seed_same_run_other_seed_other_run():
    x, y = blobs(96)

    def run(seed):
        model = mlp()
        fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
            epochs=2, batch_size=16, seed=seed, progress=False)
        return params(model)

    a, b, c = run(1), run(1), run(2)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not all(np.array_equal(u, v) for u, v in zip(a, c))


def test_scheduler_per_step_per_epoch_and_plateau():
    x, y = blobs(64)

    def lrs(make, **kw):
        model = mlp()
        opt = optim.SGD(model.parameters(), lr=1.0)
        h = fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=2, batch_size=16,
                scheduler=make(opt), progress=False, **kw)
        return [r.lr[0] for r in h]

    step = lambda opt: optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)  # noqa: E731
    assert lrs(step) == [0.5 ** 4, 0.5 ** 8]  # 4 optimizer steps per epoch
    assert lrs(step, scheduler_interval="epoch") == [0.5, 0.25]
    # mode='max' on a decreasing loss: never improving after the first epoch, patience 0
    plateau = lambda opt: optim.lr_scheduler.ReduceLROnPlateau(  # noqa: E731
        opt, mode="max", patience=0, factor=0.5)
    model = mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    h = fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=3, batch_size=16, val_split=0.25,
            scheduler=plateau(opt), progress=False)
    assert [r.lr[0] for r in h] == pytest.approx([0.1, 0.05, 0.025])


def test_callbacks_hooks_and_early_stop():
    x, y = blobs(64)
    calls = []

    class Log(Callback):
        def on_train_begin(self):
            calls.append("begin")

        def on_epoch_begin(self, epoch):
            calls.append(f"epoch{epoch}")

        def on_epoch_end(self, epoch, record):
            calls.append(f"end{epoch}")
            return epoch == 1

        def on_train_end(self, history):
            calls.append(f"done{len(history)}")

    model = mlp()
    h = fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
            epochs=5, batch_size=32, callbacks=[Log(), lambda e, r: None], progress=False)
    assert calls == ["begin", "epoch0", "end0", "epoch1", "end1", "done2"]
    assert len(h) == 2 and h.stopped_early


class _Pairs(Dataset):
    """A data set that is not array-backed (samples built one by one)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def test_generic_dataset_and_out_of_range_label_in_a_later_batch():
    x, y = blobs(64)
    model = mlp()
    h = fit(model, _Pairs(x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
            epochs=1, batch_size=16, progress=False)
    assert h[0].train.n == 64
    y_bad = y.copy()
    y_bad[-1] = 3
    with pytest.raises(ValueError, match="label 3 .* 3 classes"):
        fit(model, _Pairs(x, y_bad), nn.CrossEntropyLoss(),
            optim.SGD(model.parameters(), lr=0.1), epochs=1, batch_size=16, shuffle=False,
            progress=False)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(batch_size=0), ValueError, "batch_size must be a positive integer"),
    (dict(batch_size=16, logical_batch_size=24), ValueError, "multiple of batch_size"),
    (dict(batch_size=16, val_split=1.0), ValueError, r"val_split must be a number in \[0, 1\)"),
    (dict(batch_size=16, val_split=-0.1), ValueError, "val_split"),
    (dict(batch_size=16, val_split=1e-17), ValueError, "leaves no validation sample"),
    (dict(batch_size=128), ValueError, "fewer than one batch"),
    (dict(batch_size=16, logical_batch_size=112), ValueError, "logical_batch_size=112"),
    (dict(batch_size=16, val_split=0.5, logical_batch_size=64), ValueError, "32 samples"),
    (dict(batch_size=16, epochs=-1), ValueError, "epochs"),
    (dict(batch_size=16, scheduler_interval="batch"), ValueError, "scheduler_interval"),
    (dict(batch_size=16, callbacks=[3]), TypeError, r"callbacks\[0\]"),
    (dict(batch_size=16, progress=3), TypeError, "progress"),
    (dict(batch_size=16, seed=1.5), TypeError, "seed"),
    (dict(batch_size=16, checkpoint=3), TypeError, "checkpoint must be a path"),
    (dict(batch_size=16, checkpoint="/no-such-folder/run.tinyopt"), FileNotFoundError,
     "folder of checkpoint"),
    (dict(batch_size=16, resume="no-such-file.tinyopt"), FileNotFoundError, "does not exist"),
])
def test_bad_arguments_fail_before_training(kwargs, error, match):
    x, y = blobs(64)
    model = mlp()
    opt = optim.Adam(model.parameters())
    before = params(model)
    kwargs = {"epochs": 1, "progress": False, **kwargs}
    with pytest.raises(error, match=match):
        fit(model, (x, y), nn.CrossEntropyLoss(), opt, **kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(before, params(model)))
    assert opt.state_dict()["state"] == {} and all(p.grad is None for p in model.parameters())


def test_checkpoint_every_epoch_and_resume_after_the_last_epoch(tmp_path):
    """The checkpoint follows each epoch (also the one a callback stops at); resuming a finished
    run trains nothing and returns the saved history with the saved weights."""
    x, y = blobs(64)
    path = tmp_path / "run.tinyopt"
    seen = []

    def watch(epoch, record):
        seen.append(to.load(path)["fit"]["epoch"] if path.exists() else None)
        return epoch == 2  # stop after the third epoch

    model = mlp()
    h = fit(model, (x, y), nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1),
            epochs=5, batch_size=16, callbacks=[watch], progress=False, checkpoint=path)
    assert seen == [None, 1, 2] and len(h) == 3 and h.stopped_early
    saved = to.load(path)
    assert saved["fit"]["epoch"] == 3 and saved["fit"]["step"] == 12
    assert History.from_dict(saved["fit"]["history"]).as_dict() == h.as_dict()

    fresh = mlp(seed=5)
    opt = optim.SGD(fresh.parameters(), lr=0.1)
    again = fit(fresh, (x, y), nn.CrossEntropyLoss(), opt, epochs=3, batch_size=16,
                progress=False, resume=path)
    assert again.as_dict() == {**h.as_dict(), "stopped_early": False}
    assert all(np.array_equal(a, b) for a, b in zip(params(model), params(fresh)))


def test_resume_mismatches_fail_before_anything_changes(tmp_path):
    x, y = blobs(64)
    path = tmp_path / "run.tinyopt"
    model = mlp()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16, progress=False,
        checkpoint=path)
    to.save(tmp_path / "plain.tinyopt", model=model)

    class Counter(Callback):
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    fresh = mlp(seed=3)
    opt = optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1)
    before, rng = params(fresh), to.get_rng_state()
    for kwargs, match in [
        (dict(resume=tmp_path / "plain.tinyopt"), "not written by fit"),
        (dict(data=(x[:48], y[:48])), "written for 64 training samples, this call has 48"),
        (dict(shuffle=False), "shuffle=True, this call has shuffle=False"),
        (dict(scheduler=sched), "holds no scheduler state"),
        (dict(callbacks=[Counter()]), r"callbacks \[\], but .* are \['callback_0'\]"),
    ]:
        data = kwargs.pop("data", (x, y))
        kwargs = {"resume": path, **kwargs}
        with pytest.raises(ValueError, match=match):
            fit(fresh, data, nn.CrossEntropyLoss(), opt, epochs=2, batch_size=16,
                progress=False, **kwargs)
        assert all(np.array_equal(a, b) for a, b in zip(before, params(fresh)))
        assert opt.state_dict()["state"] == {} and sched.last_epoch == 0
        assert to.get_rng_state() == rng


def test_bad_data_fails_before_training():
    x, y = blobs(64)
    model = mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    before = params(model)
    y_bad = y.copy()
    y_bad[50] = 7
    with pytest.raises(ValueError, match=r"label 7 at index 50, outside the model's 3 classes"):
        fit(model, (x, y_bad), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16)
    with pytest.raises(ValueError, match="validation data has label 7"):
        fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16,
            val_data=(x, y_bad))
    with pytest.raises(ValueError, match="label -1"):
        fit(model, (x, -np.ones_like(y)), nn.functional.nll_loss, opt, epochs=1, batch_size=16)
    with pytest.raises(ValueError, match="not both"):
        fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16, val_split=0.5,
            val_data=(x, y))
    with pytest.raises(ValueError, match="scalar"):
        fit(model, (x, y), nn.CrossEntropyLoss(reduction="none"), opt, epochs=1, batch_size=16)
    with pytest.raises(ValueError, match=r"\(inputs, targets\)"):
        fit(model, (x, y, y), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16)
    with pytest.raises(TypeError, match="Module"):
        fit(lambda x: x, (x, y), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16)
    with pytest.raises(ValueError, match="different optimizer"):
        other = optim.SGD(mlp().parameters(), lr=0.1)
        fit(model, (x, y), nn.CrossEntropyLoss(), opt, epochs=1, batch_size=16,
            scheduler=optim.lr_scheduler.StepLR(other, 1))
    assert all(np.array_equal(a, b) for a, b in zip(before, params(model)))
    # ignore_index labels are allowed and not counted in the accuracy
    y_ign = y.copy()
    y_ign[:10] = -100
    r = evaluate(model, (x, y_ign), nn.CrossEntropyLoss(), 16)
    ref = (model(x).numpy().argmax(1) == y)[10:].mean()
    assert r.accuracy == pytest.approx(ref)


def test_evaluate_matches_a_manual_computation():
    x, y = blobs(50)
    model = mlp()
    r = evaluate(model, (x, y), nn.CrossEntropyLoss(), batch_size=20, predictions=True)
    assert isinstance(r, Result) and r.n == 50 and r.batches == 3
    logits = model(x).numpy()
    batch_losses = [nn.functional.cross_entropy(logits[i:i + 20], y[i:i + 20]).item()
                    for i in (0, 20, 40)]
    sizes = np.array([20, 20, 10])
    mean = (sizes * batch_losses).sum() / 50
    assert r.loss == pytest.approx(mean, rel=1e-5)
    var = (sizes * (np.array(batch_losses) - mean) ** 2).sum() / 50
    assert r.loss_unc == pytest.approx(math.sqrt(var / 2), rel=1e-4)
    acc = (logits.argmax(1) == y).mean()
    assert r.accuracy == pytest.approx(acc)
    assert r.accuracy_unc == pytest.approx(math.sqrt(acc * (1 - acc) / 49))
    np.testing.assert_array_equal(r.predictions, logits.argmax(1))
    with pytest.raises(ValueError, match="batch_size"):
        evaluate(model, (x, y), nn.CrossEntropyLoss(), 0)
    with pytest.raises(ValueError, match="empty"):
        evaluate(model, (x[:0], y[:0]), nn.CrossEntropyLoss(), 4)
