"""Where checkpoints written before REINFORCE's actor moved into ``reinforce`` find its classes: they still load."""
from hqflow.workloads.rl import reinforce

Episode = reinforce.Episode


class Carry(reinforce.Carry):
    """An old checkpoint's carry, whose running episodes were ``([states], [actions], [rewards])`` per env."""

    def __setstate__(self, state: dict) -> None:
        state["partial"] = [list(zip(*p)) if isinstance(p, tuple) else p for p in state["partial"]]
        self.__dict__.update(state)
        self.__class__ = reinforce.Carry
