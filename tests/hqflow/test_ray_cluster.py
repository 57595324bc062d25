"""The ray executor on a running Ray cluster: several raylets on this machine (ray.cluster_utils.Cluster),
connected to with ray_address. These tests start their own cluster, not the shared local Ray."""
import time

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import get_backend
from hqflow.workloads import synthetic

pytestmark = [pytest.mark.ray, pytest.mark.own_ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

CFG = synthetic.Config(staleness=0, backend="qpu")


def _sync(steps):
    """The sync executor on the exact numpy backend, in this process: what a run on the cluster must equal."""
    return hq.run(synthetic.build_graph(CFG), synthetic.stream(steps, CFG), backends={"qpu": get_backend("reference")},
                  executor="sync")


@pytest.fixture(scope="module")
def _two_nodes():
    """One two-node cluster for the module's tests (starting one takes seconds)."""
    from ray.cluster_utils import Cluster

    ray.shutdown()  # the shared local Ray of the other tests; the next of them starts it again
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": {"worker_niceness": 0}})
    c.add_node(num_cpus=2, resources={"learner": 1})
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def cluster(_two_nodes):
    """The module's cluster with all of its CPUs free (the actors and placement groups of a test's runs end
    with this process's connection, which Ray frees a moment later), this process not connected to it."""
    ray.shutdown()
    ray.init(address=_two_nodes.address, log_to_driver=False)
    deadline = time.time() + 60
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"] and time.time() < deadline:
        time.sleep(0.05)
    ray.shutdown()
    yield _two_nodes
    ray.shutdown()


def test_a_run_on_a_two_node_cluster_equals_the_sync_executor(cluster):
    ref = _sync(6)
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(6, CFG), backends={"qpu": ("emulated-qpu", {})},
                 executor="ray", ray_address=cluster.address, cpu_workers=3)
    assert res.outputs == ref.outputs
    np.testing.assert_array_equal(res.state["learn.weights"], ref.state["learn.weights"])
    assert len(ray.nodes()) == 2 and ray.cluster_resources()["CPU"] == 3
    nodes = {n["NodeID"][:8] for n in ray.nodes()}
    assert {s.node for s in res.spans} <= nodes and all(s.node for s in res.spans)  # tasks and jobs: where they ran


def test_a_second_address_while_connected_is_refused(cluster):
    hq.run(synthetic.build_graph(CFG), synthetic.stream(1, CFG), backends={"qpu": ("emulated-qpu", {})},
           executor="ray", ray_address=cluster.address)
    with pytest.raises(ValueError, match="is connected to the Ray at .*; call ray.shutdown\\(\\) first"):
        hq.run(synthetic.build_graph(CFG), synthetic.stream(1, CFG), backends={"qpu": ("emulated-qpu", {})},
               executor="ray", ray_address="127.0.0.1:1")


def test_ray_address_options_are_checked():
    with pytest.raises(ValueError, match="ray_num_cpus sizes a Ray that hqflow starts"):
        hq.SchedulerConfig(executor="ray", ray_address="auto", ray_num_cpus=2)
    with pytest.raises(ValueError, match="ray_address must be a non-empty string"):
        hq.SchedulerConfig(executor="ray", ray_address="")


def test_hqflow_train_connects_to_a_cluster(cluster, tmp_path, hqflow_cli):
    import json

    proc = hqflow_cli("train", "cartpole", "--distribution", "ray-actors", "--ray-address", cluster.address,
                      "--episodes", "4", "--set", "n_layers=1", "--set", "batch_episodes=2",
                      "--run-dir", tmp_path / "run", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["episodes"] == 4
    bad = hqflow_cli("train", "cartpole", "--ray-address", cluster.address)
    assert bad.returncode == 2 and "--ray-address needs --distribution ray-actors" in bad.stderr


def test_placement_spreads_the_actors_and_puts_the_learner_where_its_label_is(cluster):
    from hqflow.engine.executors.ray import _WORKERS
    from hqflow.engine.placement import Placement

    placement = Placement(actors="spread", learner="learner")
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(2, CFG), backends={"qpu": ("emulated-qpu", {})},
                 executor="ray", ray_address=cluster.address, cpu_workers=2, placement=placement)
    assert len(res.outputs) == 2
    workers = {key[3:]: ray.get(actor.node.remote()) for key, actor in _WORKERS.items() if key[2] == placement}
    labelled = [n["NodeID"][:8] for n in ray.nodes() if n["Resources"].get("learner")]
    assert workers[("gpu", 0)] == labelled[0]
    assert workers[("cpu", 0)] != workers[("cpu", 1)]  # one on each node
    with pytest.raises(ValueError, match="placement actors must be one of spread, pack, default"):
        Placement(actors="everywhere")
    with pytest.raises(ValueError, match="a custom resource name"):
        Placement(learner="GPU")


def test_pack_keeps_the_actors_together_and_backends_go_with_them(cluster):
    from ray.util.placement_group import placement_group_table

    from hqflow.engine.executors.ray import _GROUPS, _WORKERS
    from hqflow.engine.placement import Placement

    placement = Placement(actors="pack", backends="with-actors")
    ref = _sync(3)
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(3, CFG), backends={"qpu": ("emulated-qpu", {})},
                 executor="ray", ray_address=cluster.address, cpu_workers=2, placement=placement)
    assert res.outputs == ref.outputs
    workers = {key[3:]: ray.get(actor.node.remote()) for key, actor in _WORKERS.items() if key[2] == placement}
    assert workers[("cpu", 0)] == workers[("cpu", 1)]  # one node: 2 bundles fit on the node with 2 CPUs
    (group, bundles), = [g for k, g in _GROUPS.items() if k[2] == placement]
    assert bundles == 2 and placement_group_table(group)["strategy"] == "PACK"
    jobs = {s.node for s in res.spans if s.resource.quantum}
    assert jobs == {workers[("cpu", 0)]}  # the backend actor ran beside the actors
    # a run with another count of actors makes its placement group anew
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(3, CFG), backends={"qpu": ("emulated-qpu", {})},
                 executor="ray", ray_address=cluster.address, cpu_workers=1, placement=placement)
    assert res.outputs == ref.outputs
    assert [g[1] for k, g in _GROUPS.items() if k[2] == placement] == [1]
    with pytest.raises(ValueError, match="placement backends must be one of default, with-actors"):
        Placement(backends="near")


def test_a_distribution_policy_prints_its_placement():
    from hqflow.engine.distribution import get_distribution

    policy = get_distribution("ray-actors", placement={"actors": "default", "learner": "learner"})
    assert str(policy) == ("RayActors(staleness=1, actors=2, placement=Placement(actors='default', learner='learner', "
                           "backends='default'))")
    assert policy.scheduler_config().placement == policy.placement


def test_without_an_address_a_run_starts_its_own_ray_even_beside_a_cluster(cluster):
    """Ray's init() alone joins a cluster it finds on the machine (and then refuses num_cpus)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import ray
        import hqflow as hq
        from hqflow.workloads import synthetic
        cfg = synthetic.Config(staleness=0, backend="qpu")
        hq.run(synthetic.build_graph(cfg), synthetic.stream(2, cfg), backends={"qpu": ("emulated-qpu", {})},
               executor="ray", ray_num_cpus=2)
        print(ray.cluster_resources()["CPU"], len(ray.nodes()))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2.0", "1"]  # its own one-node Ray, not the cluster's 3 CPUs on 2 nodes
