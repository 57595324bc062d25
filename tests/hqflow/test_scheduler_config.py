"""hqflow.engine.scheduler_config: SchedulerConfig is built from flat fields (users, plans, saved JSON) and checked at
construction."""
import dataclasses

import pytest

import hqflow as hq
from hqflow.engine.collective import Compression
from hqflow.engine.scheduler_config import ExecutorKind
from hqflow.engine.placement import Placement
from hqflow.engine.scheduler_config import SchedulerConfig, configure
from hqflow.workloads import synthetic


def test_flat_fields_build_it_frozen():
    cfg = hq.SchedulerConfig(executor="local", cpu_workers=2, gpu_workers=3, window=4, prefetch=0, max_in_flight=2,
                             rows_per_job=8, max_retries=5, job_timeout=1.5, run_id="r", budget=2.0, seed=7,
                             run_dir="d", checkpoint_every=3, resume=True)
    assert cfg.executor is ExecutorKind.LOCAL and (cfg.cpu_workers, cfg.prefetch, cfg.run_dir) == (2, 0, "d")
    assert SchedulerConfig(executor="sync").executor.one_at_a_time
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.prefetch = 3


def test_saved_json_dicts_become_their_types():
    cfg = SchedulerConfig(executor="ray", compression={"kind": "topk", "ratio": 0.1},
                          placement={"actors": "pack"})
    assert isinstance(cfg.compression, Compression) and cfg.compression.ratio == 0.1
    assert isinstance(cfg.placement, Placement) and cfg.placement.actors == "pack"
    assert cfg.executor is ExecutorKind.RAY


@pytest.mark.parametrize("kwargs, message", [
    ({"window": 0}, "window must be an integer >= 1"),
    ({"rows_per_job": 0}, "rows_per_job must be an integer >= 1"),
    ({"cpu_workers": 1.5}, "cpu_workers must be an integer >= 1"),
    ({"executor": "dask"}, "executor must be 'sync', 'local' or 'ray'"),
    ({"job_timeout": -1}, "job_timeout must be positive"),
    ({"prefetch": -1}, "prefetch must be an integer >= 0"),
    ({"max_retries": -1}, "max_retries must be an integer >= 0"),
    ({"learners": 2}, "learners=2 needs as many learner slots, but gpu_workers=1"),
    ({"learners": 2, "gpu_workers": 2, "executor": "sync"}, "learners > 1 runs replicas at once"),
    ({"compression": "topk"}, "compression must be a hqflow.engine.collective.Compression"),
    ({"placement": "SPREAD"}, "placement must be a hqflow.engine.placement.Placement"),
    ({"ray_address": ""}, "ray_address must be a non-empty string or None"),
    ({"ray_address": "auto", "ray_num_cpus": 2}, "ray_num_cpus sizes a Ray that hqflow starts"),
    ({"checkpoint_every": True}, "checkpoint_every must be an integer >= 1"),
    ({"resume": True}, "resume=True needs the run_dir"),
    ({"budget": -1}, "budget must be a number >= 0 or None"),
])
def test_bad_fields_are_refused_with_the_field_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        SchedulerConfig(**kwargs)


def test_options_replace_the_configs_fields_and_unknown_ones_are_refused():
    base = SchedulerConfig(cpu_workers=2)
    assert configure(base, {"window": 4}) == dataclasses.replace(base, window=4)
    assert configure(None, {}) == SchedulerConfig()
    assert configure(base, {}) is base
    with pytest.raises(TypeError, match=r"unknown scheduler option\(s\) \['windw'\]"):
        configure(None, {"windw": 3})
    with pytest.raises(TypeError, match=r"unknown scheduler option\(s\) \['windw'\]"):
        hq.run(synthetic.build_graph(synthetic.Config(staleness=0, backend="qpu")), 1, windw=3)
