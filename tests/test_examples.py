"""Every script in examples/ is run by a test at a small size (here, or in the test named in
``ELSEWHERE``), writes only where it is told to or into a fresh temporary folder, and the
sequence examples show progress within an epoch."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import char_lstm  # noqa: E402
import mnist_cnn  # noqa: E402
import mnist_fc  # noqa: E402
import tiny_gpt  # noqa: E402

# examples whose main() another test module runs (imports the example and calls main)
ELSEWHERE = {
    "mnist_fc": "test_resume.py",            # fit and --loop, each resumed from its checkpoint
    "char_lstm": "test_seq_training.py",     # trains, samples, checkpoints, resumes exactly
    "tiny_gpt": "test_seq_training.py",
    "mnist_ddp": "mpi_checks.py",            # on 2 MPI ranks (skips without the mpi extra)
}
RUN_HERE = {"mnist_cnn", "char_lstm", "tiny_gpt"}
# examples/optim_standalone.py is tested by the change that mends it (issue 25/26)
NOT_HERE = {"optim_standalone"}


def test_every_example_is_run_by_a_test():
    for path in sorted(EXAMPLES.glob("*.py")):
        name = path.stem
        if name in NOT_HERE:
            continue
        assert name in RUN_HERE or name in ELSEWHERE, f"examples/{path.name} is run by no test"
        if name in ELSEWHERE:
            text = (HERE / ELSEWHERE[name]).read_text(encoding="utf-8")
            assert f"import {name}" in text and ".main(" in text, (name, ELSEWHERE[name])


def test_mnist_cnn_trains_and_checkpoints(tmp_path, capsys):
    ckpt = tmp_path / "cnn.tinyopt"
    mnist_cnn.main(["--epochs", "1", "--limit", "1000", "--batch-size", "100", "--lr", "3e-3",
                    "--checkpoint", str(ckpt)])
    out = capsys.readouterr().out
    assert "Conv2d(1, 8, kernel_size=(3, 3)" in out and f"checkpoint {ckpt}" in out
    acc = float(re.search(r"^epoch +1 .*test accuracy (\S+)", out, re.M).group(1))
    assert acc > 0.4, out  # 10 classes: 0.1 by chance
    assert ckpt.exists() and os.listdir(tmp_path) == ["cnn.tinyopt"]


@pytest.mark.parametrize("example", [char_lstm, tiny_gpt], ids=["char_lstm", "tiny_gpt"])
def test_sequence_examples_show_progress_within_an_epoch(example, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(char_lstm.TEXT.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    size = ["--hidden", "16"] if example is char_lstm else ["--d-model", "16", "--heads", "2"]
    example.main(["--epochs", "1", "--steps", "3", "--batch-size", "2", "--seq-len", "8",
                  "--layers", "1", "--sample", "4", "--text", str(text), "--checkpoint", "",
                  "--progress", "0"] + size)
    lines = capsys.readouterr().out.splitlines()
    steps = [s for s in lines if s.startswith("  step ")]
    assert [s.split()[1] for s in steps] == ["1/3", "2/3"], lines  # then the epoch's own line
    assert re.fullmatch(r"  step 1/3  train loss \d+\.\d{4}  \(\d+\.\d s\)", steps[0])
    epoch = next(i for i, s in enumerate(lines) if s.startswith("epoch"))
    assert epoch > lines.index(steps[-1])


@pytest.mark.parametrize("example", [mnist_fc, char_lstm], ids=["mnist_fc", "char_lstm"])
def test_the_default_checkpoint_is_in_a_new_temporary_folder(example):
    name = example.__name__
    paths = [Path(example.parse_args([]).checkpoint) for _ in range(2)]
    try:
        assert paths[0].parent != paths[1].parent  # a fixed name could be another run's file
        for p in paths:
            assert p.name == f"{name}.tinyopt" and p.parent.parent == Path(tempfile.gettempdir())
            assert p.parent.is_dir() and not p.exists()
    finally:
        for p in paths:
            p.parent.rmdir()
