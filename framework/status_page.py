"""The framework's status page (the ``webui_url`` the Mesos UI links to), rendered on the server.

Everything is plain HTML with a little CSS; "over time" is drawn as inline SVG (sparklines,
step lines, stacked bars), so the page needs no JavaScript. Its only input is the loop's
published view (``jobs``, ``cluster``, ``policy``, ``history``; see
:mod:`dl2_mesos.framework.views` and :mod:`dl2_mesos.framework.history`), so rendering never
touches live scheduler state. Every text that a user or an agent controls (job names, ids,
messages, hostnames, reasons) goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from urllib.parse import quote

from dl2_mesos.framework.history import RESCALE_PHASES
from dl2_mesos.framework.human_time import duration

MAX_FINISHED_JOBS = 50
MAX_RESCALE_ROWS = 30
MAX_DECISION_ROWS = 25
PHASE_COLOURS = {"stop": "#d9534f", "save": "#f0ad4e", "upload": "#f0ad4e", "wait_checkpoint": "#c9a0dc",
                 "download": "#5bc0de", "relaunch": "#337ab7", "first_batch": "#5cb85c"}
RESOURCE_UNITS = {"cpus": "cpus", "gpus": "gpus", "mem": "MiB"}

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#263238;color:#fff;padding:10px 20px}header h1{margin:0;font-size:20px;display:inline}
header .meta{margin-left:16px;color:#cfd8dc;font-size:13px}header a{color:#80cbc4}
main{padding:8px 20px 24px}section{background:#fff;border:1px solid #dde1e6;border-radius:6px;
padding:10px 14px;margin:12px 0}h2{font-size:16px;margin:2px 0 8px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:4px 8px;text-align:left;
border-bottom:1px solid #eceff1;vertical-align:middle}th{background:#eceff1;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#78909c}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;color:#fff;background:#90a4ae}
.b-running{background:#43a047}.b-rescaling{background:#fb8c00}.b-pending{background:#1e88e5}
.b-finished{background:#546e7a}.b-failed{background:#e53935}.b-cancelled{background:#8d6e63}
.bar{display:inline-block;width:140px;height:10px;background:#eceff1;border-radius:5px;overflow:hidden;
vertical-align:middle;margin-right:6px}.bar span{display:block;height:100%;background:#43a047}
.grid{display:flex;flex-wrap:wrap;gap:10px 28px}.kv b{font-weight:600}.legend span{margin-right:12px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:middle}
svg{vertical-align:middle}code{white-space:nowrap}.why-row td{border-top:0;padding-top:0}.why{color:#1565c0}footer{padding:0 20px 16px;font-size:12px;color:#78909c}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any, fmt: str = "{:.2f}", missing: str = "–") -> str:
    """A finite number formatted, else ``missing`` (view values are never trusted to be numbers)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return missing
    return _e(fmt.format(x))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _clock(ts: Any) -> str:
    if not isinstance(ts, (int, float)) or ts <= 0:
        return "–"
    return time.strftime("%H:%M:%S", time.localtime(ts))


TIME_HEADERS = ("<th>submitted</th><th>started</th><th>finished</th><th class=n>queue wait</th>"
                "<th class=n>JCT</th>")


def _secs(x: Any) -> str:
    return _e(duration(float(x))) if isinstance(x, (int, float)) and math.isfinite(x) else "–"


def times_cells(j: dict[str, Any]) -> str:
    """Submitted, started and finished clock times, queue wait and JCT of a job's view."""
    return (f"<td>{_clock(j.get('submitted_at'))}</td><td>{_clock(j.get('started_at'))}</td>"
            f"<td>{_clock(j.get('finished_at'))}</td><td class=n>{_secs(j.get('queue_wait_seconds'))}</td>"
            f"<td class=n>{_secs(j.get('jct_seconds'))}</td>")


