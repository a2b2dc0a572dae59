"""``dl2 submit | jobs | job | cancel``: clients of the framework's HTTP API (requests).

The bearer token comes from ``--token-file``, ``$DL2_API_TOKEN`` (``$DL2_TOKEN`` is an alias) or
``--token`` (visible in ``ps``: a warning says so). A standby replica answers 307 naming the leader;
the client follows a redirect only to a replica of the same cluster (the ``--api`` URLs given, or
the leader the configured replica itself reports in ``/health``), and never sends the token anywhere
else.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

import click

from dl2_mesos.cli_params import FINITE_FLOAT
from dl2_mesos.config import read_secret_file
from dl2_mesos.errors import ConfigError
from dl2_mesos.framework.records import valid_job_id

_api = click.option("--api", envvar="DL2_API", default="http://127.0.0.1:8080", show_default=True,
                    help="Framework API URL; several replicas comma-separated (env DL2_API).")
_token = click.option("--token", envvar=["DL2_API_TOKEN", "DL2_TOKEN"], default="",
                      help="Bearer token (env DL2_API_TOKEN, alias DL2_TOKEN). Prefer the env or --token-file: "
                           "a flag is visible to every user in ps.")
_token_file = click.option("--token-file", type=click.Path(dir_okay=False), default=None,
                           help="Read the bearer token from this file (first line).")
_json = click.option("--json", "as_json", is_flag=True, help="Print the raw JSON answer.")
MAX_REDIRECTS = 3


def _origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL, with the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "http").lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def _job_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A JOB_ID argument: refused here unless it can be a job id, so that it never reaches the URL
    or a sandbox path as anything else (``../``, ``?``, ``/``)."""
    if not valid_job_id(value):
        raise click.BadParameter(
            f"{value!r} is not a job id (lower-case letters, digits, '.', '_' and '-', as `dl2 jobs` lists them)"
        )
    return value


def resolve_token(token: str, token_file: str | None) -> str:
    """The token to send: from ``token_file`` when given, else ``token`` (flag or environment; the
    ``--token`` help says that a flag is visible in ``ps``: the output stays parseable, so no warning)."""
    if token_file:
        try:
            return read_secret_file(token_file)
        except ConfigError as exc:
            raise click.ClickException(f"token file: {exc}") from None
    return token


class ClusterRedirects:
    """Which redirect targets belong to the cluster: the configured replicas, plus the leader that a
    configured replica reports (``/health``), asked only when a redirect points elsewhere."""

    def __init__(self, apis: list[str]) -> None:
        self.apis = apis
        self.allowed = {_origin(a) for a in apis}
        self._asked = False

    def check(self, location: str, came_from: str) -> str:
        """The absolute target of a redirect, or a ClickException when it leaves the cluster."""
        import requests
        from urllib.parse import urljoin

        target = urljoin(came_from, location)
        origin = _origin(target)
        if origin[0] not in ("http", "https") or (_origin(came_from)[0] == "https" and origin[0] != "https"):
            raise click.ClickException(f"refusing to follow a redirect to {target}: scheme not allowed")
        if origin not in self.allowed and not self._asked:
            self._asked = True
            for api in self.apis:
                try:
                    leader = requests.get(api.rstrip("/") + "/health", timeout=10).json().get("leader")
                except (requests.RequestException, ValueError, AttributeError):
                    continue
                if isinstance(leader, str) and leader:
                    self.allowed.add(_origin(leader))
        if origin not in self.allowed:
            raise click.ClickException(
                f"refusing to follow a redirect to {target}: not a replica of this cluster "
                f"(configured: {', '.join(self.apis)}); the token was not sent there")
        return target


