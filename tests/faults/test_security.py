"""Security on real parts: bearer tokens on API writes, ZooKeeper digest ACLs on the framework's
znodes, the Mesos principal/secret as the master receives them, job commands run as argument
vectors (an attempted shell injection through the API reaches the process literally), and
user-given names that cannot leave the sandbox or checkpoint root."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from dl2_mesos.framework.api import create_app
from dl2_mesos.storage import CheckpointStore, InvalidCheckpointName
from dl2_mesos.testing.faultload import CoreBackend
from dl2_mesos.testing.faults import TERMINAL, FaultRig, RigOptions, wait_for

SPEC = {"job_type": "resnet-50", "epochs": 1}


def test_api_writes_need_the_bearer_token():
    client = TestClient(create_app(CoreBackend(), api_token="s3cret"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                    {"Authorization": "Basic czNjcmV0"}, {"Authorization": "Bearer "}):
        r = client.post("/api/v1/jobs", json=SPEC, headers=headers)
        assert r.status_code == 401 and "token" in r.json()["error"], (headers, r.text)
    r = client.post("/api/v1/jobs", json=SPEC, headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 201
    jid = r.json()["id"]
    assert client.delete(f"/api/v1/jobs/{jid}").status_code == 401
    assert client.delete(f"/api/v1/jobs/{jid}", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get(f"/api/v1/jobs/{jid}", headers={"Authorization": "Bearer s3cret"}).json()["phase"] == "pending"
    assert client.delete(f"/api/v1/jobs/{jid}", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/api/v1/jobs").status_code == 401  # reads need a token too
    assert client.get("/api/v1/jobs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize("name", ["..", "../../etc", "a/../../b", "/abs", "x\\..\\y", ".hidden", "a b", "$(id)"])
def test_job_names_that_could_escape_paths_are_refused(name):
    client = TestClient(create_app(CoreBackend()))
    r = client.post("/api/v1/jobs", json={**SPEC, "name": name})
    assert r.status_code == 422 and r.json()["field"] == "name", r.text


def test_accepted_names_stay_one_path_component_under_the_checkpoint_root():
    backend = CoreBackend()
    client = TestClient(create_app(backend))
    for name in ("a..b", "x.", "a-b_c.d"):
        job = client.post("/api/v1/jobs", json={**SPEC, "name": name}).json()
        root = backend.core.cfg.checkpoint_root.rstrip("/")
        rest = job["checkpoint_uri"][len(root) + 1:]
        assert job["checkpoint_uri"].startswith(root + "/") and "/" not in rest and rest not in (".", "..")


def test_shell_strings_are_refused_as_commands():
    client = TestClient(create_app(CoreBackend()))
    r = client.post("/api/v1/jobs", json={**SPEC, "command": "python train.py; touch /tmp/pwned"})
    assert r.status_code == 422


def test_checkpoint_names_and_manifest_paths_cannot_escape(tmp_path):
    store = CheckpointStore(f"file://{tmp_path}/root/job")
    src = tmp_path / "src"
    src.mkdir()
    (src / "w").write_text("x")
    for bad in ("..", "../evil", "a/b", "/etc", ""):
        if bad:
            with pytest.raises(InvalidCheckpointName):
                store.save(src, name=bad)
    info = store.save(src, name="ok")
    # a forged manifest pointing outside the checkpoint is ignored, and nothing is written outside
    man = Path(tmp_path / "root/job" / info.dirname / "MANIFEST.json")
    data = json.loads(man.read_text())
    data["files"] = {"../../../escaped": data["files"]["w"]}
    man.write_text(json.dumps(data))
    assert store.list() == []
    with pytest.raises(Exception):
        store.restore(tmp_path / "restore")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "root" / "escaped").exists()


@pytest.mark.slow
def test_live_framework_acls_principal_and_no_shell(zookeeper, hdfs, tmp_path):
    """One real ``dl2 framework`` with --zk-digest, --principal/--secret (through a recording
    proxy in front of the local master) and the real executor running an injection attempt."""
    marker = Path(f"/tmp/dl2-pwned-{uuid.uuid4().hex[:8]}")
    out = tmp_path / "argv.json"
    opt = RigOptions(agents=1, agent_cpus=2.0, via_proxy=True,
                     extra_framework_args=("--zk-digest", "dl2:pw", "--principal", "dl2-principal",
                                           "--secret", "dl2-secret"))
    with FaultRig("security", hdfs, zookeeper, tmp_path / "rig", opt) as rig:
        # --- ZooKeeper digest ACLs: an unauthenticated client can neither read nor write our znodes
        state = rig.zk_url.split("/", 3)[3]
        anon = KazooClient(hosts=zookeeper.hosts)
        anon.start(10)
        try:
            meta = f"/{state}/state/meta"
            wait_for(lambda: anon.exists(meta), 20, "the state znodes")
            with pytest.raises(NoAuthError):
                anon.get(meta)
            with pytest.raises(NoAuthError):
                anon.set(meta, b"{}")
            with pytest.raises(NoAuthError):
                anon.create(f"/{state}/state/evil", b"{}")
        finally:
            anon.stop()
            anon.close()
        authed = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "dl2:pw")])
        authed.start(10)
        try:
            assert json.loads(authed.get(meta)[0])["term"] >= 1
        finally:
            authed.stop()
            authed.close()
        # --- the principal in FrameworkInfo, the secret only as HTTP Basic credentials
        fw = next(f for f in rig.cluster.state()["frameworks"] if f["name"] == "dl2")
        assert fw["principal"] == "dl2-principal"
        expected = "Basic " + base64.b64encode(b"dl2-principal:dl2-secret").decode()
        assert rig.proxy.headers_named("Authorization") and set(rig.proxy.headers_named("Authorization")) == {expected}
        # --- a shell injection attempt submitted through the API reaches the process literally
        evil = [f"; touch {marker}", f"$(touch {marker})", f"`touch {marker}`", f"| touch {marker} &&", "'\"*"]
        program = ("import json, sys; from dl2_mesos.job_runtime import JobRuntime; rt = JobRuntime.from_env(); "
                   "open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:])); rt.exit('finished')")
        r = rig.post_job({"job_type": "resnet-50", "epochs": 1, "runtime": "pytorch", "name": "inject",
                          "worker": {"cpus": 1, "gpus": 0, "mem": 256}, "max_workers": 1,
                          "command": ["python", "-c", program, str(out), *evil]})
        assert r.status_code == 201, r.text
        wait_for(lambda: rig.jobs().get(r.json()["id"], {}).get("phase") in TERMINAL, 90, "the job to end")
        assert json.loads(out.read_text()) == evil
        assert not marker.exists()
        assert rig.jobs()[r.json()["id"]]["phase"] == "finished"
        # writes through the live API need the token too
        assert rig.post_job(SPEC, headers={}).status_code == 401
        assert rig.post_job(SPEC, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert not marker.exists()
    os.environ.get("DL2_KEEP")  # nothing else to clean: the rig stopped every process
