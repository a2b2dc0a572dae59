"""One job's page (``/jobs/<id>``): its times, why it waits, its tasks with their agents and logs,
its progress curve and its rescale history.

Rendered on the server from the loop's published view (the job's public record, the cluster
section and the bounded history), like the status page, and without JavaScript. Every text a user
or an agent controls goes through :func:`html.escape`; ids in links are URL-quoted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from dl2_mesos.framework.status_page import (
    _CSS, TIME_HEADERS, _bar, _clock, _counts, _e, _num, sparkline, stacked_bar, times_cells,
)
from dl2_mesos.framework.history import RESCALE_PHASES

LOG_STREAMS = ("stdout", "stderr")


def _q(x: Any) -> str:
    return _e(quote(str(x), safe=""))


def _progress_series(job_id: str, slots: Sequence[dict[str, Any]]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """Per recorded slot while the job existed: slot number, epochs done, workers, PS."""
    out: tuple[list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [])
    for rec in slots:
        j = (rec.get("jobs") or {}).get(job_id)
        if not isinstance(j, dict):
            continue
        out[0].append(rec.get("slot"))
        out[1].append(j.get("epochs_done"))
        out[2].append(j.get("workers"))
        out[3].append(j.get("ps"))
    return out


def _tasks_table(job: dict[str, Any]) -> str:
    jid = job.get("id", "")
    rows = []
    for t in job.get("tasks") or []:
        tid = t.get("task_id", "")
        logs = " ".join(f"<a href='/jobs/{_q(jid)}/tasks/{_q(tid)}/{s}'>{s}</a>" for s in LOG_STREAMS)
        rows.append(
            f"<tr><td><code>{_e(tid)}</code></td><td>{_e(t.get('role'))} {_e(t.get('rank'))}</td>"
            f"<td>{_e(t.get('hostname'))}<br><span class=muted>{_e(t.get('agent_id'))}</span></td>"
            f"<td>{_e(t.get('state'))}{' (being stopped)' if t.get('killing') else ''}</td>"
            f"<td>{_e(', '.join(str(p) for p in t.get('ports') or []))}</td><td>{logs}</td></tr>")
    body = "".join(rows) or "<tr><td colspan=6 class=muted>no task now (ended tasks' logs: <code>dl2 logs</code>)</td></tr>"
    return ("<section id='tasks'><h2>Tasks</h2><p class='muted'>logs are read from each task's Mesos sandbox "
            "through its agent's files API (the last 64 KiB)</p><table><tr><th>task</th><th>role</th><th>agent</th>"
            f"<th>state</th><th>ports</th><th>logs</th></tr>{body}</table></section>")


def _rescales(job_id: str, slots: Sequence[dict[str, Any]], rescales: Sequence[dict[str, Any]]) -> str:
    changes = [(rec, c) for rec in slots for c in rec.get("changes") or [] if c.get("job_id") == job_id]
    rows = [f"<tr><td class=n>{_e(rec.get('slot'))}</td><td>{_clock(rec.get('at'))}</td>"
            f"<td>{_e(_counts(c.get('from')))} → {_e(_counts(c.get('to')))}</td></tr>" for rec, c in changes[::-1]]
    mine = [r for r in rescales if r.get("job_id") == job_id][::-1]
    scale = max([float((r.get("phases") or {}).get("total", 0) or 0) for r in mine] + [0.0])
    reports = []
    for r in mine:
        ph = r.get("phases") or {}
        parts = [(p, float(ph[p])) for p in RESCALE_PHASES if p not in ("total", "save") and p in ph]
        reports.append(
            f"<tr><td>{_clock(r.get('at'))}</td><td class=n>{_e(r.get('generation'))}</td>"
            f"<td class=muted>{_e(r.get('executor_id'))}</td>"
            f"<td>{'ok' if r.get('ok') else '<b style=color:#e53935>failed</b> ' + _e(r.get('reason', ''))}</td>"
            f"<td class=n>{_num(ph.get('total'))}</td><td>{stacked_bar(parts, scale)}</td></tr>")
    return (
        "<section id='rescales'><h2>Rescale history</h2><h3 style='font-size:14px'>Allocation changes by slot</h3>"
        "<table><tr><th class=n>slot</th><th>time</th><th>PS / workers</th></tr>"
        + ("".join(rows) or "<tr><td colspan=3 class=muted>no change in the recorded slots</td></tr>")
        + "</table><h3 style='font-size:14px'>Executors' rescale reports (seconds)</h3><table><tr><th>time</th>"
        "<th class=n>gen</th><th>executor</th><th>result</th><th class=n>total</th><th>phases</th></tr>"
        + ("".join(reports) or "<tr><td colspan=6 class=muted>no rescale report</td></tr>")
        + "</table></section>")


def render_job_page(job: dict[str, Any], view: dict[str, Any], *, refresh_seconds: int = 5) -> str:
    """The page of one job (its public view with times and ``pending_reason``)."""
    history = view.get("history") or {}
    slots = history.get("slots") or []
    jid = str(job.get("id", ""))
    phase = str(job.get("phase", "?"))
    given = job.get("progress")
    prog = float(given) if isinstance(given, (int, float)) else 0.0
    why = job.get("pending_reason")
    why_html = (f"<section id='pending-reason'><h2>Why it is pending</h2><p><b>{_e(why.get('code', ''))}</b>: "
                f"{_e(why.get('message', ''))}</p></section>") if isinstance(why, dict) else ""
    slot_nos, epochs, workers, ps = _progress_series(jid, slots)
    top = max([v for v in workers + ps if isinstance(v, (int, float))] + [1])
    done = [e for e in epochs if isinstance(e, (int, float))]
    span = (f"{_num(done[0] if done else None)} → {_num(done[-1] if done else None)} of "
            f"{_num(job.get('epochs'), '{:g}')} epochs over slots {_e(slot_nos[0])}–{_e(slot_nos[-1])}"
            if slot_nos else "no slot recorded yet")
    spec = job.get("spec") or {}
    refresh = f"<meta http-equiv='refresh' content='{int(refresh_seconds)}'>" if refresh_seconds > 0 else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'>{refresh}<title>dl2 job {_e(jid)}</title>"
        f"<style>{_CSS}</style></head><body><header><h1>job {_e(jid)}</h1><span class='meta'>"
        f"<a href='/'>status page</a> · <a href='/api/v1/jobs/{_q(jid)}'>JSON</a></span></header><main>"
        f"<section id='summary'><h2>Summary</h2><div class='grid'>"
        f"<div class='kv'><b>type</b> {_e(job.get('job_type'))}</div>"
        f"<div class='kv'><b>state</b> <span class='badge b-{_e(phase)}'>{_e(phase)}</span></div>"
        f"<div class='kv'><b>progress</b> {_bar(100.0 * float(prog))}{_num(job.get('epochs_done'))} / "
        f"{_num(job.get('epochs'), '{:g}')} epochs</div>"
        f"<div class='kv'><b>PS / workers</b> {_num(job.get('num_ps'), '{:d}')} / {_num(job.get('num_workers'), '{:d}')}"
        f" <span class='muted'>(min {_e(spec.get('min_ps', '–'))}/{_e(spec.get('min_workers', '–'))}, max "
        f"{_e(spec.get('max_ps', '–'))}/{_e(spec.get('max_workers', '–'))})</span></div>"
        f"<div class='kv'><b>rescales</b> {_e(job.get('rescales'))}, <b>restarts</b> {_e(job.get('restart_count'))}</div>"
        f"<div class='kv'><b>epochs/s</b> {_num(job.get('measured_epochs_per_second'), '{:.3f}')}</div>"
        "</div><table style='margin-top:8px'><tr>" + TIME_HEADERS + "</tr><tr>" + times_cells(job) + "</tr></table>"
        + (f"<p class='muted'>last message: {_e(job['message'])}</p>" if job.get("message") else "") + "</section>"
        + why_html
        + "<section id='progress'><h2>Progress</h2><p>epochs done per slot: "
        + sparkline([(epochs, "#43a047")], width=420, height=60, ymax=float(job.get("epochs") or 0) or None,
                    title=f"{jid}: epochs done per slot")
        + f" <span class='muted'>{span}</span></p><p>workers (blue) and PS (orange, dashed) per slot: "
        + sparkline([(workers, "#1e88e5"), (ps, "#fb8c00", True)], width=420, height=60, ymax=1.2 * top, step=True,
                    title=f"{jid}: workers and PS per slot")
        + f" <span class='muted'>max {_e(top)}</span></p></section>"
        + _tasks_table(job)
        + _rescales(jid, slots, history.get("rescales") or [])
        + f"</main><footer>rendered {time.strftime('%Y-%m-%d %H:%M:%S')}</footer></body></html>"
    )


def render_missing_job(job_id: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>no such job</title><style>{_CSS}"
            f"</style></head><body><header><h1>no job {_e(job_id[:80])}</h1></header><main><section>"
            "<p><a href='/'>status page</a></p></section></main></body></html>")
