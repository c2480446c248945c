"""fit runs where the model's strategy says (``model.fit_strategy()``), through the hooks of
``tinyopt.train.strategy.FitStrategy`` and nothing else."""

import numpy as np

import tinyopt as to
from tinyopt import nn, optim
from tinyopt.train import fit
from tinyopt.train.strategy import FitStrategy, strategy_of


def blobs(n=96, d=4, classes=3):
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = rng.normal(scale=0.5, size=(n, d)).astype(np.float32)
    x[np.arange(n), y] += 3.0
    return x, y


class Recording(FitStrategy):
    """The single-process strategy, recording the hooks fit calls."""

    def __init__(self):
        self.calls = []

    def train_loader(self, train_set, batch_size, shuffle, seed):
        self.calls.append("train_loader")
        return super().train_loader(train_set, batch_size, shuffle, seed)

    def val_part(self, val_set):
        self.calls.append("val_part")
        return val_set

    def epoch_begin(self, epoch):
        self.calls.append(f"epoch {epoch}")

    def sync(self, end, logical, n):
        self.calls.append(f"sync {end}/{n}")
        return super().sync(end, logical, n)

    def reduce(self, acc):
        self.calls.append(f"reduce {acc.n}")

    def save(self, optimizer, write):
        self.calls.append("save")
        write({"note": "from the strategy"})

    def restore(self, path, batch_size, restore):
        self.calls.append("restore")
        return restore()


class Net(nn.Module):
    def __init__(self, strategy=None):
        super().__init__()
        to.manual_seed(0)
        self.fc = nn.Linear(4, 3)
        self.strategy = strategy

    def forward(self, x):
        return self.fc(x)

    def fit_strategy(self):
        return self.strategy


def run(strategy, tmp_path, **kw):
    model = Net(strategy)
    opt = optim.SGD(model.parameters(), lr=0.1)
    h = fit(model, blobs(), nn.CrossEntropyLoss(), opt, epochs=2, batch_size=16, val_split=0.25,
            seed=0, progress=False, **kw)
    return h, [p.numpy().copy() for p in model.parameters()]


def test_fit_calls_the_models_strategy(tmp_path):
    ref, ref_params = run(FitStrategy(), tmp_path)
    rec = Recording()
    h, got = run(rec, tmp_path, checkpoint=tmp_path / "c")
    # the same training as the default strategy: the hooks decide nothing more
    assert [r.train.loss for r in h] == [r.train.loss for r in ref]
    for a, b in zip(got, ref_params):
        np.testing.assert_array_equal(a, b)
    syncs = [f"sync {end}/72" for end in (16, 32, 48, 64, 72)]
    epoch = ["reduce 72", "reduce 24", "save"]  # training pass, validation pass, checkpoint
    assert rec.calls == (["train_loader", "val_part"] + ["epoch 0"] + syncs + epoch
                         + ["epoch 1"] + syncs + epoch)
    assert to.load(tmp_path / "c")["fit"]["note"] == "from the strategy"

    again = Recording()
    h2, _ = run(again, tmp_path, checkpoint=tmp_path / "c", resume=tmp_path / "c")
    assert "restore" in again.calls and len(h2) == 2


def test_a_model_without_a_strategy_trains_in_this_process():
    assert type(strategy_of(nn.Linear(2, 2))) is FitStrategy
    assert isinstance(strategy_of(Net(Recording())), Recording)
