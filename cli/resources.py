"""Elastic resources from a file: a running run's backend pools follow a JSON file it watches.

``hqflow train ... --resources FILE`` starts with the pools FILE names and then follows it::

    {"pools": {"qpu": ["emulated-qpu", ["emulated-qpu", {"per_job": 0.01}]]}}

``pools`` maps a pool name to a non-empty list of members: a backend name, or ``[name, {options}]``
with the options ``--backend-opt`` would give. A pool the file leaves out keeps its members. The file
is looked at every ``POLL`` seconds, and at once on SIGHUP. A change is the difference between the
file and the pool: members equal in name and options stay, the others leave, new ones join (first, so
that jobs taken back from a leaving member find a place at once; none is lost or run twice). A file
that cannot be used changes nothing; that, and each change applied, is said in one line.

    watcher = ResourceWatcher("resources.json")   # ResourceError: the file is unusable now
    sched = Scheduler(graph, watcher.pools, config)
    watcher.attach(sched, watcher.pools)
    try:
        result = sched.run(stream)
    finally:
        watcher.close()
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping

from hqflow.backends import BackendError, make_backend, threads

from .pool import UsageError


POLL = 0.5
"""seconds between two looks at the file's modification time"""

Spec = tuple[str, dict]


class ResourceError(ValueError):
    """A resources file, or a change, that cannot be used; the message is one line."""


def member(spec) -> Spec:
    """A pool member as ``(name, options)``: from a name, or a ``(name, options)`` pair or list."""
    if isinstance(spec, str) and spec:
        return spec, {}
    if isinstance(spec, (list, tuple)) and len(spec) == 2 and isinstance(spec[0], str) and spec[0] \
            and isinstance(spec[1], dict):
        return spec[0], dict(spec[1])
    raise ResourceError(f"a member must be a backend name or [name, {{options}}], got {json.dumps(spec)}")


