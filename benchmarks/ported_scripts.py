"""Run public PyTorch scripts on tinyopt with only their import lines rewritten.

    python benchmarks/ported_scripts.py [NAME...] [--torch] [--budget SECONDS] [--keep DIR]

Each script is exported from a local mirror of its repository (``fetch github:owner/name`` puts
one under ``/work/.mirror``; ``--mirrors`` or ``$TINYOPT_MIRRORS`` points elsewhere), its
``import torch...`` / ``from torch... import`` lines are rewritten as a user would
(``import torch`` -> ``import tinyopt as torch``, ``import torch.nn as nn`` -> ``import
tinyopt.nn as nn``, ``from torch.optim import Adam`` -> ``from tinyopt.optim import Adam``) and
it is run a few steps on tiny synthetic data.  The training code is never edited: sizes come
from the script's own arguments, data from small files written where the script reads them, and
packages the scripts need beside torch come from small stand-ins written against torch (and
rewritten like the scripts): ``torchvision`` (MNIST/FakeData/CIFAR10 of random images,
``transforms`` on numpy arrays and PIL images, ``save_image``, ``resnet18``), ``requests``
(serves the synthetic Cora archive the GCN/GAT scripts download), ``graphviz`` (records what
micrograd draws), ``gymnasium`` (CartPole-v1 with its equations) and ``six.moves``.  The repository's root is on the path (minGPT's package).  Notebooks run cell by cell in
order (a failing cell is recorded and the next runs: lectures hold cells meant out of order), on
torch too, and a notebook *runs* when no cell fails on tinyopt that passes on torch.

A script *runs* when it exits 0, or is still training when its time budget ends with no error;
otherwise the report gives its first error (the exception line and the script's frame).
``--torch`` runs the unmodified scripts on PyTorch instead: a control that the stand-ins and
data are right.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MIRRORS = Path(os.environ.get("TINYOPT_MIRRORS", "/work/.mirror"))

# name -> (repository, files to export, script, arguments, data maker, time budget in seconds)
SCRIPTS: dict[str, tuple[str, list[str], str, list[str], str, float]] = {
    "examples/mnist": ("pytorch/examples", ["mnist"], "mnist/main.py",
                       ["--dry-run", "--epochs", "1"], "", 240),
    "examples/mnist_rnn": ("pytorch/examples", ["mnist_rnn"], "mnist_rnn/main.py",
                           ["--dry-run", "--epochs", "1"], "", 240),
    "examples/mnist_forward_forward": ("pytorch/examples", ["mnist_forward_forward"],
                                       "mnist_forward_forward/main.py",
                                       ["--epochs", "2", "--train_size", "64",
                                        "--test_size", "32"], "", 240),
    "examples/mnist_hogwild": ("pytorch/examples", ["mnist_hogwild"], "mnist_hogwild/main.py",
                               ["--dry-run", "--epochs", "1", "--num-processes", "2"], "", 240),
    "examples/vae": ("pytorch/examples", ["vae"], "vae/main.py",
                     ["--epochs", "1", "--batch-size", "16"], "", 240),
    "examples/dcgan": ("pytorch/examples", ["dcgan"], "dcgan/main.py",
                       ["--dataset", "fake", "--dry-run", "--niter", "1", "--batchSize", "4",
                        "--ngf", "8", "--ndf", "8", "--workers", "0"], "", 300),
    "examples/siamese_network": ("pytorch/examples", ["siamese_network"],
                                 "siamese_network/main.py",
                                 ["--dry-run", "--epochs", "1", "--batch-size", "8"], "", 300),
    "examples/super_resolution": ("pytorch/examples", ["super_resolution"],
                                  "super_resolution/main.py",
                                  ["--upscale_factor", "3", "--batchSize", "4",
                                   "--testBatchSize", "4", "--nEpochs", "1", "--lr", "0.001"],
                                  "bsds300", 300),
    "examples/reinforce": ("pytorch/examples", ["reinforcement_learning"],
                           "reinforcement_learning/reinforce.py", ["--log-interval", "5"], "",
                           90),
    "examples/actor_critic": ("pytorch/examples", ["reinforcement_learning"],
                              "reinforcement_learning/actor_critic.py", ["--log-interval", "5"],
                              "", 90),
    "examples/regression": ("pytorch/examples", ["regression"], "regression/main.py", [], "",
                            120),
    "examples/time_sequence_prediction": ("pytorch/examples", ["time_sequence_prediction"],
                                          "time_sequence_prediction/train.py",
                                          ["--steps", "1"], "sine", 300),
    "examples/word_language_model": ("pytorch/examples", ["word_language_model"],
                                     "word_language_model/main.py",
                                     ["--epochs", "1", "--emsize", "16", "--nhid", "16",
                                      "--bptt", "8", "--batch_size", "4", "--log-interval", "5",
                                      "--onnx-export", "lm.onnx"], "wikitext", 300),
    "examples/word_language_model_transformer": (
        "pytorch/examples", ["word_language_model"], "word_language_model/main.py",
        ["--model", "Transformer", "--epochs", "1", "--emsize", "16", "--nhid", "16",
         "--bptt", "8", "--batch_size", "4", "--log-interval", "5", "--lr", "1"], "wikitext",
        300),
    "examples/gcn": ("pytorch/examples", ["gcn"], "gcn/main.py",
                     ["--epochs", "3", "--val-every", "1"], "cora", 240),
    "examples/gat": ("pytorch/examples", ["gat"], "gat/main.py",
                     ["--epochs", "3", "--val-every", "1", "--hidden-dim", "8",
                      "--num-heads", "2"], "cora", 240),
    "nanoGPT/train": ("karpathy/nanoGPT", ["."], "train.py",
                      ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
                       "--max_iters=4", "--eval_iters=2", "--eval_interval=2",
                       "--log_interval=1", "--n_layer=2", "--n_head=2", "--n_embd=32",
                       "--block_size=32", "--batch_size=4", "--dropout=0.0"],
                      "shakespeare_char", 300),
    "makemore/transformer": ("karpathy/makemore", ["."], "makemore.py",
                             ["-i", "names.txt", "--max-steps", "12", "--n-layer", "2",
                              "--n-embd", "16", "--n-embd2", "16", "--batch-size", "8",
                              "--type", "transformer"], "", 300),
    "makemore/rnn": ("karpathy/makemore", ["."], "makemore.py",
                     ["-i", "names.txt", "--max-steps", "12", "--n-embd", "16", "--n-embd2",
                      "16", "--batch-size", "8", "--type", "gru", "-o", "out_gru"], "", 300),
    "makemore/bow": ("karpathy/makemore", ["."], "makemore.py",
                     ["-i", "names.txt", "--max-steps", "12", "--n-embd", "16", "--n-embd2",
                      "16", "--batch-size", "8", "--type", "bow", "-o", "out_bow"], "", 300),
    "minGPT/adder": ("karpathy/minGPT", ["."], "projects/adder/adder.py",
                     ["--trainer.max_iters=6", "--trainer.batch_size=8", "--model.model_type=None",
                      "--model.n_layer=2",
                      "--model.n_head=2", "--model.n_embd=16", "--trainer.num_workers=0"], "", 300),
    "minGPT/chargpt": ("karpathy/minGPT", ["."], "projects/chargpt/chargpt.py",
                       ["--trainer.max_iters=6", "--trainer.batch_size=4",
                        "--model.model_type=None", "--model.n_layer=2", "--model.n_head=2",
                        "--model.n_embd=16", "--data.block_size=16",
                        "--trainer.num_workers=0"],
                       "input_txt", 300),
    "nn-zero-to-hero/micrograd_first_half": (
        "karpathy/nn-zero-to-hero",
        ["lectures/micrograd/micrograd_lecture_first_half_roughly.ipynb"],
        "lectures/micrograd/micrograd_lecture_first_half_roughly.ipynb", [], "", 120),
    "nn-zero-to-hero/micrograd_second_half": (
        "karpathy/nn-zero-to-hero",
        ["lectures/micrograd/micrograd_lecture_second_half_roughly.ipynb"],
        "lectures/micrograd/micrograd_lecture_second_half_roughly.ipynb", [], "", 120),
    **{f"nn-zero-to-hero/makemore_part{i}": (
        "karpathy/nn-zero-to-hero", [f"lectures/makemore/{nb}"], f"lectures/makemore/{nb}", [],
        "names_txt", 150) for i, nb in enumerate(
            ["makemore_part1_bigrams.ipynb", "makemore_part2_mlp.ipynb",
             "makemore_part3_bn.ipynb", "makemore_part4_backprop.ipynb",
             "makemore_part5_cnn1.ipynb"], start=1)},
}

_IMPORT = re.compile(r"^(\s*)import\s+(torch(?:\.[\w.]+)?)(\s+as\s+\w+)?\s*(#.*)?$")
_FROM = re.compile(r"^(\s*)from\s+torch((?:\.[\w.]+)?)\s+import\b")


def rewrite_imports(source: str) -> str:
    """The user's port: torch's import lines name tinyopt, nothing else changes."""
    out = []
    for line in source.split("\n"):
        m = _IMPORT.match(line)
        if m:
            indent, mod, alias = m.group(1), m.group(2), m.group(3)
            ours = "tinyopt" + mod[len("torch"):]
            if alias:
                line = f"{indent}import {ours}{alias}"
            elif mod == "torch":
                line = f"{indent}import tinyopt as torch"
            else:  # ``import torch.onnx`` binds torch and loads the submodule
                line = f"{indent}import {ours}; import tinyopt as torch"
        else:
            m = _FROM.match(line)
            if m:
                line = _FROM.sub(lambda m: f"{m.group(1)}from tinyopt{m.group(2)} import", line)
        out.append(line)
    return "\n".join(out)


NOTEBOOK_RUNNER = '''
"""Runs a notebook's code cells in order in one namespace, as a reader would; a cell that
raises is recorded (lectures hold cells run out of order) and the next one runs.  A ``for``
loop over a ``range`` of more than 1000 steps runs its first 300: the notebooks' step counts
are literals, not arguments."""
import ast
import json
import sys
import traceback

import matplotlib
matplotlib.use("Agg")


def _steps(r):
    return iter(r) if not isinstance(r, range) or len(r) <= 1000 else iter(r[:300])


class _Cap(ast.NodeTransformer):
    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = ast.Call(ast.Name("_steps", ast.Load()), [node.iter], [])
        return node


cells = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__", "_steps": _steps}
failed = []
for i, src in enumerate(cells):
    try:
        tree = ast.fix_missing_locations(_Cap().visit(ast.parse(src)))
        exec(compile(tree, f"<cell {i}>", "exec"), ns)
    except Exception as e:
        line = traceback.format_exception_only(type(e), e)[-1].strip()
        failed.append([i, line])
        print(f"cell {i}: {line}", file=sys.stderr)
json.dump(failed, open("_failed_cells.json", "w"))
'''


def notebook_cells(text: str, torch_mode: bool) -> list[str]:
    """A notebook's code cells (shell and magic lines left out), imports rewritten for
    tinyopt unless ``torch_mode``."""
    out = []
    for c in json.loads(text)["cells"]:
        if c.get("cell_type") != "code":
            continue
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        src = "\n".join(ln for ln in src.split("\n") if not ln.lstrip().startswith(("!", "%")))
        out.append(src if torch_mode else rewrite_imports(src))
    return out


# ---- stand-ins (written against torch; rewritten with the scripts) ------------------------------

TORCHVISION = {
    "__init__.py": "from . import datasets, transforms, utils, models\n",
    "datasets.py": '''
        """Random images shaped like the real datasets (uint8 numpy arrays, as torchvision's
        transforms take them)."""
        import numpy as np
        import torch


        class _Images:
            def __init__(self, n, shape, classes, transform, target_transform, seed):
                rng = np.random.default_rng(seed)
                self.images = rng.integers(0, 256, (n,) + shape, dtype=np.uint8)
                self.labels = rng.integers(0, classes, n)
                self.transform, self.target_transform = transform, target_transform
                self.data = torch.from_numpy(self.images)
                self.targets = torch.from_numpy(self.labels)
                self.classes = [str(i) for i in range(classes)]

            def __len__(self):
                return len(self.images)

            def __getitem__(self, i):
                img, label = self.images[i], int(self.labels[i])
                if self.transform is not None:
                    img = self.transform(img)
                if self.target_transform is not None:
                    label = self.target_transform(label)
                return img, label


        class MNIST(_Images):
            def __init__(self, root, train=True, transform=None, target_transform=None,
                         download=False):
                super().__init__(96 if train else 48, (28, 28), 10, transform, target_transform,
                                 0 if train else 1)


        class CIFAR10(_Images):
            def __init__(self, root, train=True, transform=None, target_transform=None,
                         download=False):
                super().__init__(64 if train else 32, (32, 32, 3), 10, transform,
                                 target_transform, 0 if train else 1)


        class FakeData(_Images):
            def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10,
                         transform=None, target_transform=None, random_offset=0):
                c, h, w = image_size
                super().__init__(min(size, 16), (h, w, c), num_classes, transform,
                                 target_transform, random_offset)
        ''',
    "transforms.py": '''
        import numpy as np
        import torch


        def _array(img):
            return np.asarray(img)


        class Compose:
            def __init__(self, transforms):
                self.transforms = transforms

            def __call__(self, x):
                for t in self.transforms:
                    x = t(x)
                return x


        class ToTensor:
            """HxW(xC) uint8 -> CxHxW float in [0, 1], as torchvision's."""
            def __call__(self, img):
                a = _array(img)
                if a.ndim == 2:
                    a = a[:, :, None]
                return torch.from_numpy(np.ascontiguousarray(
                    a.transpose(2, 0, 1)).astype(np.float32) / 255)


        class Normalize:
            def __init__(self, mean, std):
                self.mean, self.std = mean, std

            def __call__(self, t):
                m = torch.tensor(self.mean).view(-1, 1, 1)
                s = torch.tensor(self.std).view(-1, 1, 1)
                return (t - m) / s


        class Lambda:
            def __init__(self, f):
                self.f = f

            def __call__(self, x):
                return self.f(x)


        class Resize:
            def __init__(self, size):
                self.size = size

            def __call__(self, img):
                if hasattr(img, "resize"):  # PIL
                    s = self.size
                    return img.resize((s, s) if isinstance(s, int) else (s[1], s[0]))
                return img


        class CenterCrop:
            def __init__(self, size):
                self.size = size

            def __call__(self, img):
                if hasattr(img, "crop"):
                    w, h = img.size
                    s = self.size
                    left, top = (w - s) // 2, (h - s) // 2
                    return img.crop((left, top, left + s, top + s))
                return img
        ''',
    "utils.py": '''
        import numpy as np


        def make_grid(tensor, nrow=8, padding=2, normalize=False, **kw):
            return tensor


        def save_image(tensor, fp, nrow=8, padding=2, normalize=False, **kw):
            np.save(str(fp) + ".npy", tensor.detach().cpu().numpy())
        ''',
    "models.py": '''
        """resnet18 as torchvision builds it (BasicBlock, [2, 2, 2, 2])."""
        import torch.nn as nn


        class BasicBlock(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(cout)
                self.relu = nn.ReLU(inplace=True)
                self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(cout)
                self.downsample = None
                if stride != 1 or cin != cout:
                    self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                    nn.BatchNorm2d(cout))

            def forward(self, x):
                idt = x if self.downsample is None else self.downsample(x)
                out = self.relu(self.bn1(self.conv1(x)))
                out = self.bn2(self.conv2(out))
                return self.relu(out + idt)


        class ResNet(nn.Module):
            def __init__(self, num_classes=1000):
                super().__init__()
                self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
                self.bn1 = nn.BatchNorm2d(64)
                self.relu = nn.ReLU(inplace=True)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
                layers, cin = [], 64
                for i, c in enumerate([64, 128, 256, 512]):
                    blocks = [BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)]
                    setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
                    cin = c
                self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
                self.fc = nn.Linear(512, num_classes)

            def forward(self, x):
                x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
                x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
                return self.fc(self.avgpool(x).flatten(1))


        def resnet18(weights=None, **kw):
            return ResNet(**kw)
        ''',
}

REQUESTS = '''
"""Serves the files the harness placed in ./_downloads (by the URL's last path component)."""
import io
import os


