"""Progress bars through tqdm: ``with Progress(total, "vqe") as p: p(i, {"loss": ...})``.

On a terminal, and in a Jupyter notebook (``tqdm.auto`` picks its widget), the bar redraws in place.
Anywhere else (CI logs, a file, a pipe) it prints a plain line every ``EVERY`` seconds of the work's clock, with
the time left at the rate so far, and one final line at the end.
"""
from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


class Progress:
    EVERY = 30.0  # seconds between the plain lines where no bar redraws
    def __init__(self, total: int, label: str = "", stream=None):
        self.total, self.label = max(int(total), 1), label
        self.stream = stream or sys.stderr
        live = (hasattr(self.stream, "isatty") and self.stream.isatty()) or "ipykernel" in sys.modules
        self.t0 = time.perf_counter()
        self.line, self.said = "", 0.0
        self.bar = tqdm(total=self.total, desc=label, file=self.stream, dynamic_ncols=True) if live else None

    def __call__(self, done: int, metrics: dict | None = None) -> None:
        """The executors' callback: ``progress(steps_done, outputs_of_the_last_step)``, showing the numeric
        outputs. ``done`` past ``total`` raises the total; ``seconds`` sets the elapsed time (a resumed
        run's go on from its checkpoint's)."""
        metrics = {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        elapsed = metrics.pop("seconds", None)
        shown = "  ".join(f"{k}={v:,.2f}" if isinstance(v, float) and abs(v) >= 1e4 else f"{k}={v:.4g}"
                          if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())  # 148,200.00, not 1.482e+05
        if elapsed is not None:
            self.t0 = time.perf_counter() - elapsed
            if self.bar is not None:
                self.bar.start_t = time.time() - elapsed  # tqdm's clock: time.time
        elapsed, self.total = time.perf_counter() - self.t0, max(self.total, done)
        self.line = f"{self.label} {done}/{self.total} {elapsed:.1f}s  {shown}".rstrip()
        if self.bar is not None:
            self.bar.n, self.bar.total = done, self.total
            self.bar.set_postfix_str(shown, refresh=False)
            self.bar.refresh()
        elif elapsed >= self.said + self.EVERY:
            self.said, left = elapsed, elapsed * (self.total - done) / max(done, 1)
            self.write(f"{self.line} (about {_duration(left)} left)")

    def write(self, message: str) -> None:
        """A line of text above the bar (the bar is redrawn below it)."""
        if self.bar is not None:
            self.bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.line:
            self.write(self.line)


def _duration(seconds: float) -> str:
    unit, size = next(((u, k) for u, k in (("days", 86400), ("h", 3600), ("min", 60)) if seconds >= 2 * k), ("s", 1))
    return f"{seconds / size:.3g} {unit}"
