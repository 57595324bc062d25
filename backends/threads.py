"""Daemon threads that end before the interpreter does.

hqflow's worker threads are daemons, so that Ctrl-C never waits on a fragment or a job
that is still running. A daemon thread that is still alive when the interpreter
finalizes is stopped by ``pthread_exit`` the next time it takes the GIL. If that happens
inside C++, for instance torch freeing a tensor, the unwinding crosses a ``noexcept``
destructor and the whole process aborts: "terminate called without an active exception",
exit status 134, after the program's own work and output were done.

So threads started with :func:`start` are joined at exit, after the stop callbacks
registered with :func:`on_exit` (a pool's shutdown, a backend's close) have told them to
end. The wait is bounded: ``EXIT_WAIT`` seconds in all, or ``HURRIED_WAIT`` after
:func:`hurry` (an interrupted run, whose running fragment the user does not want to wait for); a thread still
running then ends the process at once (``os._exit(130)``, its output flushed): the interpreter's teardown beside
a running thread could hang on a lock the thread holds (an import's) or abort inside C++.

A thread is held here until it has ended, not weakly: its ``Thread`` object can be gone (its
pool dropped, its run over) while the thread still clears its state, freeing its
``threading.local`` values, such as a worker's cached policy and optimizer, inside torch; and
``join`` waits for that. Threads started while the exit joins (a fragment still running that
submits a job) are joined too.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable

EXIT_WAIT = 30.0
"""seconds the interpreter's exit waits, in all, for threads started here to end"""
HURRIED_WAIT = 1.0
"""the same after an interrupt (:func:`hurry`)"""

_THREADS: set[threading.Thread] = set()
_STOPS: list[weakref.WeakMethod] = []
_LOCK = threading.Lock()
_HURRIED = threading.Event()


def start(target: Callable, name: str, args: tuple = ()) -> threading.Thread:
    """Start a daemon thread that the interpreter's exit joins (within ``EXIT_WAIT``)."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    with _LOCK:  # started under the lock, so that the threads dropped here have all been started
        _THREADS.difference_update([t for t in _THREADS if not t.is_alive()])  # ended, state cleared
        _THREADS.add(thread)
        thread.start()
    return thread


def on_exit(stop: Callable[[], None]) -> None:
    """Call the bound method ``stop`` at exit, before joining, while its object is alive (held weakly)."""
    with _LOCK:
        _STOPS[:] = [s for s in _STOPS if s() is not None]
        _STOPS.append(weakref.WeakMethod(stop))


def hurry() -> None:
    """The process is ending on an interrupt: wait at most ``HURRIED_WAIT`` for threads at exit."""
    _HURRIED.set()


@atexit.register
def _join_at_exit() -> None:
    with _LOCK:
        stops = [s() for s in _STOPS]
    for stop in stops:
        if stop is not None:
            try:
                stop()
            except Exception:  # noqa: BLE001 - best effort at exit; the join below is what matters
                pass
    deadline = time.monotonic() + (HURRIED_WAIT if _HURRIED.is_set() else EXIT_WAIT)
    while time.monotonic() < deadline:
        with _LOCK:
            alive = [t for t in _THREADS if t.is_alive() and t is not threading.current_thread()]
        if not alive:
            return
        for thread in alive:
            thread.join(max(0.0, deadline - time.monotonic()))
    if _HURRIED.is_set():  # an interrupt, and a fragment still running: the interpreter's teardown beside a live
        for stream in (sys.stdout, sys.stderr):  # thread can hang (a module lock it held) or abort in C++, so the
            with contextlib.suppress(Exception):  # process ends here, its output written
                stream.flush()
        os._exit(130)  # as an interrupted process's status: 128 + SIGINT
