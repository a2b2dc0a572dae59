"""``python -m dl2_mesos.executor``: the command in the framework's ExecutorInfo."""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys

from pymesos import MesosExecutorDriver

from dl2_mesos.executor.mesos_executor import DriverSink, Event, ExecutorLoop, QueueingExecutor, default_config


def main() -> int:
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
