"""Run a hybrid loop on a pool of flaky emulated cloud QPUs and look at the schedule.

    python examples/overlap.py [--quick] [--executor local|sync|ray] [--trace DIR]
"""
import argparse

import torch

import hqflow as hq
from hqflow.trace import format_table, save_spans
from hqflow.workloads import synthetic

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true", help="12 micro-batches instead of 40")
ap.add_argument("--executor", default="local", choices=["sync", "local", "ray"])
ap.add_argument("--trace", metavar="DIR", help="write spans.json, trace.json (Perfetto) and gantt.png here")
args = ap.parse_args()
# The learner runs on a worker thread. Multi-threaded torch on two threads at once (this
# one and the main thread) fights over the cores through OpenMP's spinning thread teams.
torch.set_num_threads(1)

# A learner doing ~20 ms of torch work; the circuit may use weights 2 versions old.
cfg = synthetic.Config(staleness=2, backend="qpu", matrix=128, repeats=synthetic.calibrate(20))
graph = synthetic.build_graph(cfg)

# Two emulated QPUs, 20 ms per job, 10% of jobs failing: a pool behind the name "qpu".
qpus = [("emulated-qpu", {"per_job": 0.02, "failure_rate": 0.1, "seed": k, "name": f"qpu{k}"}) for k in range(2)]
result = hq.run(graph, synthetic.stream(12 if args.quick else 40, cfg), backends={"qpu": qpus},
                executor=args.executor, max_retries=5, ray_num_cpus=2)

print(format_table(result.spans))
print({k: result.extra[k] for k in ("steps", "retries", "failed_jobs", "max_admitted")})
if args.trace:
    from hqflow.trace.export import draw_gantt, write_chrome_trace

    save_spans(f"{args.trace}/spans.json", result.spans)
    write_chrome_trace(f"{args.trace}/trace.json", result.spans)
    draw_gantt(result.spans, f"{args.trace}/gantt.png", title=f"examples/overlap.py ({args.executor})")
    print(f"wrote {args.trace}/spans.json, trace.json, gantt.png")
