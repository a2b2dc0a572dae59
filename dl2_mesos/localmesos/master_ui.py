"""The local master's web UI: the Mesos UI's main views, rendered on the server (no scripts).

``/`` shows the cluster's resources, the frameworks, the agents and the tasks (live, then the most
recent completed ones), each task linked to its sandbox. ``/ui/sandbox?agent=ID&path=DIR`` lists a
sandbox folder or shows the end of a file in it; it reads through the same confinement as the
agent's ``/files`` API (nothing outside that agent's sandboxes). Each task also links the agent's
own ``/files/browse`` (what Mesos tools call).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .agent import Agent
from .master import Master
from .sandbox_files import MAX_READ_BYTES, FileRequestError, browse_entries, confined_path, read_chunk
from .state import Task
from .state_json import metrics_json

COMPLETED_TASKS_SHOWN = 100

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#2b3a55;color:#fff;padding:10px 18px}header h1{font-size:18px;margin:0}
header .muted{color:#c9d2e3}main{padding:12px 18px}h2{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e3e6ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}.muted{color:#777}.num{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;gap:10px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #e3e6ea;padding:8px 12px;min-width:150px}
.card b{font-size:18px}
.bar{height:6px;background:#e3e6ea;margin-top:4px}.bar i{display:block;height:6px;background:#3c7dd9}
.st-TASK_RUNNING{color:#1a7f37}.st-TASK_FAILED,.st-TASK_LOST,.st-TASK_ERROR{color:#c62828}
pre{background:#fff;border:1px solid #e3e6ea;padding:8px;white-space:pre-wrap;font-size:12px}
"""


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _time(ts: float | None) -> str:
    if not ts:
        return ""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _res(summary: dict[str, Any]) -> str:
    return f"{summary.get('cpus', 0):g} cpus, {summary.get('mem', 0):g} MiB, {summary.get('gpus', 0):g} gpus"


def sandbox_directory(agents: Mapping[str, Agent], task: Task) -> str | None:
    """The sandbox folder of ``task``'s executor on its (running) agent, if that agent still has it."""
    agent = agents.get(task.agent_id)
    fw = agent.frameworks.get(task.framework_id) if agent is not None else None
    if fw is None:
        return None
    executor_id = task.executor_id or task.task_id  # a command task runs as its own executor
    found = None
    for ex in list(fw.executors.values()) + list(fw.completed_executors):
        if ex.executor_id == executor_id:
            found = ex
            if ex.find(task.task_id) is not None:
                break
    return str(found.directory) if found is not None else None


def _sandbox_links(agents: Mapping[str, Agent], task: Task) -> str:
    directory = sandbox_directory(agents, task)
    if directory is None:
        return "<span class=muted>gone</span>"
    agent = agents[task.agent_id]

    def ui(path: str, label: str) -> str:
        return (
            f"<a href='/ui/sandbox?{escape(urlencode({'agent': task.agent_id, 'path': path}))}'>{label}</a>"
        )

    raw = f"http://{agent.endpoint}/files/browse?{urlencode({'path': directory})}"
    return (
        f"{ui(directory, 'sandbox')} · {ui(directory + '/stdout', 'stdout')} · "
        f"{ui(directory + '/stderr', 'stderr')} · <a class=muted href='{escape(raw)}'>files API</a>"
    )


