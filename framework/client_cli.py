"""``dl2 submit | jobs | job | cancel``: clients of the framework's HTTP API (requests).

The bearer token comes from ``--token-file``, ``$DL2_API_TOKEN`` (``$DL2_TOKEN`` is an alias) or
``--token`` (visible in ``ps``: a warning says so). A standby replica answers 307 naming the leader;
the client follows a redirect only to a replica of the same cluster (the ``--api`` URLs given, or
the leader the configured replica itself reports in ``/health``), and never sends the token anywhere
else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

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


def resolve_token(token: str, token_file: str | None) -> str:
    """The token to send: from ``token_file`` when given, else ``token`` (flag or environment; the
    ``--token`` help says that a flag is visible in ``ps``: the output stays parseable, so no warning)."""
    if token_file:
        try:
            lines = Path(token_file).read_text().strip().splitlines()
        except OSError as exc:
            raise click.ClickException(f"token file {token_file}: {exc.strerror or exc}") from None
        if not lines or not lines[0].strip():
            raise click.ClickException(f"token file {token_file} is empty")
        return lines[0].strip()
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
        raise click.ClickException(f"{r.status_code}: {msg}")
    return data


@click.command("submit")
@click.argument("spec_file", type=click.File("r"), required=False)
@click.option("--type", "job_type", default=None, help="Job type, e.g. resnet-50.")
@click.option("--epochs", type=float, default=None)
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
    click.echo(f"{'ID':<32} {'TYPE':<14} {'PHASE':<10} {'EPOCHS':>15} {'PS':>3} {'W':>3}")
    for j in data["jobs"]:
        ep = f"{j['epochs_done']:.1f}/{j['epochs']:g}"
        click.echo(f"{j['id']:<32} {j['job_type']:<14} {j['phase']:<10} {ep:>15} {j['num_ps']:>3} {j['num_workers']:>3}")


@click.command("job")
@click.argument("job_id")
@_api
@_token
@_token_file
def job(job_id: str, api: str, token: str, token_file: str | None) -> None:
    """Show one job (JSON)."""
    click.echo(json.dumps(_call("GET", api, f"/api/v1/jobs/{job_id}", resolve_token(token, token_file)), indent=2))


@click.command("cancel")
@click.argument("job_id")
@_api
@_token
@_token_file
def cancel(job_id: str, api: str, token: str, token_file: str | None) -> None:
    """Cancel a job."""
    token = resolve_token(token, token_file)
    data = _call("DELETE", api, f"/api/v1/jobs/{job_id}", token)
    click.echo(f"{data['id']}: {data['phase']}")
