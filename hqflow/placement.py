"""Where the ray executor puts its actors on a cluster's nodes: data, printed with its policy.

``actors`` places the classical worker actors (RL actors, ``cpu`` fragments):

* ``"spread"`` (default): on as many nodes as Ray can (Ray's ``SPREAD`` strategy);
* ``"pack"``: together, in one placement group of one CPU bundle per actor (Ray's ``PACK``
  strategy): reserved all at once, on as few nodes as fit, so co-located fragments stay together
  and a run never starts with half its actors;
* ``"default"``: Ray's default, which fills the driver's node first.

``learner`` names a custom resource that the learner's node has (``ray start --resources
'{"learner": 1}'``): the ``gpu`` slots then go there; they ask for a GPU whenever the cluster has one,
label or not. ``backends="with-actors"`` puts each backend's actor (the QPU client that submits and
waits on jobs) on the node of a worker actor, round-robin, so that the actors' jobs do not cross
nodes (pinned there: Ray's soft affinity moved it elsewhere while that node was starting its
workers); ``"default"`` leaves backends to Ray (usually the driver's node).
"""
from __future__ import annotations

from dataclasses import dataclass

ACTOR_PLACEMENTS = ("spread", "pack", "default")
BACKEND_PLACEMENTS = ("default", "with-actors")


@dataclass(frozen=True)
class Placement:
    actors: str = "spread"
    """``spread``: the cpu worker actors on as many nodes as possible; ``pack``: together, in one
    placement group; ``default``: Ray's choice"""
    learner: str | None = None
    """a custom resource the learner's node has (its ``gpu`` slot takes a sliver of it); None: any node"""
    backends: str = "default"
    """``with-actors``: each backend actor on a worker actor's node; ``default``: Ray's choice"""

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
