"""A pool of daemon worker threads: ``concurrent.futures.ThreadPoolExecutor`` without its exit join.

Python joins a ``ThreadPoolExecutor``'s threads at exit, so a fragment still running when Ctrl-C ends a run
would hold the exit until it returns. Here the exit shuts every pool down and joins its threads for a
bounded time (``hqflow.backends.threads``: a daemon thread killed inside torch aborts the process).
"""
from __future__ import annotations

import concurrent.futures as cf
import queue

from hqflow.backends import threads


class DaemonPool:
    """``workers`` daemon threads named ``name-0``, ``name-1``, ... that run submitted calls in order."""

    def __init__(self, workers: int, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threads.start(self._work, f"{name}-{i}") for i in range(workers)]
        threads.on_exit(self.shutdown)

    def resize(self, workers: int) -> None:
        """Grow to ``workers`` threads at once, or shrink: a thread past the count ends after its call."""
        alive = [t for t in self._threads if t.is_alive()]
        name = self._threads[0].name.rsplit("-", 1)[0] if self._threads else "hqflow-worker"
        for i in range(len(alive), workers):
            alive.append(threads.start(self._work, f"{name}-{len(self._threads) + i}"))
        for _ in range(len(alive) - workers):
            self._queue.put(None)
        self._threads = alive

    def submit(self, fn, /, *args) -> cf.Future:
        future: cf.Future = cf.Future()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - the caller's future carries it
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel the calls not started; each thread ends after the call it is running."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
