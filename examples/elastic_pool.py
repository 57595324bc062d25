"""Change a running job's QPUs and get the same result: one of two QPUs leaves, two more join.

A loop of a circuit job and a learner runs at staleness 0 on a pool of two emulated QPUs; each
step's 12 circuits go as three jobs of 4 (``rows_per_job``), side by side. After a quarter of the
steps QPU "b" is taken out (its jobs in flight are cancelled and run again on "a"); after half,
"c" and "d" join. The final weights equal an undisturbed run's bit for bit, every
step's three jobs finished once, and the Gantt chart shows the lanes change at the two marks.

    python examples/elastic_pool.py            # 200 steps; writes elastic_gantt.png
    python examples/elastic_pool.py --quick    # 60 steps (what CI runs)
"""
import argparse
import threading
import time

import numpy as np

import hqflow as hq
from hqflow.backends.emulated import EmulatedQPU
from hqflow.trace.export import draw_gantt
from hqflow.workloads import synthetic

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true")
ap.add_argument("--png", default="elastic_gantt.png", help="where to draw the Gantt chart")
args = ap.parse_args()

steps = 60 if args.quick else 200
cfg = synthetic.Config(staleness=0, backend="qpu", batch=12, repeats=synthetic.calibrate(2.0))


def qpu(name):
    return EmulatedQPU(per_job=0.002, per_circuit=0.001, name=name)


graph, stream = synthetic.build_graph(cfg), synthetic.stream(steps, cfg)
undisturbed = hq.run(graph, stream, backends={"qpu": [qpu("a"), qpu("b")]}, rows_per_job=4)

done, marks = [0], []
run = hq.start(graph, stream, backends={"qpu": [qpu("a"), qpu("b")]}, rows_per_job=4,
               progress=lambda n, _: done.__setitem__(0, n))


def changes():
    while done[0] < steps // 4 and not run.done():
        time.sleep(0.001)
    run.remove_backend("qpu", "b")
    marks.append((time.perf_counter() - run.scheduler.t0, "b removed"))
    while done[0] < steps // 2 and not run.done():
        time.sleep(0.001)
    run.add_backend("qpu", qpu("c"))
    run.add_backend("qpu", qpu("d"))
    marks.append((time.perf_counter() - run.scheduler.t0, "c, d added"))


changer = threading.Thread(target=changes)
changer.start()
result = run.result()
changer.join()

jobs = [s for s in result.spans if s.kind == "execute" and s.outcome == "ok"]
ran = np.bincount([s.step for s in jobs], minlength=steps) / 3  # three finished jobs a step
same = np.array_equal(result.state["learn.weights"], undisturbed.state["learn.weights"])
print(f"{steps} steps; final weights {'identical to' if same else 'DIFFERENT from'} the undisturbed run's")
print(f"steps without exactly three finished jobs: {int((ran != 1).sum())}; jobs taken back from b: "
      f"{sum(s.outcome == 'cancelled' for s in result.spans)}")
print(f"jobs per QPU: {dict(sorted((str(lane), sum(s.lane == lane for s in jobs)) for lane in {s.lane for s in jobs}))}")
print(f"wrote {draw_gantt(result.spans, args.png, 'elastic pool: b leaves, c and d join', marks)}")
if not same or (ran != 1).any():
    raise SystemExit("the elastic run differs from the undisturbed one")
