"""hqflow.cli.resources: a resources file is read into pools, or refused with one line naming the problem;
ElasticPools turns a file's pools into the members that join and leave a running scheduler's pools."""
import json
import re

import pytest

import hqflow as hq
from hqflow.cli.resources import ElasticPools, ResourceError, ResourceWatcher, parse
from hqflow.engine.window import Window
from hqflow.workloads import synthetic


def test_members_are_names_or_name_and_options():
    pools = parse('{"pools": {"qpu": ["emulated-qpu", ["emulated-qpu", {"per_job": 0.01}]]}}')
    assert pools == {"qpu": [("emulated-qpu", {}), ("emulated-qpu", {"per_job": 0.01})]}


@pytest.mark.parametrize("text, message", [
    ("{", "is not a JSON document"),
    ('["emulated-qpu"]', 'must be an object {"pools"'),
    ('{"pools": {"qpu": ["emulated-qpu"]}, "workers": 2}', "unknown key 'workers'"),
    ('{"pools": {"qpu": "emulated-qpu"}}', "pool 'qpu' must be a list of members"),
    ('{"pools": {"qpu": []}}', "pool 'qpu' has no member"),
    ('{"pools": {"qpu": ["nosuch"]}}', "pool 'qpu', member 0 (nosuch): unknown backend"),
    ('{"pools": {"qpu": [["emulated-qpu", {"per_jobb": 1}]]}}', "member 0 (emulated-qpu)"),
    ('{"pools": {"qpu": [["emulated-qpu", {"max_in_flight": 0}]]}}', "max_in_flight must be a positive integer"),
    ('{"pools": {"qpu": [["emulated-qpu"]]}}', "a member must be a backend name or [name, {options}]"),
])
def test_a_bad_file_is_one_line_naming_the_problem(text, message):
    with pytest.raises(ResourceError) as info:
        parse(text, "pool.json")
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_missing_file_is_refused_when_the_watcher_is_made(tmp_path):
    with pytest.raises(ResourceError, match="cannot read .*nope.json: No such file"):
        ResourceWatcher(tmp_path / "nope.json")


class _FakeService:
    def __init__(self):
        self.calls = []

    def add_backend(self, pool, member):
        self.calls.append(("add", pool, member.lane))
        return 2 + sum(c[0] == "add" for c in self.calls) - 1

    def remove_backend(self, pool, index):
        self.calls.append(("remove", pool, index))
        return 1


def test_a_change_keeps_equal_members_adds_before_it_removes_and_refuses_an_empty_pool():
    sched = hq.Scheduler(synthetic.build_graph(synthetic.Config(staleness=0, backend="qpu")), {"qpu": [("emulated-qpu", {"name": "a"}), ("emulated-qpu", {"name": "b"})]})
    service = _FakeService()
    sched.elastic.attach(service, Window(sched.config, sched.pools), None)
    try:
        elastic = ElasticPools(sched, {"qpu": [["emulated-qpu", {"name": "a"}], ["emulated-qpu", {"name": "b"}]]})
        changes = elastic.apply({"qpu": [("emulated-qpu", {"name": "b"}), ("emulated-qpu", {"name": "c"})]})
        assert changes == [{"pool": "qpu", "backends": [["emulated-qpu", {"name": "b"}], ["emulated-qpu", {"name": "c"}]],
                            "added": 1, "removed": 1, "requeued": 1}]
        assert service.calls == [("add", "qpu", "qpu:c#2"), ("remove", "qpu", 0)]
        assert elastic.apply({"qpu": [("emulated-qpu", {"name": "c"}), ("emulated-qpu", {"name": "b"})]}) == []
        for pools, message in (({"qpu": []}, "pool 'qpu' would have no backend"),
                               ({"gpu": [("emulated-qpu", {})]}, "no backend pool 'gpu' (its pools: 'qpu')")):
            with pytest.raises(ResourceError, match=re.escape(message)):
                elastic.apply(pools)
        assert len(service.calls) == 2 and len(elastic.current("qpu")) == 2
    finally:
        sched.executor.close()


def test_the_file_format_in_the_docstring_parses():
    import hqflow.cli.resources as mod

    line = next(x for x in mod.__doc__.splitlines() if x.strip().startswith('{"pools"'))
    assert parse(line)["qpu"][1] == ("emulated-qpu", {"per_job": 0.01})
    assert json.loads(line)