def _pct(part: float, whole: float) -> float:
    return 0.0 if whole <= 0 else max(0.0, min(100.0, 100.0 * part / whole))


def _bar(fraction_pct: float, colour: str = "#43a047") -> str:
    return f'<span class="bar"><span style="width:{fraction_pct:.1f}%;background:{colour}"></span></span>'


# -- SVG -----------------------------------------------------------------------------------
def sparkline(series: Sequence[tuple[Any, ...]], *, width: int = 180, height: int = 32,
              ymax: float | None = None, step: bool = False, title: str = "") -> str:
    """Inline SVG with one polyline per ``(values, colour)`` or ``(values, colour, dashed)``; None
    values are skipped.

    All series share the x axis (index) and the y range ``[0, ymax]`` (default: their maximum).
    ``step`` draws step lines (for counts such as PS/workers).
    """
    n = max((len(s[0]) for s in series), default=0)
    finite = [y for s in series for y in s[0] if isinstance(y, (int, float)) and math.isfinite(y)]
    # auto range: 10% headroom so a flat series does not hug the frame
    top = ymax if ymax is not None else 1.1 * max(finite, default=0.0)
    top = top if top > 0 else 1.0
    pad = 2
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    if title:
        out.append(f"<title>{_e(title)}</title>")
    out.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fafbfc" stroke="#eceff1"/>')
    if n == 0 or not finite:
        out.append(f'<text x="4" y="{height // 2 + 4}" font-size="10" fill="#90a4ae">no data yet</text></svg>')
        return "".join(out)
    dx = (width - 2 * pad) / max(1, n - 1)
    for values, colour, *rest in series:
        dash = ' stroke-dasharray="4 3"' if rest and rest[0] else ""
        pts: list[str] = []
        prev_y: float | None = None
        for i, y in enumerate(values):
            if not isinstance(y, (int, float)) or not math.isfinite(y):
                continue
            px = pad + i * dx
            py = height - pad - (height - 2 * pad) * min(1.0, max(0.0, y / top))
            if step and prev_y is not None:
                pts.append(f"{px:.1f},{prev_y:.1f}")
            pts.append(f"{px:.1f},{py:.1f}")
            prev_y = py
        if len(pts) == 1:  # a single point: a short tick so it is visible
            x, y = pts[0].split(",")
            pts.append(f"{float(x) + 3:.1f},{y}")
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6"{dash} points="{" ".join(pts)}"/>')
    out.append("</svg>")
    return "".join(out)


def stacked_bar(parts: Iterable[tuple[str, float]], scale: float, *, width: int = 220, height: int = 12) -> str:
    """Inline SVG: one horizontal bar of ``parts`` (name, seconds), ``scale`` seconds = full width."""
    out = [f'<svg width="{width}" height="{height}" role="img">',
           f'<rect width="{width}" height="{height}" fill="#eceff1"/>']
    x = 0.0
    for name, seconds in parts:
        w = 0.0 if scale <= 0 else width * max(0.0, seconds) / scale
        colour = PHASE_COLOURS.get(name, "#90a4ae")
        out.append(f'<rect x="{x:.1f}" width="{w:.1f}" height="{height}" fill="{colour}">'
                   f"<title>{_e(name)} {seconds:.2f}s</title></rect>")
        x += w
    out.append("</svg>")
    return "".join(out)


# -- sections ------------------------------------------------------------------------------
def _job_series(slots: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float | None]]]:
    """Per job: PS, workers and epochs per recorded slot (None where the job was not active)."""
    out: dict[str, dict[str, list[float | None]]] = {}
    for i, rec in enumerate(slots):
        for jid, j in (rec.get("jobs") or {}).items():
            s = out.setdefault(jid, {"ps": [None] * len(slots), "workers": [None] * len(slots)})
            s["ps"][i] = j.get("ps")
            s["workers"][i] = j.get("workers")
    # keep only the stretch where the job existed, so short jobs do not become a dot at the edge
    for s in out.values():
        idx = [i for i, v in enumerate(s["workers"]) if v is not None]
        lo, hi = idx[0], idx[-1] + 1
        s["ps"], s["workers"] = s["ps"][lo:hi], s["workers"][lo:hi]
    return out


