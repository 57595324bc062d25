"""A small progress bar on stderr (no dependency): ``with Progress(total, "vqe") as p: p.update(i, loss=...)``.

It redraws in place on a terminal and prints nothing but the final line
elsewhere (CI logs stay short).
"""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str = "", stream=None, width: int = 24):
        self.total, self.label, self.width = max(int(total), 1), label, width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()
        self.line = ""

    def update(self, done: int, **metrics) -> None:
        frac = min(done / self.total, 1.0)
        bar = "#" * int(frac * self.width) + "-" * (self.width - int(frac * self.width))
        shown = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        elapsed = time.perf_counter() - self.t0
        self.line = f"{self.label} [{bar}] {done}/{self.total} {elapsed:.1f}s  {shown}".rstrip()
        if self.tty:
            self.stream.write("\r\033[K" + self.line)
            self.stream.flush()

    def __call__(self, done: int, metrics: dict | None = None) -> None:
        """The executors' callback: ``progress(steps_done, outputs_of_the_last_step)``.

        Scalar outputs (numbers) are shown; arrays and other values are not.
        """
        shown = {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.update(done, **shown)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.line:
            self.stream.write(("\r\033[K" if self.tty else "") + self.line + "\n")
            self.stream.flush()
