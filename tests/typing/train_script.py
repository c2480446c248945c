"""A typical PyTorch training script, written against tinyopt: it must type-check with no errors
under mypy and pyright (``tests/test_typing.py``).  It is also run, to keep it honest."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import tinyopt as torch
import tinyopt.nn as nn
import tinyopt.nn.functional as F
from tinyopt.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(20, hidden)
        self.fc2 = nn.Linear(hidden, 3)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = self.drop(x)
        return self.fc2(x)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv(x)))
        return self.head(x)


def cnn_step(tmp: str) -> int:
    model = SmallCNN()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.randn(8, 1, 8, 8)
    labels = torch.randint(0, 10, (8,))
    outputs = model(images)
    loss = criterion(outputs, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    _, predicted = torch.max(outputs.data, 1)
    correct = predicted.eq(labels).sum().item()
    lr = optimizer.param_groups[0]["lr"]
    flat = images.view(images.size(0), -1)
    both = torch.cat([flat, flat * 0.5], dim=1)
    mask = both > 0
    both[mask] = 0.0
    t = both[0]
    t2 = t.reshape(2, -1).t().contiguous()
    print(t2.shape, lr, both.mean(dim=0).shape, torch.zeros_like(t).sum().item())
    torch.save(model.state_dict(), tmp + "/cnn.pt")
    model.load_state_dict(torch.load(tmp + "/cnn.pt"))
    arr = outputs.detach().numpy()
    return int(correct) + len(arr.tolist()) + len(t.tolist())


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    pred = logits.argmax(dim=1)
    value = (pred == y).float().mean().item()
    if TYPE_CHECKING:
        reveal_type(value)  # tests/test_typing.py reads mypy's answer
    return value


def main() -> float:
    rng = np.random.default_rng(0)
    xs = torch.tensor(rng.standard_normal((256, 20)), dtype=torch.float32)
    w = torch.randn(20, 3)
    ys = (xs @ w).argmax(1)
    loader = DataLoader(TensorDataset(xs, ys), batch_size=32, shuffle=True)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    losses: list[float] = []
    for epoch in range(3):
        model.train()
        correct = 0
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            opt.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            losses.append(loss.item())
            correct += int((output.argmax(1) == target).sum().item())
        sched.step()
        print(f"epoch {epoch}: loss {losses[-1]:.3f}, accuracy {correct / len(xs):.2f}")
    model.eval()
    with torch.no_grad():
        logits = model(xs)
        acc = accuracy(logits, ys)
        probs = torch.softmax(logits, dim=-1)
        top = probs.topk(2, dim=1).indices
        assert top.shape == (256, 2)
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.0 * p.grad
    state = model.state_dict()
    total = sum(v.numel() for v in state.values())
    x0 = xs[0]
    y0 = 2.0 * x0 + x0[0] - x0.mean()
    print(y0.shape, total, float(y0.sum()), xs.size(0), xs.dtype == torch.float32)
    return acc


if __name__ == "__main__":
    import tempfile

    main()
    with tempfile.TemporaryDirectory() as d:
        cnn_step(d)