def _jobs_section(jobs: dict[str, dict[str, Any]], slots: Sequence[dict[str, Any]]) -> str:
    active = sorted((j for j in jobs.values() if j.get("phase") not in ("finished", "failed", "cancelled")),
                    key=lambda j: j.get("submitted_at", 0))
    ended = sorted((j for j in jobs.values() if j.get("phase") in ("finished", "failed", "cancelled")),
                   key=lambda j: -(j.get("submitted_at") or 0))
    hidden = max(0, len(ended) - MAX_FINISHED_JOBS)
    series = _job_series(slots)
    rows = []
    for j in active + ended[:MAX_FINISHED_JOBS]:
        jid = str(j.get("id", ""))
        phase = str(j.get("phase", "?"))
        progress = j.get("progress")
        prog = float(progress) if isinstance(progress, (int, float)) else 0.0
        s = series.get(jid)
        if s:
            ymax = max([v for v in s["workers"] + s["ps"] if isinstance(v, (int, float))] + [1])
            spark = sparkline([(s["workers"], "#1e88e5"), (s["ps"], "#fb8c00", True)], step=True, ymax=ymax, width=120,
                              title=f"{jid}: workers (blue) and PS (orange) per slot, max {ymax}")
            spark += f' <span class="muted">max {_e(ymax)}</span>'
        else:
            spark = '<span class="muted">–</span>'
        name = j.get("name") or ""
        why = j.get("pending_reason") if phase == "pending" else None
        # a pending job's reason gets a full-width line under its row (a narrow column hid it)
        why_row = (f"<tr class='why-row'><td></td><td colspan='14'><span class='why' title='{_e(why.get('code', ''))}'>"
                   f"why pending: {_e(why.get('message', ''))}</span></td></tr>") if isinstance(why, dict) else ""
        rows.append(
            f"<tr><td><a href='/jobs/{_e(quote(jid, safe=''))}'><code>{_e(jid)}</code></a>"
            f"{'<br><span class=muted>' + _e(name) + '</span>' if name and name != jid else ''}</td>"
            f"<td>{_e(j.get('job_type', ''))}</td>"
            f'<td><span class="badge b-{_e(phase)}">{_e(phase)}</span></td>'
            f"<td>{_bar(100.0 * prog)}{_num(j.get('epochs_done'))} / {_num(j.get('epochs'), '{:g}')}"
            f' <span class="muted">({_num(100.0 * prog, "{:.0f}")}%)</span></td>'
            f"<td class=n>{_num(j.get('num_ps'), '{:d}')}</td><td class=n>{_num(j.get('num_workers'), '{:d}')}</td>"
            f'<td style="white-space:nowrap">{spark}</td>'
            f"<td class=n>{_num(j.get('rescales'), '{:d}')}</td>"
            f"<td class=n>{_num(j.get('measured_epochs_per_second'), '{:.3f}')}</td>"
            + times_cells(j)
            + f'<td class="muted">{_e(j.get("message", ""))}</td></tr>{why_row}'
        )
    body = "".join(rows) or '<tr><td colspan="15" class="muted">no jobs yet</td></tr>'
    more = f'<p class="muted">{hidden} older ended jobs not shown (see /api/v1/jobs)</p>' if hidden else ""
    return (
        f'<section id="jobs"><h2>Jobs ({len(jobs)})</h2>'
        '<p class="legend muted"><span><i class="sw" style="background:#1e88e5"></i>workers</span>'
        '<span><i class="sw" style="background:#fb8c00"></i>parameter servers (dashed)</span> per slot</p>'
        "<div style='overflow-x:auto'><table><tr><th>job</th><th>type</th><th>state</th><th>progress (epochs)</th><th class=n>PS</th>"
        "<th class=n>workers</th><th>PS / workers over time</th><th class=n>rescales</th>"
        f"<th class=n>epochs/s</th>{TIME_HEADERS}<th>message</th></tr>{body}</table></div>{more}</section>"
    )


