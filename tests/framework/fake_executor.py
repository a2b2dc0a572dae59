"""A minimal Mesos executor for the framework's end-to-end tests (real pymesos, real processes).

It does what the project's executor does at the protocol level, without training anything:
TASK_RUNNING on launch; each worker "trains" at ``FAKE_EPS`` epochs/s per worker of its
generation, saving progress to ``<checkpoint_uri>/progress`` (so later generations resume),
sends ``ProgressReport`` messages, and ends TASK_FINISHED when the job's epochs are done; PS
tasks run until killed. A ``RescaleRequest`` is answered with a ``RescaleReport``.

Run by an agent as ``<python> tests/framework/fake_executor.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

from pymesos import Executor, MesosExecutorDriver

from dl2_mesos.messages import (
    LaunchSpec, ProgressReport, RescaleReport, RescaleRequest, decode_b64, encode_b64,
)

logger = logging.getLogger("fake_executor")


def _progress_file(spec: LaunchSpec) -> Path:
    root = spec.checkpoint_uri.removeprefix("file://")
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root) / "progress"


def _read(p: Path) -> float:
    try:
        return float(p.read_text() or 0)
    except (OSError, ValueError):
        return 0.0


class FakeExecutor(Executor):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: dict[str, dict] = {}
        self.driver = None

    def launchTask(self, driver, task):  # noqa: N802
        spec = decode_b64(task["data"])
        assert isinstance(spec, LaunchSpec)
        tid = spec.task_id
        env = dict(spec.env)
        stop = threading.Event()
        with self.lock:
            self.tasks[tid] = {"spec": spec, "cluster": spec.cluster, "rank": spec.rank, "stop": stop,
                               "eps": float(env.get("FAKE_EPS", "1.0"))}
        driver.sendStatusUpdate({"task_id": {"value": tid}, "state": "TASK_RUNNING"})
        if spec.role == "worker":
            threading.Thread(target=self._train, args=(driver, tid), daemon=True).start()

    def _train(self, driver, tid: str) -> None:
        t = self.tasks[tid]
        spec: LaunchSpec = t["spec"]
        path = _progress_file(spec)
        epoch = _read(path)
        last = time.monotonic()
        while not t["stop"].wait(0.3):
            now = time.monotonic()
            cluster = t["cluster"]
            epoch = max(epoch, _read(path)) + t["eps"] * len(cluster.workers) * (now - last)
            last = now
            epoch = min(epoch, spec.epochs)
            if t["rank"] == 0:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(str(epoch))
                os.replace(tmp, path)
                msg = ProgressReport(spec.job_id, tid, cluster.generation, epoch, int(epoch * 100),
                                     samples_per_second=100.0, timestamp=time.time())
                driver.sendFrameworkMessage(encode_b64(msg))
            if epoch >= spec.epochs:
                with self.lock:
                    self.tasks.pop(tid, None)
                driver.sendStatusUpdate({"task_id": {"value": tid}, "state": "TASK_FINISHED",
                                         "message": "training done"})
                self._maybe_exit(driver)
                return

    def frameworkMessage(self, driver, message):  # noqa: N802
        msg = decode_b64(message)
        if isinstance(msg, RescaleRequest):
            first = None
            with self.lock:
                for task_id, _role, rank in msg.assignments:
                    if task_id in self.tasks:
                        self.tasks[task_id]["cluster"] = msg.cluster
                        self.tasks[task_id]["rank"] = rank
                        first = first or task_id
            rep = RescaleReport(msg.job_id, first or "", msg.cluster.generation, True, (("restart", 0.0),))
            driver.sendFrameworkMessage(encode_b64(rep))

    def killTask(self, driver, taskId):  # noqa: N802
        tid = taskId["value"]
        with self.lock:
            t = self.tasks.pop(tid, None)
        if t is not None:
            t["stop"].set()
        driver.sendStatusUpdate({"task_id": {"value": tid}, "state": "TASK_KILLED"})
        self._maybe_exit(driver)

    def _maybe_exit(self, driver) -> None:
        def later():
            time.sleep(1.0)
            with self.lock:
                empty = not self.tasks
            if empty:
                driver.stop()
        threading.Thread(target=later, daemon=True).start()

    def shutdown(self, driver):
        with self.lock:
            for t in self.tasks.values():
                t["stop"].set()


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    driver = MesosExecutorDriver(FakeExecutor(), use_addict=False)
    driver.run()


if __name__ == "__main__":
    sys.exit(main())