def render_master_page(master: Master, agents: Mapping[str, Agent]) -> str:
    """``GET /``: resources, frameworks, agents and tasks of the cluster."""
    m = metrics_json(master)
    cards = []
    for name, unit in (("cpus", ""), ("mem", " MiB"), ("gpus", ""), ("disk", " MiB")):
        used, total = m[f"master/{name}_used"], m[f"master/{name}_total"]
        pct = 100 * used / total if total else 0
        cards.append(
            f"<div class=card>{name}<br><b>{used:g}</b> of {total:g}{unit}"
            f"<div class=bar><i style='width:{pct:.0f}%'></i></div></div>"
        )
    cards.append(f"<div class=card>tasks running<br><b>{m['master/tasks_running']:g}</b></div>")
    cards.append(f"<div class=card>outstanding offers<br><b>{m['master/outstanding_offers']:g}</b></div>")

    fw_rows = []
    names: dict[str, str] = {}
    for fw, active in [(f, True) for f in master.frameworks.values()] + [
        (f, False) for f in master.completed_frameworks
    ]:
        names[fw.id] = fw.info.get("name") or ""
        state = ("active" if fw.connected else "disconnected") if active else "completed"
        if active and fw.suppressed:
            state += " (offers suppressed)"
        fw_rows.append(
            f"<tr><td>{escape(fw.id)}</td><td>{escape(names[fw.id])}</td><td>{escape(fw.role)}</td>"
            f"<td>{escape(state)}</td><td class=num>{len(fw.tasks)}</td>"
            f"<td class=num>{len(fw.completed_tasks)}</td>"
            f"<td>{_time(fw.registered_time)}</td>"
            f"<td>{escape(str(fw.info.get('webui_url') or ''))}</td></tr>"
        )

    used_by_agent = master.allocator.used_by_agent()
    agent_rows = []
    for rec in master.agents.values():
        agent_used = used_by_agent.get(rec.agent_id)
        agent_rows.append(
            f"<tr><td>{escape(rec.agent_id)}</td><td>{escape(rec.hostname)}:{rec.agent.port}</td>"
            f"<td>{_res(rec.total.summary())}</td><td>{_res(agent_used.summary()) if agent_used else '-'}</td>"
            f"<td>{escape(', '.join(f'{k}={v}' for k, v in rec.agent.config.attributes))}</td>"
            f"<td>{_time(rec.registered_time)}</td></tr>"
        )

    task_rows = []
    live = [t for fw in master.frameworks.values() for t in fw.tasks.values()]
    done = [
        t
        for fw in list(master.frameworks.values()) + list(master.completed_frameworks)
        for t in fw.completed_tasks
    ][-COMPLETED_TASKS_SHOWN:]
    for t in live + list(reversed(done)):
        task_agent = master.agents.get(t.agent_id)
        task_rows.append(
            f"<tr><td>{escape(t.task_id)}</td><td>{escape(t.name)}</td>"
            f"<td class='st-{escape(t.state)}'>{escape(t.state)}</td>"
            f"<td>{escape(names.get(t.framework_id, t.framework_id))}</td>"
            f"<td>{escape(task_agent.hostname if task_agent else t.agent_id)}</td><td>{_res(t.resources.summary())}</td>"
            f"<td>{_sandbox_links(agents, t)}</td></tr>"
        )

    info = master.master_info()
    body = (
        f"<header><h1>Mesos (local stand-in) master {escape(info['hostname'])}:{info['port']}</h1>"
        f"<span class=muted>id {escape(master.id)} · version {escape(info['version'])} · started "
        f"{_time(master.start_time)} · <a style='color:#c9d2e3' href='/master/state'>/master/state</a> · "
        f"<a style='color:#c9d2e3' href='/metrics/snapshot'>/metrics/snapshot</a></span></header><main>"
        f"<h2>Resources</h2><div class=cards>{''.join(cards)}</div>"
        f"<h2>Frameworks ({len(master.frameworks)} active, {len(master.completed_frameworks)} completed)</h2>"
        "<table><tr><th>ID</th><th>Name</th><th>Role</th><th>State</th><th class=num>Tasks</th>"
        "<th class=num>Completed</th><th>Registered</th><th>Web UI</th></tr>"
        f"{''.join(fw_rows) or '<tr><td colspan=8 class=muted>none</td></tr>'}</table>"
        f"<h2>Agents ({len(master.agents)})</h2>"
        "<table><tr><th>ID</th><th>Host</th><th>Resources</th><th>Used</th><th>Attributes</th>"
        "<th>Registered</th></tr>"
        f"{''.join(agent_rows) or '<tr><td colspan=6 class=muted>none</td></tr>'}</table>"
        f"<h2>Tasks ({len(live)} live, {len(done)} recent completed)</h2>"
        "<table><tr><th>ID</th><th>Name</th><th>State</th><th>Framework</th><th>Agent</th><th>Resources</th>"
        f"<th>Sandbox</th></tr>{''.join(task_rows) or '<tr><td colspan=7 class=muted>none</td></tr>'}</table>"
        "</main>"
    )
    return _page("Mesos master (local)", body)


def render_file_page(agents: Mapping[str, Agent], agent_id: str, raw_path: str | None) -> tuple[int, str]:
    """``GET /ui/sandbox``: (status, HTML) listing a sandbox folder or showing a file's end."""
    agent = agents.get(agent_id)
    if agent is None:
        return 404, _page(
            "Not found", f"<main><p>No agent {escape(agent_id)}.</p><a href='/'>back</a></main>"
        )
    try:
        path = confined_path(agent.sandbox_root(), raw_path)
        shown = raw_path or ""
        if path.is_dir():
            rows = []
            for e in browse_entries(path, shown):
                link = f"/ui/sandbox?{urlencode({'agent': agent_id, 'path': e['path']})}"
                rows.append(
                    f"<tr><td>{escape(e['mode'])}</td><td><a href='{escape(link)}'>"
                    f"{escape(Path(e['path']).name)}</a></td><td class=num>{e['size']}</td>"
                    f"<td>{_time(e['mtime'])}</td></tr>"
                )
            content = (
                "<table><tr><th>Mode</th><th>Name</th><th class=num>Bytes</th><th>Modified</th></tr>"
                f"{''.join(rows)}</table>"
            )
        else:
            size = read_chunk(path, -1, None)["offset"]
            start = max(0, size - MAX_READ_BYTES)
            chunk = read_chunk(path, start, MAX_READ_BYTES)["data"]
            note = f"last {size - start} of {size} bytes" if start else f"{size} bytes"
            text = chunk.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            content = f"<p class=muted>{note}</p><pre>{escape(text)}</pre>"
    except FileRequestError as exc:
        return exc.status, _page("Sandbox", f"<main><p>{escape(exc.reason)}</p><a href='/'>back</a></main>")
    parent = f"/ui/sandbox?{urlencode({'agent': agent_id, 'path': str(Path(shown).parent)})}"
    body = (
        f"<header><h1>Sandbox on {escape(agent.hostname)} ({escape(agent_id)})</h1>"
        f"<span class=muted>{escape(shown)}</span></header><main>"
        f"<p><a href='/'>master</a> · <a href='{escape(parent)}'>up</a></p>{content}</main>"
    )
    return 200, _page("Sandbox", body)