def _capacity_note(cap: dict[str, Any]) -> str:
    source = cap.get("source")
    if source == "master":
        note = (f"capacity: {len(cap.get('agents') or [])} agents in the master's agent list "
                f"(<code>{_e(cap.get('master', ''))}/master/slaves</code>, read {_clock(cap.get('master_read_at'))})")
    elif source == "offers":
        note = ("capacity estimated from the agents seen in offers (what each offered at most plus dl2's tasks "
                "there): a lower bound until the master's agent list is read")
    else:
        note = "no agent known yet"
    if cap.get("master_error"):
        note += f"; the master could not be asked: {_e(cap['master_error'])}"
    return note


def _utilisation_section(cluster: dict[str, Any], slots: Sequence[dict[str, Any]]) -> str:
    agents = cluster.get("agents") or []
    cap = cluster.get("capacity") or {}
    if slots:
        util = slots[-1].get("utilisation") or {}
        alloc, known = util.get("allocated") or {}, util.get("known") or {}
        when = f"at the decision of slot {_e(slots[-1].get('slot'))}"
    else:  # no decision yet: what the agents table shows now
        alloc = {k: sum(float((a.get("used_by_dl2") or {}).get(k, 0)) for a in agents) for k in RESOURCE_UNITS}
        known = {k: alloc[k] + sum(float((a.get("offered") or {}).get(k, 0)) for a in agents) for k in RESOURCE_UNITS}
        when = "now (no slot decided yet)"
    total = cap.get("total") if cap.get("agents") else None
    used_all = cap.get("used_all_frameworks")
    colours = {"cpus": "#1e88e5", "gpus": "#8e24aa", "mem": "#00897b"}
    cells = []
    for k, unit in RESOURCE_UNITS.items():
        a, offered_known = float(alloc.get(k, 0) or 0), float(known.get(k, 0) or 0)
        t = max(float(total.get(k, 0) or 0), offered_known) if total else offered_known
        others = max(0.0, float(used_all.get(k, 0) or 0) - a) if used_all else None
        hist = []
        for r in slots:
            u = r.get("utilisation") or {}
            whole = (u.get("capacity") or u.get("known") or {}).get(k, 0)
            hist.append(_pct(float((u.get("allocated") or {}).get(k, 0)), float(whole or 0)))
        extra = f", {_num(others, '{:g}')} used by other frameworks" if others is not None else ""
        cells.append(
            f'<div class="kv"><b>{k}</b> {_bar(_pct(a, t), colours[k])}{_num(a, "{:g}")} of {_num(t, "{:g}")} {unit}'
            f' <span class="muted">({_num(_pct(a, t), "{:.0f}")}% allocated by dl2{extra}, '
            f'{_num(max(0.0, offered_known - a), "{:g}")} offered free)</span>'
            f"<br>{sparkline([(hist, colours[k])], width=260, height=36, ymax=100.0, title=f'{k} allocated / capacity, % per slot')}"
            f' <span class="muted">% over {len(hist)} slots</span></div>'
        )
    totals = {x.get("agent_id"): x for x in cap.get("agents") or [] if isinstance(x, dict)}
    rows_by_id = {a.get("agent_id"): a for a in agents}
    rows = []
    for aid in sorted(set(totals) | set(rows_by_id), key=str):
        row = rows_by_id.get(aid) or {"agent_id": aid, "hostname": (totals.get(aid) or {}).get("hostname", "")}
        tot = (totals.get(aid) or {}).get("total") or {}
        rows.append(
            f"<tr><td>{_e(row.get('hostname', ''))}<br><span class=muted>{_e(aid)}</span></td>"
            + "".join(f"<td class=n>{_num(tot.get(k), '{:g}')}</td>" for k in RESOURCE_UNITS)
            + "".join(f"<td class=n>{_num((row.get('used_by_dl2') or {}).get(k, 0 if aid in totals else None), '{:g}')}</td>"
                      for k in RESOURCE_UNITS)
            + "".join(f"<td class=n>{_num((row.get('offered') or {}).get(k), '{:g}')}</td>" for k in RESOURCE_UNITS)
            + f"<td class=n>{len(row.get('tasks') or [])}</td></tr>")
    body = "".join(rows) or '<tr><td colspan="11" class="muted">no agent known (no offers held and no tasks running)</td></tr>'
    lost = cap.get("lost_agents") or []
    lost_p = ("<p class='muted'>agents lost: " + ", ".join(
        f"{_e(x.get('hostname') or x.get('agent_id'))} at {_clock(x.get('at'))}"
        + (f" ({_e(', '.join(x.get('jobs') or []))} hit)" if x.get("jobs") else "") for x in lost) + "</p>") if lost else ""
    return (
        f'<section id="utilisation"><h2>Cluster utilisation</h2><p class="muted">allocated by dl2 vs. the '
        f"cluster's capacity, {when}; {_capacity_note(cap)}</p><div class='grid'>{''.join(cells)}</div>"
        "<h3 style='font-size:14px;margin:10px 0 4px'>Agents now</h3>"
        "<table><tr><th>agent</th><th class=n>cpus</th><th class=n>gpus</th><th class=n>mem</th>"
        "<th class=n>cpus used by dl2</th><th class=n>gpus used by dl2</th><th class=n>mem used by dl2</th>"
        "<th class=n>cpus offered</th><th class=n>gpus offered</th><th class=n>mem offered</th>"
        f"<th class=n>tasks</th></tr>{body}</table>{lost_p}</section>"
    )


