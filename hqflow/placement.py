"""Where the ray executor puts its actors on a cluster's nodes: data, printed with its policy.

``Placement(actors="spread")`` asks Ray to put the classical worker actors (RL actors, ``cpu``
fragments) on as many nodes as it can (Ray's ``SPREAD`` strategy); ``"default"`` leaves them to
Ray's default, which fills the driver's node first. ``learner`` names a custom resource that the
learner's node has (``ray start --resources '{"learner": 1}'``): the ``gpu`` slot then goes there;
it asks for a GPU whenever the cluster has one, label or not.
"""
from __future__ import annotations

from dataclasses import dataclass

ACTOR_PLACEMENTS = ("spread", "default")


@dataclass(frozen=True)
class Placement:
    actors: str = "spread"
    """``spread``: the cpu worker actors on as many nodes as possible; ``default``: Ray's choice"""
    learner: str | None = None
    """a custom resource the learner's node has (its ``gpu`` slot takes a sliver of it); None: any node"""

    def __post_init__(self):
        if self.actors not in ACTOR_PLACEMENTS:
            raise ValueError(f"placement actors must be one of {', '.join(ACTOR_PLACEMENTS)}, got {self.actors!r}")
        if self.learner is not None and (not isinstance(self.learner, str) or not self.learner
                                         or self.learner in ("CPU", "GPU", "memory")):
            raise ValueError(f"placement learner must be a custom resource name, got {self.learner!r}")

    def options(self, resource: str) -> dict:
        """Ray actor options for a worker slot of ``resource`` (``cpu`` or ``gpu``)."""
        if resource == "cpu":
            return {"scheduling_strategy": "SPREAD"} if self.actors == "spread" else {}
        return {"resources": {self.learner: 0.001}} if self.learner else {}
