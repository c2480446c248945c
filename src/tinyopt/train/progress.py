"""Progress reporting for ``fit`` and ``evaluate`` (``ggml_opt_epoch_callback_progress_bar``).

On a terminal (``stream.isatty()``) each phase of an epoch (train, then val) gets a live bar,
redrawn in place with ``\\r`` at most ``refresh`` times a second and finished with a newline::

    epoch 2/5 train [============>            ] 120/235  5,412/s  loss 0.4312±0.0123  acc 85.20±0.51%  00:03<00:04

(batches done/total, samples per second, running loss and accuracy with standard errors,
elapsed<remaining time).  The line fits the terminal: the bar narrows, then the rate, accuracy,
loss and bar are left out in that order, so no number is cut and the times always show.  Before
a phase's first batch (which compiles the plan) the bar says ``compiling…``; the rate and the
remaining time are estimated from the batches after the first, so the compile does not inflate
them (``--:--`` until a second batch is done).

When the stream is not a terminal (a log file, a CI job) nothing is redrawn: one plain line is
written per epoch, after validation::

    epoch 2/5: train loss 0.4312 ± 0.0123, accuracy 85.20 ± 0.51% (54000 samples, 3.1 s); val loss ...

``Progress(None)`` reports nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

from tinyopt.train.results import Accumulator, EpochRecord, Result, plus_minus

_BAR = 25
_MIN_BAR = 10


def terminal_columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to (``COLUMNS`` wins; 80 if unknown)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size((80, 24)).columns


def fit_line(label: str, done: int, total: int, parts: list[tuple[int, str]], times: str,
             columns: int) -> str:
    """The progress line within ``columns - 1`` characters.  ``parts`` are (priority, text) in
    display order: the bar narrows first, then parts are dropped lowest priority first, then the
    bar; the label, the counts and ``times`` stay (a tiny terminal cuts the label; the counts and
    times are never cut)."""
    limit = max(columns - 1, 1)
    count = f"{done}/{total}"
    sep = "  "

    def line(width: int | None, kept: list[tuple[int, str]]) -> str:
        head = f"{label} {bar(done, total, width)} {count}" if width else f"{label} {count}"
        return sep.join([head] + [text for _, text in kept] + ([times] if times else []))

    kept = list(parts)
    while True:
        fixed = len(line(_MIN_BAR, kept)) - _MIN_BAR
        if fixed + _MIN_BAR <= limit:
            return line(min(_BAR, limit - fixed), kept)
        if not kept:
            break
        kept.remove(min(kept, key=lambda p: p[0]))
    text = line(None, [])
    if len(text) <= limit:
        return text
    tail = f" {count}" + (f"{sep}{times}" if times else "")
    return label[:max(limit - len(tail), 0)] + tail


def format_seconds(seconds: float) -> str:
    """``mm:ss``, or ``h:mm:ss`` from an hour on."""
    s = int(max(seconds, 0.0))
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def bar(done: int, total: int, width: int = _BAR) -> str:
    """``[=====>    ]``: ``done`` of ``total`` as a bar of ``width`` characters."""
    if total <= 0:
        return "[" + "=" * width + "]"
    full = width * done // total
    head = ">" if full < width and done > 0 else ""
    return "[" + "=" * full + head + " " * (width - full - len(head)) + "]"


class Progress:
    """Writes progress to ``stream`` (None: silent); see the module docstring."""

    def __init__(self, stream: TextIO | None, refresh: float = 10.0):
        self.stream = stream
        self.live = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._interval = 1.0 / refresh
        self._last_draw = 0.0
        self._width = 0
        self._first: tuple[float, int] = (0.0, 0)  # (time, samples) when batch 1 was done

    # ---- live bar ----------------------------------------------------------------------------
    def begin(self, label: str, total: int, compiling: bool = True) -> None:
        """Before a phase's first batch: a bar at 0 that says ``compiling…`` (the first batch
        builds and compiles the plan, which takes seconds; the next draw replaces it)."""
        if self.live and compiling:
            self._draw(fit_line(label, 0, total, [], "compiling…",
                                terminal_columns(self.stream)), False)

    def update(self, label: str, done: int, total: int, acc: Accumulator, start: float,
               force: bool = False) -> None:
        """Redraw the bar for ``done`` of ``total`` batches (throttled unless ``force``)."""
        if not self.live:
            return
        now = time.perf_counter()
        if done == 1:
            self._first = (now, acc.n)
        if not force and done < total and now - self._last_draw < self._interval:
            return
        self._last_draw = now
        elapsed = now - start
        t1, n1 = self._first
        if done >= 2 and now > t1:  # from the batches after the first (which compiles)
            rate = (acc.n - n1) / (now - t1)
            remaining = format_seconds((now - t1) * (total - done) / (done - 1))
        else:
            rate = acc.n / elapsed if elapsed > 0 else 0.0
            remaining = format_seconds(0) if done >= total else "--:--"
        parts = [(0, f"{rate:,.0f}/s"), (2, f"loss {plus_minus(acc.loss, acc.loss_unc, 4, '±')}")]
        if acc.accuracy is not None:
            parts.append((1, f"acc {plus_minus(100 * acc.accuracy, 100 * acc.accuracy_unc, 2, '±')}%"))
        line = fit_line(label, done, total, parts, f"{format_seconds(elapsed)}<{remaining}",
                        terminal_columns(self.stream))
        self._draw(line, done >= total)

    def _draw(self, line: str, finished: bool) -> None:
        pad = " " * max(self._width - len(line), 0)
        self._width = len(line)
        self.stream.write("\r" + line + pad + ("\n" if finished else ""))
        if finished:
            self._width = 0
        self.stream.flush()

    # ---- plain lines -------------------------------------------------------------------------
    def epoch_end(self, record: EpochRecord, epochs: int) -> None:
        """One plain line per epoch when the stream is not a terminal."""
        if self.stream is None or self.live:
            return
        text = f"epoch {record.epoch + 1}/{epochs}: train {_describe(record.train)}"
        if record.val is not None:
            text += f"; val {_describe(record.val)}"
        self.stream.write(text + "\n")
        self.stream.flush()

    def result(self, label: str, result: Result) -> None:
        """A plain line for one evaluation (``evaluate`` when not on a terminal)."""
        if self.stream is None or self.live:
            return
        self.stream.write(f"{label}: {_describe(result)}\n")
        self.stream.flush()


def _describe(r: Result) -> str:
    return f"{r} ({r.n} samples, {r.seconds:.1f} s, {r.samples_per_second:,.0f} samples/s)"


def make_progress(progress: bool | TextIO) -> Progress:
    """``True``: standard error; ``False``/None: silent; a text stream: that stream."""
    if progress is True:
        return Progress(sys.stderr)
    if progress is False or progress is None:
        return Progress(None)
    if not callable(getattr(progress, "write", None)):
        raise TypeError(f"progress must be a bool or a text stream with write(), got "
                        f"{type(progress).__name__}")
    return Progress(progress)
