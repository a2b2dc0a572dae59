"""Build the Mesos ``FrameworkInfo``, ``ExecutorInfo`` and ``TaskInfo`` dicts (v1 JSON)."""

from __future__ import annotations

from typing import Any

from dl2_mesos.config import Config, default_task_user
from dl2_mesos.messages import LaunchSpec, encode_b64
from dl2_mesos.framework.offer_book import scalar, task_resources
from dl2_mesos.framework.records import TaskRecord


def framework_info(cfg: Config, framework_id: str | None, webui_url: str) -> dict[str, Any]:
    """FrameworkInfo: GPU and partition-aware capabilities, checkpointing, our failover timeout."""
    info: dict[str, Any] = {
        "user": task_user(cfg),
        "name": cfg.framework_name,
        "role": cfg.role,
        "failover_timeout": float(cfg.failover_timeout),
        "checkpoint": True,
        "webui_url": webui_url,
        "capabilities": [{"type": "GPU_RESOURCES"}, {"type": "PARTITION_AWARE"}],
    }
    if cfg.principal:
        info["principal"] = cfg.principal
    if framework_id:
        info["id"] = {"value": framework_id}
    return info


def task_user(cfg: Config) -> str:
    """The user executors and tasks run as (FrameworkInfo.user and CommandInfo.user): ``task_user``, else
    the invoking user, or ``nobody`` when that is root. Root only when configured explicitly."""
    return cfg.task_user or default_task_user()


def executor_id_for(job_id: str, agent_id: str) -> str:
    """One executor per job per agent (every task of the job on that agent shares it)."""
    return f"dl2-{job_id}@{agent_id}"


def executor_info(cfg: Config, job_id: str, agent_id: str, meta: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """ExecutorInfo running ``executor_command``; identical for every task of a job on an agent
    (Mesos requires that), so it depends only on config, job and agent."""
    info: dict[str, Any] = {
        "type": "CUSTOM",
        "executor_id": {"value": executor_id_for(job_id, agent_id)},
        "name": f"dl2 executor for {job_id}",
        "command": {"value": cfg.executor_command, "shell": True, "user": task_user(cfg)},
    }
    res = []
    if cfg.executor_cpus > 0:
        res.append(scalar("cpus", cfg.executor_cpus, meta.get("cpus", {})))
    if cfg.executor_mem > 0:
        res.append(scalar("mem", cfg.executor_mem, meta.get("mem", {})))
    if res:
        info["resources"] = res
    return info


def task_info(cfg: Config, task: TaskRecord, spec: LaunchSpec, meta: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """TaskInfo for one PS/worker task, its LaunchSpec in ``data``."""
    return {
        "name": f"{task.job_id} {task.role} {task.rank}",
        "task_id": {"value": task.task_id},
        "agent_id": {"value": task.agent_id},
        "resources": task_resources(task.resources, task.ports, meta),
        "executor": executor_info(cfg, task.job_id, task.agent_id, meta),
        "data": encode_b64(spec),
        "kill_policy": {"grace_period": {"nanoseconds": int(cfg.kill_grace * 1e9)}},
        "labels": {"labels": [
            {"key": "dl2.job", "value": task.job_id},
            {"key": "dl2.role", "value": task.role},
            {"key": "dl2.generation", "value": str(task.generation)},
        ]},
    }
