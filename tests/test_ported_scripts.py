"""benchmarks/ported_scripts.py: the port it applies to public scripts changes import lines only,
and a ported script runs on tinyopt."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ported_scripts",
                                               ROOT / "benchmarks" / "ported_scripts.py")
ported = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ported)  # type: ignore[union-attr]

SCRIPT = """\
import torch
import torch.nn as nn
import torch.onnx
from torch import optim
from torch.utils.data import DataLoader, TensorDataset
import torchvision_like  # not torch: untouched
    import torch.nn.functional as F  # indented (inside a function) keeps its indent
x = torch.ones(3)  # import torch in a comment stays
"""


def test_only_torch_import_lines_change():
    out = ported.rewrite_imports(SCRIPT).split("\n")
    assert out[:5] == ["import tinyopt as torch", "import tinyopt.nn as nn",
                       "import tinyopt.onnx; import tinyopt as torch",
                       "from tinyopt import optim",
                       "from tinyopt.utils.data import DataLoader, TensorDataset"]
    assert out[5:] == SCRIPT.split("\n")[5:6] + [
        "    import tinyopt.nn.functional as F"] + SCRIPT.split("\n")[7:]


def test_a_ported_script_runs_on_tinyopt(tmp_path):
    src = """\
import torch
import torch.nn as nn
import torch.onnx
from torch.utils.data import DataLoader, TensorDataset
net = nn.Linear(3, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for xb, yb in DataLoader(TensorDataset(torch.ones(8, 3), torch.zeros(8, dtype=torch.long)),
                         batch_size=4):
    opt.zero_grad()
    nn.functional.cross_entropy(net(xb), yb).backward()
    opt.step()
print(torch.__name__, callable(torch.onnx.export))
"""
    (tmp_path / "s.py").write_text(ported.rewrite_imports(src))
    out = subprocess.run([sys.executable, "s.py"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tinyopt", "True"]


def test_notebook_cells_leave_out_shell_and_magic_lines():
    nb = '{"cells": [{"cell_type": "code", "source": ["!pip install x\\n", "%matplotlib inline\\n",' \
         ' "import torch\\n", "y = 1"]}, {"cell_type": "markdown", "source": "# t"}]}'
    assert ported.notebook_cells(nb, torch_mode=False) == ["import tinyopt as torch\ny = 1"]
    assert ported.notebook_cells(nb, torch_mode=True) == ["import torch\ny = 1"]
