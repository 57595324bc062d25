"""How a span ended: ok, an error with its message, a timeout, or cancelled.

``str(outcome)`` is its text (``"ok"``, ``"error: boom"``, ``"timeout"``, ``"cancelled"``), as tables and
Perfetto traces print it; an outcome also equals its text, so ``span.outcome == "ok"`` keeps working.
spans.json stores an outcome as an object (``to_dict``); :meth:`Outcome.read` reads it, and the text of older files.
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("ok", "error", "timeout", "cancelled")


@dataclass(frozen=True, eq=False)
class Outcome:
    kind: str
    """``ok``, ``error``, ``timeout`` (cancelled past ``job_timeout``, retried) or ``cancelled`` (taken
    back from a backend that left its pool, run again elsewhere)"""
    message: str | None = None
    """an error's message; None for the other kinds"""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"an outcome is one of {', '.join(KINDS)}, got {self.kind!r}")
        if (self.message is not None) != (self.kind == "error") or not isinstance(self.message, (str, type(None))):
            raise ValueError(f"an error outcome, and only an error, has a message (a string), got {self.message!r}")

    @staticmethod
    def error(cause: object) -> Outcome:
        """The outcome of work that failed with ``cause`` (an exception or a message)."""
        return Outcome("error", str(cause))

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def __str__(self) -> str:
        return f"error: {self.message}" if self.kind == "error" else self.kind

    def __repr__(self) -> str:
        return f"Outcome({str(self)!r})"

    def __eq__(self, other) -> bool:  # an outcome's text says its kind and message, so they compare by it
        return str(self) == str(other) if isinstance(other, (Outcome, str)) else NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))  # equal to its text, so hashed as it

    def to_dict(self) -> dict:
        return {"kind": self.kind} if self.message is None else {"kind": self.kind, "message": self.message}

    @staticmethod
    def read(value) -> Outcome:
        """An outcome: itself, :meth:`to_dict`'s object, or the text a file of an earlier version holds
        (``ValueError`` if it is none of these)."""
        if isinstance(value, dict) and "kind" in value and not set(value) - {"kind", "message"}:
            return Outcome(value["kind"], value.get("message"))
        if isinstance(value, str) and value.startswith("error: "):
            return Outcome.error(value[len("error: "):])
        if isinstance(value, Outcome) or value in ("ok", "timeout", "cancelled"):
            return Outcome(value) if isinstance(value, str) else value
        raise ValueError(f"not an outcome: {value!r} (an object with a kind and an error's message, or the text ok, "
                         "error: MESSAGE, timeout or cancelled)")


OK = Outcome("ok")
TIMEOUT = Outcome("timeout")
CANCELLED = Outcome("cancelled")

__all__ = ["CANCELLED", "OK", "Outcome", "TIMEOUT"]
