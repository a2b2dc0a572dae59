"""``dl2 submit | jobs | job | cancel``: clients of the framework's HTTP API (requests)."""

from __future__ import annotations

import json
from typing import Any

import click

_api = click.option("--api", envvar="DL2_API", default="http://127.0.0.1:8080", show_default=True,
                    help="Framework API URL (env DL2_API).")
_token = click.option("--token", envvar="DL2_TOKEN", default="", help="Bearer token (env DL2_TOKEN).")
_json = click.option("--json", "as_json", is_flag=True, help="Print the raw JSON answer.")


def _call(method: str, api: str, path: str, token: str = "", body: Any = None) -> Any:
    import requests

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = api.rstrip("/") + path
    try:
        for _ in range(3):
            r = requests.request(method, url, json=body, headers=headers, timeout=30, allow_redirects=False)
            # a standby replica answers 307 naming the leader; follow it ourselves so that the
            # token goes along (requests drops Authorization when the host or port changes)
            if r.status_code in (307, 308) and "location" in r.headers:
                url = r.headers["location"]
                continue
            break
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach the framework at {api}: {exc}") from None
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
@_json
def submit(spec_file: Any, job_type: str | None, epochs: float | None, name: str | None, max_ps: int | None,
           max_workers: int | None, api: str, token: str, as_json: bool) -> None:
    """Submit a job from SPEC_FILE (JSON) or from --type/--epochs."""
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
@_json
def jobs(phase: str | None, api: str, token: str, as_json: bool) -> None:
    """List jobs."""
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
def job(job_id: str, api: str, token: str) -> None:
    """Show one job (JSON)."""
    click.echo(json.dumps(_call("GET", api, f"/api/v1/jobs/{job_id}", token), indent=2))


@click.command("cancel")
@click.argument("job_id")
@_api
@_token
def cancel(job_id: str, api: str, token: str) -> None:
    """Cancel a job."""
    data = _call("DELETE", api, f"/api/v1/jobs/{job_id}", token)
    click.echo(f"{data['id']}: {data['phase']}")