def _policy_section(policy: dict[str, Any], cluster: dict[str, Any], slots: Sequence[dict[str, Any]]) -> str:
    name = policy.get("name") or cluster.get("policy") or "?"
    version = policy.get("model_version")
    online = policy.get("online_learning")
    rewards = [r for r in (policy.get("recent_rewards") or []) if isinstance(r, (int, float))]
    if not rewards:
        rewards = [r["reward"] for r in slots if isinstance(r.get("reward"), (int, float))]
    rollbacks = policy.get("rollbacks") or []
    last_rb = rollbacks[-1] if rollbacks else None
    items = [
        f"<div class='kv'><b>policy</b> <code id='policy-name'>{_e(name)}</code></div>",
        f"<div class='kv'><b>model version</b> {_e(version) if version is not None else '<span class=muted>n/a</span>'}"
        + (f" <span class='muted'>(kept: {_e(', '.join(str(v) for v in policy.get('history') or []))})</span>"
           if policy.get("history") else "") + "</div>",
        f"<div class='kv'><b>online learning</b> {'on' if online else 'off'}"
        + ("" if policy.get("learnable", version is not None) else " <span class='muted'>(not learnable)</span>")
        + (f" <span class='muted'>(imitating <code>{_e(policy['online_teacher'])}</code>"
           + (" on simulated futures of the workload" if policy.get("online_twin") else "") + ")</span>"
           if online and policy.get("online_teacher") else " <span class='muted'>(reinforcement)</span>" if online else "")
        + "</div>",
        f"<div class='kv'><b>baseline reward</b> {_num(policy.get('baseline_reward'), '{:.4f}')}</div>",
        f"<div class='kv'><b>rollbacks</b> {len(rollbacks)}"
        + (f" <span class='muted'>(last {_e(last_rb.get('from'))} → {_e(last_rb.get('to'))}: "
           f"{_e(last_rb.get('reason', ''))})</span>" if isinstance(last_rb, dict) else "") + "</div>",
    ]
    recent = ", ".join(_num(r, "{:.4f}") for r in rewards[-8:]) or "none yet"
    return (
        f'<section id="policy"><h2>Policy</h2><div class="grid">{"".join(items)}</div>'
        f"<p>recent rewards (epochs trained / total epochs, summed per slot): "
        f"{sparkline([(rewards, '#6d4c41')], width=260, height=36, title='reward per slot')} "
        f'<span class="muted">{recent}</span></p>{_rollbacks(policy, rollbacks)}</section>'
    )


