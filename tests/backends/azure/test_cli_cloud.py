"""``hqflow run`` and ``hqflow trace`` on a cloud target (issue 22, items 22, 23, 24 and 26), in
process, against the loopback job service (fixtures in conftest.py)."""
import json

from hqflow.cli import main


def _opts(workspace, *keys):
    out = []
    for k in keys or ("subscription_id", "resource_group", "name", "location", "endpoint"):
        out += ["--backend-opt", f"{k}={workspace[k]}"]
    return out


def _figures(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_everything_vqe_runs_goes_through_the_configured_backend_and_the_dry_run_counts_it(
        azure_workspace, azure_service, tmp_path, capsys, monkeypatch):
    """22.22: vqe evaluated its result on get_backend(cfg.backend), without --backend-opt (a traceback
    after every paid job, no result.json); 22.24: hqflow trace counted batches, not service jobs."""
    monkeypatch.setenv("AZURE_QUANTUM_API_KEY", azure_workspace["key"])
    run = ["run", "vqe", "--steps", "2", "--backend", "azure:ionq.simulator", *_opts(azure_workspace), "--json"]
    assert main([*run, "--dry-run"]) == 0, capsys.readouterr().err
    priced = _figures(capsys.readouterr().out)
    assert azure_service.stats()["jobs"] == 0  # a dry run submits nothing, --backend-opt or not
    folder = tmp_path / "run"
    assert main([*run, "--run-dir", str(folder)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert (folder / "result.json").exists()
    spans = json.loads((folder / "spans.json").read_text())["spans"]
    jobs = azure_service.stats()["jobs"]
    assert jobs == priced["jobs"] == sum(s["service_jobs"] for s in spans if s["kind"] == "execute")
    assert main(["trace", str(folder)]) == 0
    batches = sum(1 for s in spans if s["kind"] == "execute")
    assert f"over {jobs} priced service jobs in {batches} batches" in capsys.readouterr().out


def test_qaoa_evaluates_and_samples_on_the_run_s_own_pool(azure_workspace, azure_service):
    """22.22: qaoa's expected cut and its samples ran on get_backend(cfg.backend) and a pool-less run."""
    from hqflow.workloads import qaoa

    cfg = qaoa.Config(nodes=4, layers=1, steps=1, shots=200, backend="cloud")
    result = qaoa.run(cfg, backends={"cloud": [("azure:ionq.simulator", azure_workspace)]})
    jobs = [s for s in result["spans"] if s["kind"] == "execute"]
    assert all(s["lane"] == {"kind": "qpu", "name": "azure:ionq.simulator"} for s in jobs) and len(jobs) == 3
    assert sum(s["service_jobs"] for s in jobs) == azure_service.stats()["jobs"]
    assert result["best_cut"] == result["max_cut"] and 0 < result["expected_cut"] <= result["max_cut"]


def test_a_wrong_key_is_one_line_at_once_and_a_key_on_the_command_line_is_warned_about(azure_workspace,
                                                                                       azure_service, capsys,
                                                                                       monkeypatch):
    """22.23: a 401 printed a 39-line chained traceback after four tries; 22.26: a key in --backend-opt
    shows in ps, so hqflow says to keep it in the environment."""
    monkeypatch.delenv("AZURE_QUANTUM_API_KEY", raising=False)
    wrong = "wrong-key-" + "y" * 16
    code = main(["run", "vqe", "--steps", "1", "--backend", "azure:ionq.simulator", *_opts(azure_workspace),
                 "--backend-opt", f"key={wrong}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and "Traceback" not in err and wrong not in err
    assert len(lines) == 2 and "--backend-opt key=" in lines[0] and "AZURE_QUANTUM_API_KEY" in lines[0]
    assert lines[1].startswith("hqflow: ") and "401" in lines[1] and repr(azure_workspace["name"]) in lines[1]
    assert azure_service.stats()["jobs"] == 0


def test_an_unreachable_endpoint_is_one_line(azure_workspace, azure_service, capsys, monkeypatch):
    """22.23: a wrong endpoint ended in a traceback from the CLI."""
    monkeypatch.setenv("AZURE_QUANTUM_API_KEY", azure_workspace["key"])
    opts = _opts(azure_workspace, "subscription_id", "resource_group", "name", "location")
    code = main(["run", "vqe", "--steps", "1", "--backend", "azure:ionq.simulator", *opts,
                 "--backend-opt", "endpoint=http://nosuchhost.invalid/"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.strip()] == [err.strip()] and "cannot reach" in err


def test_a_key_given_on_the_command_line_is_never_written(azure_workspace, azure_service, tmp_path, capsys,
                                                          monkeypatch):
    """22.26: the key works from --backend-opt, with a warning, and reaches no file of the run."""
    monkeypatch.delenv("AZURE_QUANTUM_API_KEY", raising=False)
    key, folder = azure_workspace["key"], tmp_path / "run"
    assert main(["run", "vqe", "--steps", "1", "--backend", "azure:ionq.simulator", *_opts(azure_workspace),
                 "--backend-opt", f"key={key}", "--run-dir", str(folder)]) == 0
    assert main(["trace", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert err.count("puts a secret on the command line") == 1 and key not in out + err
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) >= 4 and all(key.encode() not in p.read_bytes() for p in files)


def test_hqflow_backends_warns_of_a_key_in_azure_opt(capsys):
    """22.26: --azure-opt key=... is on the command line too."""
    assert main(["backends", "--json", "--azure-opt", "key=secret-key-123", "--azure-opt", "name=w"]) == 0
    out, err = capsys.readouterr()
    assert err.count("--azure-opt key=... puts a secret on the command line") == 1
    assert "secret-key-123" not in out + err


def test_hqflow_train_with_a_wrong_key_stops_at_once_and_says_what_to_check(azure_workspace, azure_service, capsys,
                                                                            monkeypatch, tmp_path):
    """22.23: hqflow train retried a 401 four times, then said its last completed update was checkpointed."""
    monkeypatch.setenv("AZURE_QUANTUM_API_KEY", "wrong-key-" + "z" * 16)
    monkeypatch.chdir(tmp_path)
    code = main(["train", "cartpole", "--backend", "azure:ionq.simulator", *_opts(azure_workspace), "--set",
                 "n_layers=1", "--set", "batch_episodes=1", "--episodes", "1", "--run-dir", "run"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and "401" in last, last
    assert "check the credentials and the endpoint" in last and "no update had completed" in last
    assert azure_service.stats()["jobs"] == 0


def test_a_run_on_a_target_without_a_known_price_says_so_once_and_never_counts_it_free(
        azure_workspace, azure_service, tmp_path, capsys, monkeypatch):
    """34.6: without a budget the run on rigetti.qpu.cepheus-1-108q reported list_cost 0 with no word."""
    import os

    monkeypatch.setenv("AZURE_QUANTUM_API_KEY", azure_workspace["key"])
    monkeypatch.syspath_prepend(os.path.dirname(__file__))  # azure_tiny_env
    code = main(["train", "azure_tiny_env:Blink-v0", "--set", "n_layers=1", "--set", "batch_episodes=1",
                 "--episodes", "1", "--shots", "50", "--backend", "azure:rigetti.qpu.cepheus-1-108q",
                 "--backend-opt", "input_format=quil", *_opts(azure_workspace), "--run-dir", str(tmp_path / "run"),
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.count("no price is known for a job on 'rigetti.qpu.cepheus-1-108q'") == 1, err
    figures = _figures(out)
    assert figures["service_jobs"] > 0 and figures["list_cost"] is None and figures.get("spend") is None, figures
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(r["list_cost"] is r["list_cost_total"] is r["spend"] is None for r in rows), rows
    assert "NaN" not in (tmp_path / "run" / "metrics.jsonl").read_text()  # strict JSON: unknown is null
