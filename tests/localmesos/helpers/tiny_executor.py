"""A tiny custom Mesos executor for the localmesos tests, driven by the REAL pymesos executor driver.

Each task's ``data`` is base64 JSON: {"run_seconds": s} finishes the task after s seconds with
``final_state`` (default TASK_FINISHED); without it the task runs until killed. With
{"report": true} it sends the scheduler a framework message with its environment; {"exit_code": n} makes the
executor process exit with n right after TASK_RUNNING. Framework
messages are echoed back as ``echo:<data>``.
"""

import json
import os
import threading
import time

from pymesos import Executor, MesosExecutorDriver, decode_data, encode_data

ENV_KEYS = (
    "MESOS_AGENT_ENDPOINT",
    "MESOS_FRAMEWORK_ID",
    "MESOS_EXECUTOR_ID",
    "MESOS_DIRECTORY",
    "MESOS_SANDBOX",
    "MESOS_SLAVE_ID",
    "MESOS_AGENT_ID",
    "MESOS_CHECKPOINT",
    "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD",
    "MESOS_HTTP_COMMAND_EXECUTOR",
    "MESOS_LOCAL",
    "CUDA_VISIBLE_DEVICES",
    "TINY_EXTRA",
)


def update(driver, task_id, state, message=""):
    driver.sendStatusUpdate({"task_id": task_id, "state": state, "message": message})


class TinyExecutor(Executor):
    def launchTask(self, driver, task):
        spec = json.loads(decode_data(task["data"])) if task.get("data") else {}
        task_id = task["task_id"]

        def run():
            update(driver, task_id, "TASK_RUNNING")
            if spec.get("report"):
                env = {k: os.environ.get(k) for k in ENV_KEYS}
                env["pid"] = os.getpid()
                env["pgid"] = os.getpgid(0)
                env["cwd"] = os.getcwd()
                env["task_id"] = task_id["value"]
                driver.sendFrameworkMessage(encode_data(json.dumps(env).encode()))
            if "exit_code" in spec:  # the executor dies with its task still running
                time.sleep(0.2)
                os._exit(spec["exit_code"])
            if "run_seconds" in spec:
                time.sleep(spec["run_seconds"])
                update(driver, task_id, spec.get("final_state", "TASK_FINISHED"), "done")

        threading.Thread(target=run, daemon=True).start()

    def killTask(self, driver, task_id):
        update(driver, task_id, "TASK_KILLED", "killed by request")

    def frameworkMessage(self, driver, message):
        driver.sendFrameworkMessage(encode_data(b"echo:" + decode_data(message)))


if __name__ == "__main__":
    print("tiny executor starting", flush=True)
    MesosExecutorDriver(TinyExecutor(), use_addict=False).run()
    print("tiny executor exiting", flush=True)
