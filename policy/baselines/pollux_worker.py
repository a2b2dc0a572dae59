"""The optimiser process of the ``pollux`` baseline: adaptdl-sched's own ``PolluxPolicy``.

Runs under ``.venv-pollux`` (numpy 1.23, pymoo 0.5, adaptdl-sched 0.2.11; see
scripts/install_pollux_env.sh), started by :mod:`dl2_mesos.policy.baselines.pollux` as
``python -I pollux_worker.py``. It imports only the standard library, numpy and adaptdl_sched,
because dl2_mesos is not installed in that environment.

Protocol: one JSON object per line. The worker first writes ``{"ready": true, ...}``. Then, per
request line read from stdin, it writes exactly one answer line:

* ``{"op": "optimize", "jobs": [...], "nodes": [...], "base": {job: [node, ...]},
  "restart_penalty": x, "population": n, "generations": n, "seed": n}`` -> ``{"ok": true,
  "replicas": {job: [node, ...]}, "cpu_seconds": s}``. Each job is ``{"key", "resources",
  "speedup", "created", "max_replicas"}`` (``speedup[r]`` = speed-up at ``r`` replicas), each
  node ``{"key", "resources"}``.
* ``{"op": "reset"}`` -> ``{"ok": true}``: forget the optimiser's carried-over population (a
  new run starts).
* anything that fails -> ``{"ok": false, "error": "..."}``; the worker keeps serving.

It exits at the end of stdin. Anything the libraries print goes to stderr: stdout carries the
protocol only.

What is Pollux's and what is set here (Pollux, OSDI'21, section 4.2; adaptdl-sched's
``PolluxPolicy.optimize``):

* the genetic algorithm (NSGA-II over replica-to-node matrices, with Pollux's own crossover,
  mutation and repair), the objective (sum of speed-ups scaled by dominant share, with a
  multiplicative penalty on every job whose placement changes) and the warm start from the
  previous cycle's population are Pollux's, unchanged;
* its population (100) and generation count (100) are literals inside ``optimize``; to bound
  the per-slot cost on 500 nodes they are replaced by the requested values, by wrapping the
  ``NSGA2`` class and ``pymoo.optimize.minimize`` that ``optimize`` calls;
* its re-allocation penalty (0.1, a literal of ``Problem``) is replaced by the requested value
  (the caller derives it from the jobs' restart cost);
* cluster auto-scaling is off: the cluster is the set of Mesos agents, so the node template is
  a node with no resources (no replica can go there) and the utilisation band that would make
  Pollux prefer a smaller cluster is opened to [0, inf).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np


class TableSpeedup:
    """Pollux's ``speedup_fn(num_nodes, num_replicas)`` from a per-replica-count table."""

    def __init__(self, values) -> None:
        self._values = np.asarray(values, dtype=float)

    def __call__(self, num_nodes, num_replicas):
        r = np.minimum(np.asarray(num_replicas, dtype=int), len(self._values) - 1)
        out = self._values[r]
        if np.isscalar(num_nodes) and np.isscalar(num_replicas):
            return float(out)
        return out


class Worker:
    """Holds one long-lived ``PolluxPolicy`` (its population carries over between slots)."""

    def __init__(self) -> None:
        import pymoo.optimize
        from adaptdl_sched.policy import pollux
        from adaptdl_sched.policy.utils import JobInfo, NodeInfo

        self.pollux = pollux
        self.JobInfo = JobInfo
        self.NodeInfo = NodeInfo
        self.population = 100
        self.generations = 100
        self.restart_penalty = 0.1
        worker = self
        nsga2 = pollux.NSGA2
        minimize = pymoo.optimize.minimize
        problem_cls = pollux.Problem

        def bounded_nsga2(*args, **kwargs):
            kwargs["pop_size"] = worker.population
            return nsga2(*args, **kwargs)

        def bounded_minimize(problem, algorithm, termination=None, *args, **kwargs):
            return minimize(problem, algorithm, ("n_gen", worker.generations), *args, **kwargs)

        class PenalisedProblem(problem_cls):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs)
                self._restart_penalty = worker.restart_penalty

        pollux.NSGA2 = bounded_nsga2
        pymoo.optimize.minimize = bounded_minimize
        pollux.Problem = PenalisedProblem
        self.policy = self._new_policy()

    def _new_policy(self):
        policy = self.pollux.PolluxPolicy()
        policy._min_util = 0.0  # no auto-scaling: any utilisation keeps the whole cluster
        policy._max_util = float("inf")
        return policy

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "reset":
            self.policy = self._new_policy()
            return {"ok": True}
        if op == "optimize":
            return self.optimize(req)
        return {"ok": False, "error": f"unknown op {op!r}"}

    def optimize(self, req: dict) -> dict:
        self.population = int(req["population"])
        self.generations = int(req["generations"])
        self.restart_penalty = float(req["restart_penalty"])
        np.random.seed(int(req["seed"]) % (2**32))
        jobs = {}
        for j in req["jobs"]:
            jobs[j["key"]] = self.JobInfo(
                resources=dict(j["resources"]),
                speedup_fn=TableSpeedup(j["speedup"]),
                creation_timestamp=float(j["created"]),
                min_replicas=0,  # Pollux's own simulator and tests: no guaranteed replicas
                max_replicas=int(j["max_replicas"]),
            )
        nodes = {n["key"]: self.NodeInfo(dict(n["resources"]), preemptible=False) for n in req["nodes"]}
        if not jobs or not nodes:
            return {"ok": True, "replicas": {}, "cpu_seconds": 0.0}
        keys = set().union(*(n["resources"] for n in req["nodes"]), *(j["resources"] for j in req["jobs"]))
        template = self.NodeInfo({k: 0 for k in keys}, preemptible=True)
        base = {k: [n for n in v if n in nodes] for k, v in req.get("base", {}).items() if k in jobs}
        t0 = time.process_time()
        replicas, _desired = self.policy.optimize(jobs, nodes, base, template)
        cpu = time.process_time() - t0
        return {"ok": True, "replicas": {k: list(v) for k, v in replicas.items()}, "cpu_seconds": cpu}


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # libraries that print (pymoo's compile hint) write to stderr from now on
    sys.stdout = sys.stderr

    def send(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        worker = Worker()
    except Exception as exc:  # missing or broken environment: say so, then stop
        send({"ready": False, "error": f"cannot load adaptdl_sched's PolluxPolicy: {exc!r}"})
        return 3
    send({"ready": True, "numpy": np.__version__, "python": sys.version.split()[0]})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("a request must be a JSON object")
            ans = worker.handle(req)
        except Exception as exc:
            traceback.print_exc()
            ans = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        send(ans)
    return 0


if __name__ == "__main__":
    sys.exit(main())
