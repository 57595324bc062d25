"""What a run gives back: a :class:`RunResult`, or :class:`RunFailed` carrying the part that completed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..trace import Span
from .fragments import FragmentError
from .ports import PortValues


@dataclass
class RunResult:
    outputs: list[dict[str, Any]]  # graph outputs, one dict per step
    spans: list[Span]
    state: PortValues
    """the final value on each loop-carried edge, keyed by its source port (``hqflow.engine.ports.PortRef``);
    a lookup also takes the ``"src_frag.port"`` text"""
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    steps: list[int] | None = None  # the step of each output; None: 0, 1, 2, ... (a whole run)

    def column(self, name: str) -> list[Any]:
        """One graph output across all steps."""
        return [o[name] for o in self.outputs]


class RunFailed(FragmentError):
    """A run stopped by a failure (a fragment raised, a quantum job ran out of retries).

    ``result`` is a ``RunResult`` of everything that completed before: the outputs of every finished
    step (``result.steps`` says which), every span, and the newest value on each loop-carried edge.
    ``__cause__`` is the failure.
    """

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result
