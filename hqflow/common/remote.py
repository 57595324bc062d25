"""One Ray proxy helper, ``Remote``: an object in a Ray actor, called from any process as if it were there.
Ray's errors are folded into what the user should see (``failure``), whether a call's answer is waited for
(``get``) or taken as a ``concurrent.futures.Future`` (``future``). Ray is imported only when one is used."""
from __future__ import annotations

import concurrent.futures as cf
import re

from hqflow.ir.text import one_line


class RayFailure(RuntimeError):
    """A Ray actor died or could not be reached (the folded form of Ray's own error)."""


def failure(exc: BaseException) -> BaseException:
    """A Ray exception as what the user should see: a call's own error as itself, anything else
    (a dead or unreachable actor) as one line without Ray's colour codes and tracebacks."""
    import ray.exceptions as rex

    if isinstance(exc, rex.RayTaskError) and isinstance(exc.cause, BaseException):
        return exc.cause
    if isinstance(exc, rex.RayError):
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
        first = text.splitlines()[0] if text else ""
        return RayFailure(one_line(f"{type(exc).__name__}: {first[:300]}"))
    return exc


def future(ref, then=None, lost=None) -> cf.Future:
    """A future of a Ray call whose failure is :func:`failure`'s, and whose result is ``then(result)``;
    ``lost()`` runs first when the failure is the actor's process (it died, or is starting again)."""
    import ray.exceptions as rex

    out: cf.Future = cf.Future()

    def copy(fut: cf.Future) -> None:
        if fut.cancelled():
            out.cancel()
        elif fut.exception() is not None:
            if lost is not None and isinstance(fut.exception(), (rex.ActorUnavailableError, rex.RayActorError)):
                lost()
            out.set_exception(failure(fut.exception()))
        else:
            out.set_result(fut.result() if then is None else then(fut.result()))

    ref.future().add_done_callback(copy)
    return out


def get(ref, timeout: float | None = None):
    """``ray.get`` with Ray's error folded."""
    import ray

    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.RayError as exc:
        raise failure(exc) from None


def this_node() -> str:
    """This process's Ray node id."""
    import ray

    return ray.get_runtime_context().get_node_id()


class Remote:
    """An object of ``cls`` in a Ray actor of its own, reached from any process through this proxy (picklable:
    Ray's actor handle travels with it). ``call`` waits for a method's answer, ``send`` does not; Ray's errors
    are folded (``failure``). ``node``: the Ray node id to start it on (None: where Ray puts it); ``options``:
    Ray's actor options (it reserves no CPU unless they say so). A subclass names the object's methods it has
    as its own: each of ``calls`` a ``call``, each of ``sends`` a ``send`` (``Remote, calls=("charge", ...)``)."""

    def __init_subclass__(cls, calls: tuple[str, ...] = (), sends: tuple[str, ...] = (), **kwargs):
        super().__init_subclass__(**kwargs)
        for names, how in ((calls, cls.call), (sends, cls.send)):
            for name in names:
                setattr(cls, name, lambda self, *args, _name=name, _how=how: _how(self, _name, *args))

    def __init__(self, cls, *args, node: str | None = None, **options):
        import ray

        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        self.actor = ray.remote(**{"num_cpus": 0, **options})(cls).remote(*args)

    def call(self, method: str, *args):
        """The actor's ``method(*args)``, its answer waited for."""
        return get(getattr(self.actor, method).remote(*args))

    def send(self, method: str, *args):
        """The actor's ``method(*args)``, not waited for (its object reference)."""
        return getattr(self.actor, method).remote(*args)

    def stop(self) -> None:
        """End the actor."""
        import ray

        ray.kill(self.actor)