class _Response:
    def __init__(self, data):
        self.raw = io.BytesIO(data)
        self.content = data
        self.status_code = 200

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def raise_for_status(self):
        pass


def get(url, stream=False, **kw):
    with open(os.path.join("_downloads", url.rsplit("/", 1)[-1]), "rb") as f:
        return _Response(f.read())
'''


GRAPHVIZ = '''
"""Records the graph the micrograd lectures draw (nothing is rendered)."""


class Digraph:
    def __init__(self, *a, **kw):
        self.nodes, self.edges = [], []

    def node(self, name, label=None, **kw):
        self.nodes.append((name, label))

    def edge(self, a, b, **kw):
        self.edges.append((a, b))

    def render(self, *a, **kw):
        return ""
'''


GYMNASIUM = '''
"""CartPole-v1 with Gymnasium's equations (Barto, Sutton & Anderson 1983) and API."""
import math
from types import SimpleNamespace

import numpy as np


class CartPole:
    spec = SimpleNamespace(reward_threshold=475.0, max_episode_steps=500)

    def __init__(self, render_mode=None):
        self.rng = np.random.default_rng()
        self.state, self.steps = None, 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.state, self.steps = self.rng.uniform(-0.05, 0.05, 4), 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = np.array([x + 0.02 * x_dot, x_dot + 0.02 * x_acc,
                               theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc])
        self.steps += 1
        done = bool(abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360)
        return self.state.astype(np.float32), 1.0, done, self.steps >= 500, {}

    def render(self):
        pass

    def close(self):
        pass


