"""Port references: one port of one fragment as data, and a run's values by port.

A :class:`PortRef` (``PortRef("adam", "weights")``, whose ``str()`` is ``"adam.weights"``) keys a run's
loop-carried values (``RunResult.state``, ``initial_state``, checkpoints); the scheduler never builds or
splits that text. :func:`port` is the one place where a user's ``"frag.port"`` becomes a ``PortRef``.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class PortRef:
    fragment: str
    port: str

    def __post_init__(self):
        if not (isinstance(self.fragment, str) and self.fragment and isinstance(self.port, str) and self.port):
            raise ValueError(f"a port reference is a fragment's name and a port's, got {self.fragment!r}, {self.port!r}")

    def __str__(self) -> str:
        return f"{self.fragment}.{self.port}"

    def __repr__(self) -> str:
        return f"PortRef({str(self)!r})"

    def to_dict(self) -> dict:
        return {"fragment": self.fragment, "port": self.port}

    @staticmethod
    def from_dict(d: dict) -> PortRef:
        """A port written by :meth:`to_dict` (``ValueError`` if it is not one)."""
        if not isinstance(d, dict) or set(d) != {"fragment", "port"}:
            raise ValueError(f"a port reference is an object with a fragment and a port, got {d!r}")
        return PortRef(d["fragment"], d["port"])

    @staticmethod
    def parse(text: str) -> PortRef:
        """The port ``"frag.port"`` names (the last dot splits, as ``Pipeline.connect`` reads it);
        ``ValueError`` if ``text`` is not of that form."""
        if isinstance(text, str):
            fragment, dot, name = text.rpartition(".")
            if dot and fragment and name:
                return PortRef(fragment, name)
        raise ValueError(f"{text!r} is not of the form 'fragment.port'")


def port(key: PortRef | str) -> PortRef:
    """A port as a user names it: a :class:`PortRef` as it is, or its ``"frag.port"`` text."""
    return key if isinstance(key, PortRef) else PortRef.parse(key)


class PortValues(Mapping):
    """A read-only mapping of values by port: iterating gives ``PortRef`` keys; ``values[k]``, ``k in values``
    and ``get`` take a ``PortRef`` or its ``"frag.port"`` text (``result.state["adam.weights"]``). It equals
    a mapping that holds the same values under the same ports, named either way (and is not hashable)."""

    def __init__(self, values: Mapping[PortRef | str, Any] | None = None):
        self._values = {port(k): v for k, v in (values or {}).items()}

    def __getitem__(self, key: PortRef | str) -> Any:
        try:
            return self._values[port(key)]
        except (ValueError, TypeError):
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[PortRef]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        try:
            theirs = {port(k): v for k, v in other.items()}
        except (ValueError, TypeError):
            return False
        return self._values == theirs

    def __repr__(self) -> str:
        return "PortValues({" + ", ".join(f"{str(k)!r}: {v!r}" for k, v in self._values.items()) + "})"


__all__ = ["PortRef", "PortValues", "port"]