def _rollbacks(policy: dict[str, Any], rollbacks: Sequence[Any]) -> str:
    """Each rollback with what triggered it, and what it means for the cluster."""
    if not policy.get("learnable", policy.get("model_version") is not None):
        return ""
    window, margin = policy.get("window"), policy.get("rollback_margin")
    rule = (f"the mean reward of the last {_e(window if window is not None else 'N')} slots fell below "
            f"{_num(100 * (1 - margin), '{:.0f}') if isinstance(margin, (int, float)) else '(1 - margin) x'}% of "
            "what the starting model achieved over its first slots")
    meaning = (
        "<p class='muted' id='rollback-explained'><b>Rollbacks</b> happen when " + rule + ": the online-updated "
        "model is then replaced by the version before it, and the jobs keep running (only the next decisions "
        "change). One now and then is not bad in itself: the reward also falls when the job mix changes (fewer "
        "jobs, longer jobs, a full cluster), not only when the model got worse, and the rollback guards against "
        "the latter. Many in a row mean the online updates do not help on this workload: keep the shipped model "
        "(<code>--no-online-learning</code>) and look at the reward curve above.</p>")
    if not rollbacks:
        return meaning.replace("<p class='muted' id='rollback-explained'>",
                               "<p class='muted' id='rollback-explained'>No rollback so far. ", 1)
    rows = []
    for rb in list(rollbacks)[::-1]:
        if not isinstance(rb, dict):
            continue
        when = rb.get("at") or rb.get("time")
        rows.append(f"<tr><td>{_clock(when) if when else '–'}</td><td class=n>{_e(rb.get('slot', '–'))}</td>"
                    f"<td>{_e(rb.get('from'))} → {_e(rb.get('to'))}</td><td>{_e(rb.get('reason', ''))}</td></tr>")
    return (meaning + "<table id='rollbacks'><tr><th>time</th><th class=n>slot</th><th>model version</th>"
            f"<th>what triggered it</th></tr>{''.join(rows)}</table>")


