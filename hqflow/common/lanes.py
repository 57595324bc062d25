"""Lanes: the workers a run's spans occupy, and the resources they belong to, as data.

A :class:`Lane` is one of:

* a classical resource, ``Lane("cpu")`` (text ``cpu``); one of its worker slots, ``Lane("cpu", slot=0)``
  (``cpu/0``); a stretch of work inside a call there (``JobClient.work``), ``Lane("cpu", slot=0, label="envs1")``
  (``cpu/0/envs1``);
* a quantum pool, the resource of its jobs: ``Lane("qpu", "q")`` (``qpu:q``); a member, named after its backend,
  with its index where the pool has several: ``Lane("qpu", "emulated-qpu", member=1)`` (``qpu:emulated-qpu#1``);
  one of a member's device slots, ``Lane("qpu", "emulated-qpu", member=1, slot=0)`` (``qpu:emulated-qpu#1/0``).

``str(lane)`` is that text, and a lane equals its text (``span.lane == "cpu/0"`` keeps working). Code reads
the fields, never the text; files store a lane as an object (``to_dict``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

KINDS = ("cpu", "gpu", "qpu")


@dataclass(frozen=True, eq=False)
class Lane:
    kind: str
    """the resource's kind: ``cpu``, ``gpu`` or ``qpu``"""
    name: str | None = None
    """``qpu`` only: the pool's name (a pool's lane) or the member's backend's name (a member's lane)"""
    member: int | None = None
    """a member's index in its pool, where the pool has several (``#k``); None otherwise"""
    slot: int | None = None
    """the worker slot (``cpu``/``gpu``) or a member's device slot; None: the resource or member itself"""
    label: str | None = None
    """a stretch of work inside a call in this lane (``JobClient.work``); None otherwise"""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"a lane's kind is one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind != "qpu" and (self.name is not None or self.member is not None):
            raise ValueError(f"only a qpu lane has a name and a member index, got {self!r}")
        for field in ("member", "slot"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"a lane's {field} is an integer >= 0 or None, got {value!r}")
        for field in ("name", "label"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"a lane's {field} is a non-empty string or None, got {value!r}")

    @property
    def quantum(self) -> bool:
        return self.kind == "qpu"

    def at(self, slot: int | None) -> Lane:
        """This lane in worker or device slot ``slot`` (None: the resource or member itself)."""
        return replace(self, slot=slot)

    def within(self, label: str) -> Lane:
        """The lane of a stretch of work labelled ``label`` inside a call in this lane."""
        return replace(self, label=label)

    def __str__(self) -> str:
        text = self.kind if self.name is None else f"{self.kind}:{self.name}"
        if self.member is not None:
            text += f"#{self.member}"
        if self.slot is not None:
            text += f"/{self.slot}"
        return text if self.label is None else f"{text}/{self.label}"

    def __repr__(self) -> str:
        return f"Lane({str(self)!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, Lane):
            return vars(self) == vars(other)
        if isinstance(other, str):
            return str(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))  # equal to its text, so hashed as it

    def __lt__(self, other: Lane) -> bool:
        """Lanes sort by their text, numbers by value (``cpu/2`` before ``cpu/10``)."""
        if not isinstance(other, Lane):
            return NotImplemented
        return _natural(str(self)) < _natural(str(other))

    def to_dict(self) -> dict:
        """The lane as JSON-friendly data: its fields that are set."""
        return {k: v for k, v in vars(self).items() if v is not None}

    @staticmethod
    def from_dict(d: dict) -> Lane:
        """A lane written by :meth:`to_dict` (``ValueError`` if it is not one)."""
        if not isinstance(d, dict) or "kind" not in d or set(d) - {"kind", "name", "member", "slot", "label"}:
            raise ValueError(f"a lane is an object with a kind and its name, member, slot and label where set, got {d!r}")
        return Lane(**d)

    @staticmethod
    def parse(text: str) -> Lane:
        """The lane a file of an earlier version wrote as text (see the module docstring for the forms;
        ``ValueError`` if ``text`` is none of them)."""
        found = _TEXT.match(text) if isinstance(text, str) else None
        if found is None:
            raise ValueError(f"not a lane: {text!r}")
        kind, name, index, slot, label = found.groups()
        try:
            return Lane(kind, name, None if index is None else int(index), None if slot is None else int(slot), label)
        except ValueError:
            raise ValueError(f"not a lane: {text!r}") from None


_TEXT = re.compile(r"(\w+)(?::([^/]+?)(?:#(\d+))?)?(?:/(\d+)(?=/|\Z))?(?:/(.+))?\Z", re.DOTALL)
"""a lane's text: ``kind[:name[#member]][/slot][/label]``"""


def member(name: str | Lane) -> Lane:
    """A pool member's lane from its name as a user gives it: ``"qpu:emulated-qpu#1"``, or without the
    ``qpu:`` (``"emulated-qpu#1"``, ``"emulated-qpu"``), or a :class:`Lane` as it is."""
    if isinstance(name, Lane):
        return name
    if not isinstance(name, str):
        raise ValueError(f"a pool member is named by a string or a Lane, got {name!r}")
    try:
        lane = Lane.parse(name)
    except ValueError:
        lane = None
    return lane if lane is not None and lane.quantum and lane.name is not None else Lane.parse(f"qpu:{name}")


def _natural(text: str) -> list:
    """Sort key that puts ``cpu/2`` before ``cpu/10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


__all__ = ["Lane", "member"]