def make(name, render_mode=None, **kw):
    if name != "CartPole-v1":
        raise NotImplementedError(name)
    return CartPole(render_mode)
'''


def _write_standins(where: Path, torch_mode: bool) -> None:
    tv = where / "torchvision"
    tv.mkdir(parents=True, exist_ok=True)
    for name, src in TORCHVISION.items():
        src = textwrap.dedent(src)
        (tv / name).write_text(src if torch_mode else rewrite_imports(src))
    (where / "requests.py").write_text(REQUESTS)
    (where / "graphviz.py").write_text(GRAPHVIZ)
    (where / "gymnasium.py").write_text(GYMNASIUM)
    (where / "six").mkdir(exist_ok=True)  # super_resolution's ``from six.moves import urllib``
    (where / "six" / "__init__.py").write_text("")
    (where / "six" / "moves.py").write_text("import urllib\nimport urllib.request\n")


# ---- tiny data, written where each script reads it ---------------------------------------------

_WORDS = "the a cat dog sat on mat and ran far away <unk> home".split()


def _make_data(kind: str, script_dir: Path, env: dict) -> None:
    rng = np.random.default_rng(0)
    if kind == "wikitext":
        d = script_dir / "data" / "wikitext-2"
        d.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", 60), ("valid", 20), ("test", 20)):
            lines = [" ".join(rng.choice(_WORDS, 8)) for _ in range(n)]
            (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    elif kind == "cora":
        n, f = 1700, 20  # the scripts split 1000 test / 500 validation / the rest training
        feats = (rng.random((n, f)) < 0.2).astype(int)
        feats[:, 0] = 1  # no empty rows
        content = "\n".join(f"{100 + i}\t" + "\t".join(map(str, feats[i])) +
                            f"\tC{rng.integers(0, 3)}" for i in range(n))
        cites = "\n".join(f"{100 + a}\t{100 + b}" for a, b in rng.integers(0, n, (4000, 2)))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, text in (("cora/cora.content", content), ("cora/cora.cites", cites)):
                data = (text + "\n").encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        (script_dir / "_downloads").mkdir(exist_ok=True)
        (script_dir / "_downloads" / "cora.tgz").write_bytes(buf.getvalue())
    elif kind == "shakespeare_char":
        import pickle
        d = script_dir / "data" / "shakespeare_char"
        d.mkdir(parents=True, exist_ok=True)
        chars = sorted(set("abcdefghij klmnop\n"))
        for split, n in (("train", 4000), ("val", 1000)):
            rng.integers(0, len(chars), n).astype(np.uint16).tofile(d / f"{split}.bin")
        with open(d / "meta.pkl", "wb") as fh:
            pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                         "stoi": {c: i for i, c in enumerate(chars)}}, fh)
    elif kind == "input_txt":
        (script_dir / "input.txt").write_text(  # (chargpt samples from "O God, O God!")
            "O God, O God!\n" + "\n".join(" ".join(rng.choice(_WORDS, 10)) for _ in range(80)))
    elif kind == "names_txt":
        src = MIRRORS / "karpathy+makemore" / "repo"
        names = subprocess.run(["git", "-C", str(src), "show", "HEAD:names.txt"],
                               capture_output=True, text=True, check=True).stdout
        (script_dir / "names.txt").write_text(names)
    elif kind == "sine":  # the example's own data step, rewritten like the script
        subprocess.run([sys.executable, "generate_sine_wave.py"], cwd=script_dir, check=True,
                       env=env, capture_output=True)
    elif kind == "bsds300":
        from PIL import Image
        for split, n in (("train", 8), ("test", 4)):
            d = script_dir / "dataset" / "BSDS300" / "images" / split
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
                    d / f"{i}.jpg")


def _export(repo: str, paths: list[str], dest: Path) -> None:
    git = MIRRORS / repo.replace("/", "+") / "repo"
    if not git.exists():
        raise FileNotFoundError(f"no mirror of {repo} at {git} (fetch github:{repo})")
    listing = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", "-l", "HEAD", "--", *paths],
                             capture_output=True, text=True, check=True).stdout
    # a mirror may leave its largest blobs out (their size reads "-" or "BAD"): the data files
    # the harness writes itself
    files = [ln.split("\t", 1)[1] for ln in listing.splitlines()
             if ln.split("\t")[0].split()[-1].isdigit()]
    archive = subprocess.run(["git", "-C", str(git), "archive", "HEAD", "--", *files],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def first_error(stderr: str) -> str:
    """The exception line and the deepest frame in the script's own files."""
    lines = stderr.rstrip().split("\n")
    exc = next((ln for ln in reversed(lines) if ln and not ln.startswith(" ")), "")
    frames = [ln.strip() for ln in lines if ln.strip().startswith("File ") and
              "site-packages" not in ln and "/src/tinyopt/" not in ln and "/lib/python" not in ln]
    return exc + (f"  [{frames[-1]}]" if frames else "")


def run_one(name: str, torch_mode: bool, budget: float | None, keep: Path | None) -> dict:
    repo, paths, script, argv, data, default_budget = SCRIPTS[name]
    budget = budget or default_budget
    base = Path(tempfile.mkdtemp(prefix="ported_", dir=keep))
    _export(repo, paths, base)
    target = base / script
    if target.suffix == ".ipynb":
        notebook = target.with_suffix(".cells.json")
        notebook.write_text(json.dumps(notebook_cells(target.read_text(), torch_mode)))
        target = target.with_name("_run_notebook.py")
        target.write_text(NOTEBOOK_RUNNER)
        argv = [notebook.name]
    if not torch_mode:
        for p in base.rglob("*.py"):
            p.write_text(rewrite_imports(p.read_text("utf-8", "replace")))
    standins = base / "_standins"
    _write_standins(standins, torch_mode)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [str(standins), str(ROOT / "src"), str(target.parent), str(base)]))
    if data:
        _make_data(data, target.parent, env)
    t0 = time.perf_counter()
    out, errs = target.parent / "_stdout.txt", target.parent / "_stderr.txt"
    with open(out, "w") as fo, open(errs, "w") as fe:  # kept: how far a budgeted run got
        try:
            p = subprocess.run([sys.executable, target.name, *argv], cwd=target.parent, env=env,
                               stdout=fo, stderr=fe, timeout=budget)
            status = "runs" if p.returncode == 0 else "error"
            err = "" if p.returncode == 0 else first_error(errs.read_text("utf-8", "replace"))
        except subprocess.TimeoutExpired:
            status, err = "runs (budget)", ""
    failed = target.parent / "_failed_cells.json"
    if failed.exists():  # a notebook: the cells that fail here and not on torch
        cells = {i: e for i, e in json.loads(failed.read_text())}
        if not torch_mode:
            control = run_one(name, True, budget, keep)
            cells = {i: e for i, e in cells.items() if i not in control["failed_cells"]}
        status = "error" if cells and not torch_mode else status
        err = "; ".join(f"cell {i}: {e}" for i, e in sorted(cells.items())[:2])
        return {"script": name, "status": status, "seconds": round(time.perf_counter() - t0, 1),
                "first_error": err, "failed_cells": cells, "dir": str(base)}
    return {"script": name, "status": status, "seconds": round(time.perf_counter() - t0, 1),
            "first_error": err, "dir": str(base)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="scripts to run (parts of their names; all when none)")
    ap.add_argument("--torch", action="store_true", help="run unmodified on PyTorch")
    ap.add_argument("--budget", type=float, help="seconds per script (default: its own)")
    ap.add_argument("--keep", type=Path, help="make the run directories here")
    ap.add_argument("--mirrors", type=Path, help="where the mirrors are")
    args = ap.parse_args(argv)
    global MIRRORS
    MIRRORS = args.mirrors or MIRRORS
    chosen = [n for n in SCRIPTS if not args.names or any(a in n for a in args.names)]
    results = []
    for name in chosen:
        r = run_one(name, args.torch, args.budget, args.keep)
        print(f"{r['status']:14s} {r['seconds']:7.1f}s  {name}  {r['first_error']}", flush=True)
        results.append(r)
    ok = sum(r["status"] != "error" for r in results)
    print(f"{ok} of {len(results)} run")
    return results


if __name__ == "__main__":
    main()