def _decisions_section(slots: Sequence[dict[str, Any]]) -> str:
    lat = [r.get("policy_seconds") for r in slots]
    lat_ms = [1000.0 * x if isinstance(x, (int, float)) else None for x in lat]
    rows = []
    for r in fold_unchanged(list(slots)[::-1])[:MAX_DECISION_ROWS]:
        if isinstance(r, list):  # consecutive slots that changed nothing: one row
            first, last = r[-1], r[0]
            ms = [1000.0 * x["policy_seconds"] for x in r if isinstance(x.get("policy_seconds"), (int, float))]
            rewards = [x["reward"] for x in r if isinstance(x.get("reward"), (int, float))]
            rows.append(
                f"<tr class='folded'><td class=n>{_e(first.get('slot'))}–{_e(last.get('slot'))}</td>"
                f"<td>{_clock(first.get('at'))}–{_clock(last.get('at'))}</td>"
                f"<td class=n>{_num(max(ms) if ms else None, '{:.1f}')} max</td><td class=n>–</td>"
                f"<td class=n>{_num(sum(rewards) / len(rewards) if rewards else None, '{:.4f}')} avg</td>"
                f"<td class=n>{len(last.get('jobs') or {})}</td>"
                f'<td><span class="muted">no change in {len(r)} slots</span></td></tr>')
            continue
        changes = r.get("changes") or []
        ch = "<br>".join(
            f"<code>{_e(c.get('job_id'))}</code> {_e(_counts(c.get('from')))} → {_e(_counts(c.get('to')))}"
            for c in changes) or '<span class="muted">no change</span>'
        rows.append(
            f"<tr><td class=n>{_e(r.get('slot'))}</td><td>{_clock(r.get('at'))}</td>"
            f"<td class=n>{_num(1000.0 * r['policy_seconds'] if isinstance(r.get('policy_seconds'), (int, float)) else None, '{:.1f}')}</td>"
            f"<td class=n>{_num(1000.0 * r['round_seconds'] if isinstance(r.get('round_seconds'), (int, float)) else None, '{:.1f}')}</td>"
            f"<td class=n>{_num(r.get('reward'), '{:.4f}')}</td><td class=n>{len(r.get('jobs') or {})}</td><td>{ch}</td></tr>"
        )
    body = "".join(rows) or '<tr><td colspan="7" class="muted">no slot decided yet</td></tr>'
    return (
        f'<section id="decisions"><h2>Recent decisions</h2><p>policy latency per slot (ms): '
        f"{sparkline([(lat_ms, '#3949ab')], width=260, height=36, title='decision latency (ms) per slot')} "
        f'<span class="muted">max {_num(max([x for x in lat_ms if x is not None], default=None), "{:.1f}")} ms '
        f"over {len(slots)} slots</span></p>"
        "<table><tr><th class=n>slot</th><th>time</th><th class=n>policy ms</th><th class=n>round ms</th>"
        f"<th class=n>reward</th><th class=n>jobs</th><th>allocation changes (PS/workers)</th></tr>{body}</table></section>"
    )


def fold_unchanged(slots: Sequence[dict[str, Any]]) -> list[Any]:
    """Slot records in order, with every run of two or more consecutive records that changed no
    allocation replaced by one list of them."""
    out: list[Any] = []
    run: list[dict[str, Any]] = []
    for r in slots:
        if not r.get("changes"):
            run.append(r)
            continue
        out.extend([run] if len(run) > 1 else run)
        run = []
        out.append(r)
    out.extend([run] if len(run) > 1 else run)
    return out


def _counts(pair: Any) -> str:
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return f"{pair[0]} PS / {pair[1]} w"
    return "?"


def _rescales_section(rescales: Sequence[dict[str, Any]]) -> str:
    recent = list(rescales)[-MAX_RESCALE_ROWS:][::-1]
    shown = [p for p in RESCALE_PHASES if any(p in (r.get("phases") or {}) for r in recent)] or list(RESCALE_PHASES)
    scale = max([float((r.get("phases") or {}).get("total", 0) or 0) for r in recent] + [0.0])
    rows = []
    for r in recent:
        ph = r.get("phases") or {}
        parts = [(p, float(ph[p])) for p in RESCALE_PHASES if p not in ("total", "save") and p in ph]
        ok = r.get("ok")
        rows.append(
            f"<tr><td>{_clock(r.get('at'))}</td><td><code>{_e(r.get('job_id'))}</code></td>"
            f"<td class=n>{_e(r.get('generation'))}</td><td class=muted>{_e(r.get('executor_id'))}</td>"
            f"<td>{'ok' if ok else '<b style=color:#e53935>failed</b> ' + _e(r.get('reason', ''))}</td>"
            + "".join(f"<td class=n>{_num(ph.get(p))}</td>" for p in shown)
            + f"<td>{stacked_bar(parts, scale)}</td></tr>"
        )
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{_e(p)}</span>'
                     for p, c in PHASE_COLOURS.items() if p != "save" and p in shown)
    body = "".join(rows) or f'<tr><td colspan="{6 + len(shown)}" class="muted">no rescale yet</td></tr>'
    return (
        f'<section id="rescales"><h2>Rescale events ({len(rescales)})</h2>'
        '<p class="muted">measured by the executors (seconds); <i>total</i> excludes <i>save</i>, '
        f"which overlaps <i>stop</i></p><p class='legend'>{legend}</p>"
        "<table><tr><th>time</th><th>job</th><th class=n>gen</th><th>executor</th><th>result</th>"
        + "".join(f"<th class=n>{_e(p)}</th>" for p in shown)
        + f"<th>phases</th></tr>{body}</table></section>"
    )


