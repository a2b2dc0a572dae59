"""Issue 14 item 1: tasks never run as root unless configured. The framework names an unprivileged
``task_user`` in FrameworkInfo and CommandInfo, and the local agent switches to it (setuid/setgid,
sandbox handed over) as Mesos's ``--switch_user`` does. Real pymesos driver against the local agent."""

from __future__ import annotations

import os
import pwd
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from pymesos import MesosSchedulerDriver, Scheduler

from dl2_mesos.config import load_config
from dl2_mesos.framework.task_info import executor_info, framework_info
from dl2_mesos.localmesos import executor_process as launcher
from dl2_mesos.testing.localcluster import LocalCluster


def test_ops_framework_names_an_unprivileged_task_user(monkeypatch):
    cfg = load_config(env={})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert framework_info(cfg, None, "http://x/")["user"] == "nobody"
    assert executor_info(cfg, "j", "a", {})["command"]["user"] == "nobody"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    assert framework_info(cfg, None, "http://x/")["user"] == "alice"
    # root only when configured explicitly (task_user, or the older key "user")
    explicit = load_config(env={}, overrides={"task_user": "root"})
    assert executor_info(explicit, "j", "a", {})["command"]["user"] == "root"
    assert load_config(env={"DL2_TASK_USER": "svc"}).task_user == "svc"


def test_ops_non_root_agent_refuses_to_run_as_another_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    with pytest.raises(launcher.SwitchUserError, match="not run as root"):
        launcher.resolve_user("nobody")
    with pytest.raises(launcher.SwitchUserError, match="no such user"):
        launcher.resolve_user("no-such-user-dl2")


class OneShot(Scheduler):
    """Launches the queued command tasks into the first offer; records status updates."""

    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.tasks = tasks
        self.updates: dict[str, list[dict]] = {}
        self.cond = threading.Condition()

    def resourceOffers(self, driver, offers):  # noqa: N802, ANN001, ANN201
        for offer in offers:
            if self.tasks:
                for t in self.tasks:
                    t["agent_id"] = offer["agent_id"]
                driver.launchTasks([offer["id"]], self.tasks)
                self.tasks = []
            else:
                driver.declineOffer([offer["id"]])

    def statusUpdate(self, driver, status):  # noqa: N802, ANN001, ANN201
        with self.cond:
            self.updates.setdefault(status["task_id"]["value"], []).append(status)
            self.cond.notify_all()

    def final(self, task_id: str, timeout: float = 30) -> dict:
        terminal = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST"}
        with self.cond:
            assert self.cond.wait_for(lambda: any(u["state"] in terminal for u in self.updates.get(task_id, [])),
                                      timeout), self.updates
            return next(u for u in self.updates[task_id] if u["state"] in terminal)


def _task(task_id: str, shell: str, user: str | None = None) -> dict[str, Any]:
    cmd: dict[str, Any] = {"value": shell}
    if user:
        cmd["user"] = user
    return {"task_id": {"value": task_id}, "name": task_id, "command": cmd,
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 16}}]}


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root agent (as with Mesos)")
def test_ops_local_agent_switches_to_the_task_user():
    nobody = pwd.getpwnam("nobody")
    # the agent's work folder must be reachable by the task user, as with Mesos (pytest's tmp is 0700)
    work = Path(tempfile.mkdtemp(prefix="dl2-switch-user-"))
    work.chmod(0o755)
    try:
        with LocalCluster(agents=1, cpus=2, mem="1GiB", allocation_interval=0.2, heartbeat_interval=2.0,
                          work_dir=str(work), switch_user=True) as cluster:
            sched = OneShot([_task("as-nobody", "id -u > ids; id -g >> ids; id -G >> ids; touch mine"),
                             _task("as-root-by-command", "id -u > ids", user="root"),
                             _task("unknown-user", "true", user="no-such-user-dl2")])
            driver = MesosSchedulerDriver(sched, {"user": "nobody", "name": "switch-user-test"},
                                          cluster.master, use_addict=False)
            driver.start()
            try:
                assert sched.final("as-nobody")["state"] == "TASK_FINISHED"
                assert sched.final("as-root-by-command")["state"] == "TASK_FINISHED"
                failed = sched.final("unknown-user")
                assert failed["state"] == "TASK_FAILED" and "no such user" in failed.get("message", "")
            finally:
                driver.stop()
                driver.join()
            ids = {p.parent.parent.parent.name: p for p in work.rglob("ids")}
            assert ids["as-nobody"].read_text().split() == [str(nobody.pw_uid), str(nobody.pw_gid),
                                                            str(nobody.pw_gid)]
            sandbox = ids["as-nobody"].parent
            assert sandbox.stat().st_uid == nobody.pw_uid  # handed over, as Mesos chowns the sandbox
            assert (sandbox / "mine").stat().st_uid == nobody.pw_uid
            assert (sandbox / "stdout").stat().st_uid == nobody.pw_uid
            assert ids["as-root-by-command"].read_text().split() == ["0"]  # CommandInfo.user wins
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