def parse(text: str, where: str = "the resources file") -> dict[str, list[Spec]]:
    """The pools a resources document names, each member checked by making it once."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise ResourceError(f"{where} is not a JSON document") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pools"), dict):
        raise ResourceError(f'{where} must be an object {{"pools": {{"NAME": [member, ...]}}}}')
    unknown = sorted(set(doc) - {"pools"})
    if unknown:
        raise ResourceError(f"{where}: unknown key {unknown[0]!r} (it may hold only 'pools')")
    pools = {}
    for name, specs in doc["pools"].items():
        if not isinstance(specs, list):
            raise ResourceError(f"{where}: pool {name!r} must be a list of members")
        if not specs:
            raise ResourceError(f"{where}: pool {name!r} has no member; a pool needs at least one backend")
        pools[name] = []
        for k, spec in enumerate(specs):
            try:
                backend, options = member(spec)
                made = make_backend((backend, options))
            except ResourceError as exc:
                raise ResourceError(f"{where}: pool {name!r}, member {k}: {exc}") from None
            except (BackendError, TypeError, ValueError) as exc:
                raise ResourceError(f"{where}: pool {name!r}, member {k} ({backend}): "
                                    f"{' '.join(str(exc).split())}") from None
            made.close()
            pools[name].append((backend, options))
    return pools


def read(path) -> dict[str, list[Spec]]:
    """``parse`` of the file at ``path`` (``ResourceError`` when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except OSError as exc:
        raise ResourceError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ResourceError(f"{path} is not a JSON document") from None
    return parse(text, str(path))


class ElasticPools:
    """Backends join and leave a running ``Scheduler``'s pools (``scheduler.elastic``'s ``add_backend`` and
    ``remove_backend``), for a scheduler that runs in the caller's own thread. Apply changes only once
    ``scheduler.started`` is set (before that the run has no job service)."""

    def __init__(self, scheduler, pools: Mapping[str, list]):
        self.scheduler = scheduler
        self.members = {name: [(k, member(s)) for k, s in enumerate(specs)]  # (index in the pool, spec)
                        for name, specs in pools.items() if name in scheduler.pools}

    def current(self, pool: str) -> list[Spec]:
        return [spec for _, spec in self.members[pool]]

    def apply(self, pools: Mapping[str, list[Spec]]) -> list[dict]:
        """Make each pool in ``pools`` hold those members; returns one entry per pool that changed:
        ``pool``, ``backends`` (its members now), ``added``, ``removed`` and ``requeued`` (jobs
        in flight on removed members that run again on the others). Nothing changes on an error."""
        for name, specs in pools.items():
            if name not in self.members:
                known = ", ".join(repr(p) for p in self.members) or "none"
                raise ResourceError(f"this run has no backend pool {name!r} (its pools: {known})")
            if not specs:
                raise ResourceError(f"pool {name!r} would have no backend; a run needs at least one")
        changes = []
        for name, specs in pools.items():
            stay, leave = [], []
            wanted = [member(s) for s in specs]
            for index, spec in self.members[name]:
                if spec in wanted:
                    wanted.remove(spec)
                    stay.append((index, spec))
                else:
                    leave.append((index, spec))
            if not wanted and not leave:
                continue
            joined = [(self.scheduler.elastic.add_backend(name, spec), spec) for spec in wanted]
            requeued = sum(self.scheduler.elastic.remove_backend(name, index) for index, _ in leave)
            self.members[name] = stay + joined
            changes.append({"pool": name, "backends": [list(s) for s in self.current(name)], "added": len(joined),
                            "removed": len(leave), "requeued": requeued})
        return changes


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ResourceWatcher:
    """Follows a resources file: see the module docstring. ``pools`` holds what the file named when
    the watcher was made (``ResourceError`` if it was unusable then); ``say`` prints a line (stderr)."""

    def __init__(self, path, say: Callable[[str], None] = _say):
        self.path, self.say = str(path), say
        self._seen = self._signature()
        self.pools = read(self.path)
        self._poked, self._stop, self._lock = threading.Event(), threading.Event(), threading.Lock()
        self._elastic: ElasticPools | None = None
        self._record: Callable[[dict], None] | None = None
        self._thread: threading.Thread | None = None

    def _signature(self):
        """What tells a rewritten file (a rename makes a new inode; an edit a new time or size)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def attach(self, scheduler, pools: Mapping[str, list], record: Callable[[dict], None] | None = None) -> None:
        """Start following the file for ``scheduler``, whose pools now hold ``pools`` (the run's own);
        ``record(change)`` is called for each change applied (``ElasticPools.apply``'s entries)."""
        self._elastic, self._record = ElasticPools(scheduler, pools), record
        self._thread = threads.start(self._watch, "hqflow-resources", (scheduler.started,))

    def poke(self) -> None:
        """Re-read the file now (safe in a signal handler: it only sets an event)."""
        self._poked.set()

    @contextlib.contextmanager
    def sighup(self):
        """While inside, SIGHUP pokes the watcher (in the main thread, where a platform has SIGHUP)."""
        if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
            yield
            return
        before = signal.signal(signal.SIGHUP, lambda _sig, _frame: self.poke())
        try:
            yield
        finally:
            signal.signal(signal.SIGHUP, before)

    def _watch(self, started: threading.Event) -> None:
        while not started.wait(POLL / 5):
            if self._stop.is_set():
                return
        while not self._stop.is_set():
            poked = self._poked.wait(POLL)
            self._poked.clear()
            seen = self._signature()
            if self._stop.is_set() or (not poked and seen == self._seen):
                continue
            self._seen = seen
            self.update(poked)

    def update(self, poked: bool = True) -> list[dict]:
        """Read the file and apply the difference; a problem is said in one line and changes nothing."""
        try:
            pools = read(self.path)
            with self._lock:
                if self._stop.is_set():
                    return []
                changes = self._elastic.apply(pools)
        except ResourceError as exc:
            self.say(f"hqflow: resources: {exc}; the pools stay as they are")
            return []
        for c in changes:
            n, size = c["requeued"], len(c["backends"])
            moved = "" if not n else "; 1 job in flight runs again on the others" if n == 1 else \
                f"; {n} jobs in flight run again on the others"
            self.say(f"hqflow: resources: pool {c['pool']!r} now {size} backend{'' if size == 1 else 's'} "
                     f"(+{c['added']}, -{c['removed']}){moved}")
            if self._record is not None:
                self._record(c)
        if poked and not changes:
            self.say(f"hqflow: resources: {self.path} read again: no change")
        return changes

    def close(self) -> None:
        """Stop following the file (a change being applied finishes first)."""
        with self._lock:
            self._stop.set()
        self._poked.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)


# --- hqflow train --resources FILE ------------------------------------------------------------------

def watching(args) -> ResourceWatcher | None:
    """``--resources FILE`` as a ``ResourceWatcher`` (None without it); the pool is the file's, so
    ``--pool`` and ``--backend-opt`` are refused beside it."""
    if args.resources is None:
        return None
    if args.pool or args.backend_opt:
        raise UsageError("--resources names the pool's members: give them in the file, not with --pool or "
                         "--backend-opt")
    try:
        return ResourceWatcher(args.resources)
    except ValueError as exc:  # a ResourceError, or a name no file has (a lone surrogate, a NUL)
        raise UsageError(f"--resources: {exc}") from None


def file_pool(watcher, name: str | None) -> tuple[str, list]:
    """The run's pool name and members from a resources file: ``name`` (the run's or ``--backend``),
    or the file's one pool."""
    pools = watcher.pools
    if name is None:
        if len(pools) != 1:
            raise UsageError(f"{watcher.path} names {len(pools)} pools ({', '.join(map(repr, pools))}): give "
                             "--backend NAME for the run's")
        name = next(iter(pools))
    others = sorted(set(pools) - {name})
    if name not in pools or others:
        raise UsageError(f"{watcher.path} must name this run's one backend pool {name!r}"
                         + (f", not {others[0]!r}" if others else ""))
    return name, pools[name]


def in_process(policy, watcher) -> None:
    """A resources file changes the pools of this process's job service; a Ray worker keeps its own."""
    from hqflow.engine.scheduler_config import ExecutorKind

    if watcher is not None and not isinstance(policy, str) and policy.scheduler_config().executor is ExecutorKind.RAY:
        raise UsageError(f"--resources needs a distribution that runs in this process (sync or pipelined), not "
                         f"{policy.name} on Ray, whose workers keep the pool they started with")