# -- pages ---------------------------------------------------------------------------------
def render_status_page(view: dict[str, Any], health: dict[str, Any] | None = None, *, refresh_seconds: int = 5) -> str:
    """The leader's status page from a published view (``history`` may be missing: empty charts)."""
    health = health or {}
    cluster = view.get("cluster") or {}
    jobs = view.get("jobs") or {}
    policy = view.get("policy") or {}
    history = view.get("history") or {}
    slots = history.get("slots") or []
    rescales = history.get("rescales") or []
    phases = cluster.get("jobs_by_phase") or {}
    summary = ", ".join(f"{n} {_e(p)}" for p, n in phases.items() if n) or "no jobs"
    refresh = f"<meta http-equiv='refresh' content='{int(refresh_seconds)}'>" if refresh_seconds > 0 else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'>{refresh}<title>dl2 framework</title>"
        f"<style>{_CSS}</style></head><body><header><h1>dl2 framework</h1><span class='meta'>"
        f"{_e(health.get('role', 'leader'))} · framework {_e(cluster.get('framework_id') or '–')} · "
        f"{'registered' if cluster.get('registered') else 'not registered'}"
        f"{' · suspended' if cluster.get('suspended') else ''} · slot {_e(cluster.get('slot', '–'))} "
        f"({_num(cluster.get('slot_seconds'), '{:g}')} s) · policy {_e(cluster.get('policy') or policy.get('name') or '?')}"
        f" · {_agents_summary(cluster)} · {summary} · "
        "<a href='/docs'>API</a> · <a href='/api/v1/history'>history JSON</a> · <a href='/metrics'>metrics</a>"
        "</span></header><main>"
        + _jobs_section(jobs, slots)
        + _utilisation_section(cluster, slots)
        + _policy_section(policy, cluster, slots)
        + _decisions_section(slots)
        + _rescales_section(rescales)
        + f"</main><footer>rendered {time.strftime('%Y-%m-%d %H:%M:%S')}; "
        f"{'refreshes every ' + str(int(refresh_seconds)) + ' s; ' if refresh_seconds > 0 else ''}"
        f"history keeps the last {_e(history.get('max_slots', '–'))} slots</footer></body></html>"
    )


def _agents_summary(cluster: dict[str, Any]) -> str:
    cap = cluster.get("capacity") or {}
    known = cap.get("agents") or []
    if not known:
        return f"{_plural(len(cluster.get('agents') or []), 'agent')} held now"
    total = cap.get("total") or {}
    return (f"{_plural(len(known), 'agent')} ({_num(total.get('cpus'), '{:g}')} cpus, "
            f"{_num(total.get('gpus'), '{:g}')} gpus{', from the master' if cap.get('source') == 'master' else ''})")


def render_standby_page(leader_url: str | None) -> str:
    """What a standby replica shows: a link to the leader."""
    if leader_url and leader_url.startswith(("http://", "https://")):
        link = f'<a href="{_e(leader_url)}">{_e(leader_url)}</a>'
    else:  # never turn anything else (javascript:, data:) into a link
        link = _e(leader_url) if leader_url else "unknown"
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>dl2 (standby)</title>"
            f"<style>{_CSS}</style></head><body><header><h1>dl2 standby replica</h1></header>"
            f"<main><section><p>Leader: {link}</p></section></main></body></html>")
