"""``python -m dl2_mesos.executor``: the command in the framework's ExecutorInfo."""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import sys

from pymesos import MesosExecutorDriver

from dl2_mesos.executor.mesos_executor import DriverSink, Event, ExecutorLoop, QueueingExecutor, default_config


_DESCRIPTION = """The dl2-mesos executor. A Mesos agent starts it (the command in the framework's
ExecutorInfo) with the executor environment Mesos sets: MESOS_AGENT_ENDPOINT, MESOS_FRAMEWORK_ID,
MESOS_EXECUTOR_ID, MESOS_SANDBOX, ... It runs the job's MXNet/PyTorch processes under the job
interpreter (DL2_JOB_PYTHON) and reports progress to the framework."""
_EPILOG = """settings (environment): DL2_JOB_PYTHON, DL2_NODE_HOST, DL2_KILL_GRACE_S, DL2_MAX_RESTARTS,
DL2_RESTORE_WAIT_S, DL2_USAGE_INTERVAL_S, DL2_EXECUTOR_WORKDIR, DL2_LOG_LEVEL"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dl2_mesos.executor", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    if "MESOS_AGENT_ENDPOINT" not in os.environ:
        print("dl2_mesos.executor: MESOS_AGENT_ENDPOINT is not set; a Mesos agent starts this executor "
              "(see --help)", file=sys.stderr)
        return 2
    logging.basicConfig(level=os.environ.get("DL2_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    events: queue.Queue[Event] = queue.Queue()
    driver = MesosExecutorDriver(QueueingExecutor(events), use_addict=False)
    loop = ExecutorLoop(events, DriverSink(driver), default_config())
    # SIGTERM from the agent: shut down cleanly (job processes get their own SIGTERM/grace/SIGKILL)
    signal.signal(signal.SIGTERM, lambda *_: events.put(Event("shutdown")))
    driver.start()
    try:
        loop.run()
    finally:
        loop.shutdown()
        driver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
