"""Issue 14 item 9: the ``dl2`` CLI follows a 307 only to a replica of the cluster and never sends the
bearer token anywhere else. Real HTTP servers on loopback play the standby, the leader and an attacker."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from dl2_mesos.framework.client_cli import cancel, jobs, submit


class Server:
    """A tiny HTTP server: records Authorization headers, answers with ``reply(path)``."""

    def __init__(self, reply) -> None:  # noqa: ANN001
        self.seen: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                if self.path != "/health":
                    outer.seen.append(self.headers.get("authorization"))
                code, headers, body = reply(self.path)
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                data = json.dumps(body).encode()
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *a) -> None:  # noqa: ANN002
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made: list[Server] = []

    def make(reply):  # noqa: ANN001, ANN202
        s = Server(reply)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _job(path: str):  # noqa: ANN202
    return 201, {}, {"id": "j-1", "phase": "pending", "jobs": []}


def test_ops_token_never_follows_a_redirect_off_the_cluster(servers):
    evil = servers(_job)
    standby = servers(lambda p: (200, {}, {"leader": None}) if p == "/health"
                      else (307, {"location": evil.url + p}, {}))
    for cmd, args in ((submit, ["--type", "resnet-50", "--epochs", "1"]), (cancel, ["j-1"]), (jobs, [])):
        result = CliRunner().invoke(cmd, [*args, "--api", standby.url], env={"DL2_API_TOKEN": "s3cret"})
        assert result.exit_code == 1, result.output
        assert "not a replica of this cluster" in result.output
    assert evil.seen == []  # not even a request without the token
    assert standby.seen == ["Bearer s3cret"] * 3


@pytest.mark.parametrize("location", ["https://127.0.0.1:1/x", "file:///etc/passwd", "ftp://127.0.0.1/x"])
def test_ops_redirect_to_other_scheme_or_port_is_refused(servers, location):
    standby = servers(lambda p: (200, {}, {"leader": None}) if p == "/health" else (307, {"location": location}, {}))
    result = CliRunner().invoke(submit, ["--type", "x", "--epochs", "1", "--api", standby.url],
                                env={"DL2_TOKEN": "t"})
    assert result.exit_code == 1 and "refusing to follow a redirect" in result.output


def test_ops_redirect_to_the_advertised_leader_keeps_the_token(servers):
    leader = servers(_job)
    standby = servers(lambda p: (200, {}, {"leader": leader.url}) if p == "/health"
                      else (307, {"location": leader.url + p}, {}))
    result = CliRunner().invoke(submit, ["--type", "resnet-50", "--epochs", "1", "--api", standby.url],
                                env={"DL2_TOKEN": "s3cret"})  # the alias of DL2_API_TOKEN
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "j-1"
    assert leader.seen == ["Bearer s3cret"]


def test_ops_redirect_to_a_configured_replica_is_followed(servers):
    leader = servers(_job)
    standby = servers(lambda p: (200, {}, {"leader": None}) if p == "/health"
                      else (307, {"location": leader.url + p}, {}))
    result = CliRunner().invoke(cancel, ["j-1", "--api", f"{standby.url},{leader.url}"],
                                env={"DL2_API_TOKEN": "s3cret"})
    assert result.exit_code == 0, result.output
    assert leader.seen == ["Bearer s3cret"]


def test_ops_token_file(servers, tmp_path):
    leader = servers(_job)
    f = tmp_path / "token"
    f.write_text("from-file\n")
    result = CliRunner().invoke(cancel, ["j-1", "--api", leader.url, "--token-file", str(f)], env={})
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cancel, ["j-1", "--api", leader.url, "--token", "on-the-command-line"], env={})
    assert result.exit_code == 0
    assert leader.seen == ["Bearer from-file", "Bearer on-the-command-line"]