class ApiError(click.ClickException):
    """The API refused a call: ``status`` and its JSON answer (``error`` is the message)."""

    def __init__(self, status: int, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.body = body


def _call(method: str, api: str, path: str, token: str = "", body: Any = None) -> Any:
    import requests

    apis = [a.strip().rstrip("/") for a in api.split(",") if a.strip()] or ["http://127.0.0.1:8080"]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    redirects = ClusterRedirects(apis)
    url = apis[0] + path
    try:
        for _ in range(MAX_REDIRECTS + 1):
            r = requests.request(method, url, json=body, headers=headers, timeout=30, allow_redirects=False)
            # a standby replica answers 307 naming the leader; follow it ourselves (requests would drop
            # the token on another host), but only to a replica of this cluster
            if r.status_code in (301, 302, 303, 307, 308) and "location" in r.headers:
                url = redirects.check(r.headers["location"], url)
                continue
            break
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach the framework at {api}: {exc}") from None
    if r.status_code in (301, 302, 303, 307, 308):
        raise click.ClickException(f"too many redirects (last to {r.headers.get('location')})")
    try:
        data = r.json()
    except ValueError:
        data = {"error": r.text[:500]}
    if r.status_code >= 400:
        msg = data.get("error", r.reason) if isinstance(data, dict) else r.reason
        raise ApiError(r.status_code, msg, data if isinstance(data, dict) else {})
    return data


@click.command("submit")
@click.argument("spec_file", type=click.File("r"), required=False)
@click.option("--type", "job_type", default=None, help="Job type, e.g. resnet-50.")
@click.option("--epochs", type=FINITE_FLOAT, default=None)
@click.option("--name", default=None)
@click.option("--max-ps", type=int, default=None)
@click.option("--max-workers", type=int, default=None)
@_api
@_token
@_token_file
@_json
def submit(spec_file: Any, job_type: str | None, epochs: float | None, name: str | None, max_ps: int | None,
           max_workers: int | None, api: str, token: str, token_file: str | None, as_json: bool) -> None:
    """Submit a job from SPEC_FILE (JSON) or from --type/--epochs."""
    token = resolve_token(token, token_file)
    if spec_file is not None:
        try:
            spec = json.load(spec_file)
        except ValueError as exc:
            raise click.ClickException(f"{spec_file.name}: not valid JSON: {exc}") from None
    elif job_type and epochs is not None:
        spec = {"job_type": job_type, "epochs": epochs}
    else:
        raise click.UsageError("give a job spec file or --type and --epochs")
    for k, v in (("name", name), ("max_ps", max_ps), ("max_workers", max_workers)):
        if v is not None:
            spec[k] = v
    job = _call("POST", api, "/api/v1/jobs", token, spec)
    click.echo(json.dumps(job, indent=2) if as_json else job["id"])


@click.command("jobs")
@click.option("--phase", default=None, help="Only jobs in this phase.")
@_api
@_token
@_token_file
@_json
def jobs(phase: str | None, api: str, token: str, token_file: str | None, as_json: bool) -> None:
    """List jobs."""
    token = resolve_token(token, token_file)
    data: dict[str, Any] = {"jobs": []}
    cursor = None
    while True:  # the API answers a page at a time; next_cursor names the next one
        query = "&".join(q for q in (f"phase={phase}" if phase else "", f"cursor={cursor}" if cursor else "") if q)
        page = _call("GET", api, "/api/v1/jobs" + (f"?{query}" if query else ""), token)
        data["jobs"] += page["jobs"]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    from dl2_mesos.framework.human_time import clock, duration, jct, queue_wait

    now = time.time()
    click.echo(f"{'ID':<32} {'TYPE':<14} {'PHASE':<10} {'EPOCHS':>11} {'PS':>3} {'W':>3} "
               f"{'SUBMITTED':>16} {'AGE':>7} {'WAIT':>7} {'JCT':>7}  REASON")
    for j in data["jobs"]:
        ep = f"{j['epochs_done']:.1f}/{j['epochs']:g}"
        submitted = j.get("submitted_at")
        age = duration(now - submitted) if submitted else "-"
        click.echo(f"{j['id']:<32} {j['job_type']:<14} {j['phase']:<10} {ep:>11} {j['num_ps']:>3} "
                   f"{j['num_workers']:>3} {clock(submitted, now):>16} {age:>7} {duration(queue_wait(j, now)):>7} "
                   f"{duration(jct(j)):>7}  {_reason(j)}".rstrip())


def _reason(job: dict[str, Any]) -> str:
    """The short reason a pending job waits ("-" for a pending job without one; "" otherwise)."""
    if job.get("phase") != "pending":
        return ""
    why = job.get("pending_reason")
    text = str(why.get("short") or why.get("code") or "-") if isinstance(why, dict) else "-"
    # a reason may quote an agent's status message: no terminal control sequences reach the screen
    return "".join(c if c.isprintable() else "?" for c in text)


@click.command("job")
@click.argument("job_id", callback=_job_id)
@_api
@_token
@_token_file
def job(job_id: str, api: str, token: str, token_file: str | None) -> None:
    """Show one job (JSON)."""
    click.echo(json.dumps(_call("GET", api, f"/api/v1/jobs/{job_id}", resolve_token(token, token_file)), indent=2))


@click.command("cancel")
@click.argument("job_id", callback=_job_id)
@_api
@_token
@_token_file
def cancel(job_id: str, api: str, token: str, token_file: str | None) -> None:
    """Cancel a job (a job that already ended is left as it is, and the exit status is 1)."""
    token = resolve_token(token, token_file)
    try:
        data = _call("DELETE", api, f"/api/v1/jobs/{job_id}", token)
    except ApiError as exc:
        if exc.status == 409:  # the API's answer for a job that already ended
            raise click.ClickException(f"{job_id} already {exc.body.get('phase', 'ended')}: "
                                       "nothing to cancel") from None
        raise
    click.echo(f"{data['id']}: {data['phase']}")


@click.command("logs")
@click.argument("job_id", callback=_job_id)
@click.option("--task", "task", default=None,
              help="Task id, or role-rank such as worker-0 or ps-1 "
                   "(default: the live worker of lowest rank).")
@click.option("--stream", type=click.Choice(["stdout", "stderr", "process"]), default="stdout",
              show_default=True,
              help="The executor's stdout or stderr in the task's sandbox, or the task's own training "
                   "process log (dl2-jobs/JOB/ROLE-RANK.log there).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing what is appended until the task ends.")
@click.option("--master", envvar="DL2_MASTER", default="127.0.0.1:5050", show_default=True,
              help="Mesos master's HTTP address (env DL2_MASTER); agents are found through it.")
@_api
def logs(job_id: str, task: str | None, stream: str, follow: bool, master: str, api: str) -> None:
    """Print a job task's logs from its Mesos sandbox (the agents' /files API, as the Mesos UI reads it)."""
    import sys

    import requests

    from dl2_mesos.framework.sandbox_logs import LogsError, MesosFiles, pick_task, stream_file

    framework_id = None
    for base in (a.strip().rstrip("/") for a in api.split(",") if a.strip()):
        try:  # which framework's tasks to look at; without the API, any framework's tasks of JOB_ID
            framework_id = requests.get(base + "/health", timeout=5).json().get("framework_id")
            break
        except (requests.RequestException, ValueError, AttributeError):
            continue
    try:
        files = MesosFiles(master)
        state = files.master_state()
        chosen = pick_task(files.job_tasks(job_id, framework_id, state), task, job_id)
        sandbox = files.sandbox(chosen, state)
        path = chosen.process_log(job_id) if stream == "process" else stream
        click.echo(f"==> task {chosen.task_id} ({chosen.state}) on {sandbox.agent_url}: "
                   f"{sandbox.directory}/{path}", err=True)

        def task_ended() -> bool:
            now = files.job_tasks(job_id, framework_id)
            return all(t.ended for t in now if t.task_id == chosen.task_id)

        out = sys.stdout.buffer
        for chunk in stream_file(files, sandbox, path, follow=follow, task_ended=task_ended):
            out.write(chunk)
            out.flush()
    except LogsError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
