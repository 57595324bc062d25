"""Where the ray executor puts its actors on a cluster's nodes: :class:`Placement`, data printed with its policy."""
from __future__ import annotations

from dataclasses import dataclass

ACTOR_PLACEMENTS = ("spread", "pack", "default")
BACKEND_PLACEMENTS = ("default", "with-actors")


@dataclass(frozen=True)
class Placement:
    """Ray placement of a run's actors. ``pack`` reserves the cpu worker actors all at once, so a run never
    starts with half its actors; ``with-actors`` pins each backend actor to a worker's node (hard affinity:
    Ray's soft one moved it while that node started workers), so jobs do not cross nodes."""

    actors: str = "spread"
    """``spread`` (Ray's ``SPREAD``): the cpu worker actors on as many nodes as possible; ``pack``: together,
    in one placement group of one CPU bundle each; ``default``: Ray's choice (the driver's node first)"""
    learner: str | None = None
    """a custom resource the learner's node has (``ray start --resources '{"learner": 1}'``): the ``gpu``
    slots go there, and take a GPU wherever the cluster has one; None: any node"""
    backends: str = "default"
    """``with-actors``: each backend actor on a worker actor's node, round-robin; ``default``: Ray's choice"""

    def __post_init__(self):
        if self.actors not in ACTOR_PLACEMENTS:
            raise ValueError(f"placement actors must be one of {', '.join(ACTOR_PLACEMENTS)}, got {self.actors!r}")
        if self.learner is not None and (not isinstance(self.learner, str) or not self.learner
                                         or self.learner in ("CPU", "GPU", "memory")):
            raise ValueError(f"placement learner must be a custom resource name, got {self.learner!r}")
        if self.backends not in BACKEND_PLACEMENTS:
            raise ValueError(f"placement backends must be one of {', '.join(BACKEND_PLACEMENTS)}, "
                             f"got {self.backends!r}")

    def options(self, resource: str) -> dict:
        """Ray actor options for a worker slot of ``resource`` (``cpu`` or ``gpu``); ``pack``'s placement
        group is the executor's to make."""
        if resource == "cpu":
            return {"scheduling_strategy": "SPREAD"} if self.actors == "spread" else {}
        return {"resources": {self.learner: 0.001}} if self.learner else {}
