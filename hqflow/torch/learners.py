"""A ``learn`` fragment's torch model: ``TorchLearner`` keeps the model and its optimizer alive between steps while
the loop edge carries a plain-data snapshot of both; ``ReducedGradients`` reduces their gradients across replicas."""
from __future__ import annotations

import collections
import copy
import uuid

import torch
from torch import nn

from ..engine.collective import Compression, reduce, replica


class TorchLearner:
    """A model and its optimizer for a ``learn`` fragment, carried on a loop edge as plain state, so
    checkpoints and resumes are exact.

        learner = TorchLearner(build)          # build() -> (model, optimizer); module level

        def learn(batch, state):               # pipe.loop("learn.state", "learn.state", init=None)
            model, opt = learner.attach(state) # fresh from build() when state is None
            ...                                # train: opt.zero_grad(), loss.backward(), opt.step()
            return {"state": learner.state()}

    ``attach`` reuses the live objects when ``state`` is the snapshot this process made
    last, and otherwise loads it (a resume, another process, an older version).
    """

    def __init__(self, build):
        if not callable(build):
            raise TypeError("TorchLearner(build): build must be a function returning (model, optimizer)")
        self.build = build
        self._live = None
        self._last: str | None = None  # the id of the snapshot this process made last

    def attach(self, state: dict | None):
        """The live ``(model, optimizer)``, set to ``state`` (None: as ``build()`` makes them)."""
        if state is None:
            self._live, self._last = self._built(), None
        elif self._live is None or state.get("id") != self._last:
            if not isinstance(state, dict) or not {"model", "optimizer", "id"} <= set(state):
                raise ValueError("TorchLearner.attach: state must be a snapshot from TorchLearner.state() or None")
            model, opt = self._live or self._built()
            model.load_state_dict(state["model"])
            opt.load_state_dict(copy.deepcopy(state["optimizer"]))
            self._live, self._last = (model, opt), state["id"]
        return self._live

    def state(self) -> dict:
        """A snapshot of the model and the optimizer (copies: later steps do not change it)."""
        if self._live is None:
            raise RuntimeError("TorchLearner.state() before attach()")
        model, opt = self._live
        self._last = uuid.uuid4().hex
        return {"model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "optimizer": copy.deepcopy(opt.state_dict()), "id": self._last}

    def _built(self):
        built = self.build()
        if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], nn.Module)
                and isinstance(built[1], torch.optim.Optimizer)):
            raise TypeError("TorchLearner: build() must return (model, optimizer): an nn.Module and a torch.optim "
                            "optimizer over its parameters")
        return built


class ReducedGradients:
    """Inside a replicated ``learn`` fragment (``hqflow.engine.collective``): at the end of every backward pass,
    ``module``'s gradients are combined across the replicas, so every replica applies the same update
    (as ``DistributedDataParallel``). ``sharded``: parameters whose gradient each replica computed for its
    share of the rows (summed in rank order, compressed as the replica's ``Compression`` says); for every
    other parameter rank 0's gradient is taken.

        with ReducedGradients(policy, sharded=[...]):
            loss.backward()          # gradients reduced here
            optimizer.step()
    """

    def __init__(self, module: nn.Module, sharded=()):
        self.params = [p for p in module.parameters() if p.requires_grad]
        ids = {id(p) for p in sharded}
        self.ops = ["sum" if id(p) in ids else "first" for p in self.params]
        self.rounds, self._armed, self._hooks = 0, False, []

    def __enter__(self) -> ReducedGradients:
        self._hooks = [p.register_post_accumulate_grad_hook(self._arm) for p in self.params]
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _arm(self, _param) -> None:
        if not self._armed:  # the first gradient of this backward: reduce all of them when it ends
            self._armed = True
            torch.autograd.Variable._execution_engine.queue_callback(self.reduce)

    def reduce(self) -> None:
        self._armed = False
        rep = replica()
        rank, compression = (rep.rank, rep.compression) if rep is not None else (0, Compression())
        sent = []
        for i, (p, op) in enumerate(zip(self.params, self.ops)):
            if p.grad is None or (op == "first" and rank > 0):  # only rank 0's is kept: the others send none
                sent.append(None)
                continue
            g = p.grad.detach().cpu().double().numpy().ravel()
            if op == "sum" and compression.kind != "none":  # what compression drops waits for the next step
                left = _residuals(rep.stream)
                g, left[(rank, i)] = compression.encode(g, left.get((rank, i)))
            sent.append(g)
        reduced = reduce(sent, self.ops, key=f"grad{self.rounds}")
        self.rounds += 1
        for p, g in zip(self.params, reduced):
            if g is not None:
                p.grad = torch.as_tensor(g, dtype=p.dtype).to(p.device).reshape(p.shape)


# Error feedback: replica stream -> (rank, parameter index) -> what compression left out so far, for the
# newest few streams (runs). Process-local: a learner that Ray restarts starts again from zero.
_RESIDUALS: collections.OrderedDict[str, dict] = collections.OrderedDict()
_RESIDUAL_STREAMS = 8


def _residuals(stream: str) -> dict:
    left = _RESIDUALS.setdefault(stream, {})
    _RESIDUALS.move_to_end(stream)
    while len(_RESIDUALS) > _RESIDUAL_STREAMS:
        _RESIDUALS.popitem(last=False)
    return left
