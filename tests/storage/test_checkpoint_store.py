"""CheckpointStore: atomic writes, keep-last-K, checksums, fallbacks, confinement, retries.

Local (file://) tests run everywhere; the same behaviours run against the real HDFS through both
``hdfs://`` (hdfs-native RPC) and ``webhdfs://``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path

import pytest

from dl2_mesos.errors import CheckpointError
from dl2_mesos.storage import (
    MANIFEST,
    CheckpointNotFound,
    CheckpointStore,
    InvalidCheckpointName,
    RetryPolicy,
    StorageUnavailable,
    open_fs,
)


def make_ckpt(tmp_path: Path, tag: str, size: int = 1000) -> Path:
    d = tmp_path / f"src-{tag}-{uuid.uuid4().hex[:6]}"
    (d / "sub").mkdir(parents=True)
    (d / "params").write_bytes((tag.encode() * size)[:size])
    (d / "sub" / "state.json").write_text(json.dumps({"tag": tag}))
    return d


@pytest.fixture(params=["file", "hdfs", "webhdfs"])
def store_root(request, tmp_path):
    """A fresh checkpoint root on each backend."""
    job = f"job-{uuid.uuid4().hex[:8]}"
    if request.param == "file":
        return f"file://{tmp_path}/ckpt/{job}"
    hdfs = request.getfixturevalue("hdfs")
    base = hdfs.url if request.param == "hdfs" else hdfs.webhdfs_url
    return f"{base}/dl2/checkpoints/{job}"


def test_save_restore_roundtrip_and_keep_last_k(store_root, tmp_path):
    store = CheckpointStore(store_root, keep=2)
    infos = [store.save(make_ckpt(tmp_path, f"v{i}"), name=f"step{i}", meta={"batch": i}) for i in range(4)]
    assert [i.seq for i in infos] == [1, 2, 3, 4]
    listed = store.list()
    assert [c.dirname for c in listed] == ["000003-step2", "000004-step3"]
    out = tmp_path / "restored"
    info = store.restore(out)
    assert info.meta == {"batch": 3}
    assert (out / "params").read_bytes().startswith(b"v3")
    assert json.loads((out / "sub" / "state.json").read_text()) == {"tag": "v3"}
    # by name, either the full directory name or the job-supplied part
    assert store.restore(out, name="step2").seq == 3
    assert store.restore(out, name="000004-step3").seq == 4
    # no temporary folder left behind
    fs, root = open_fs(store_root)
    assert not [p for p in fs.ls(root, detail=False) if ".tmp-" in p]


def test_corrupt_latest_falls_back_to_previous(store_root, tmp_path, caplog):
    store = CheckpointStore(store_root, keep=3)
    store.save(make_ckpt(tmp_path, "good"), meta={"batch": 1})
    bad = store.save(make_ckpt(tmp_path, "bad"), meta={"batch": 2})
    fs, root = open_fs(store_root)
    fs.pipe_file(f"{root}/{bad.dirname}/params", b"tampered")
    caplog.set_level(logging.WARNING, logger="dl2_mesos.storage")
    info = store.restore(tmp_path / "out")
    assert info.meta == {"batch": 1}
    assert (tmp_path / "out" / "params").read_bytes().startswith(b"good")
    assert "sha256" in caplog.text and bad.dirname in caplog.text
    # asking for the corrupt one by name is an error, not a silent fallback
    with pytest.raises(CheckpointError, match="sha256"):
        store.restore(tmp_path / "out2", name=bad.dirname)


def test_missing_file_and_missing_manifest_fall_back(tmp_path, caplog):
    root = f"file://{tmp_path}/ck"
    store = CheckpointStore(root)
    store.save(make_ckpt(tmp_path, "a"), meta={"n": 1})
    b = store.save(make_ckpt(tmp_path, "b"), meta={"n": 2})
    c = store.save(make_ckpt(tmp_path, "c"), meta={"n": 3})
    (tmp_path / "ck" / c.dirname / MANIFEST).unlink()  # an incomplete checkpoint
    (tmp_path / "ck" / b.dirname / "params").unlink()  # a damaged one
    caplog.set_level(logging.WARNING)
    assert store.restore(tmp_path / "o").meta == {"n": 1}
    assert "no manifest" in caplog.text and "missing" in caplog.text


def test_no_checkpoint_is_a_clear_error(store_root, tmp_path):
    store = CheckpointStore(store_root)
    assert store.latest() is None
    with pytest.raises(CheckpointNotFound, match="no checkpoint under"):
        store.restore(tmp_path / "x")
    store.save(make_ckpt(tmp_path, "a"))
    with pytest.raises(CheckpointNotFound, match="no checkpoint named 'nope'"):
        store.restore(tmp_path / "x", name="nope")


@pytest.mark.parametrize("bad", ["..", "../other-job", "/etc", "a/b", "a/../../b", ".hidden", "x" * 200, "a..b"])
def test_escaping_names_are_refused(tmp_path, bad):
    store = CheckpointStore(f"file://{tmp_path}/ck")
    with pytest.raises(InvalidCheckpointName):
        store.save(make_ckpt(tmp_path, "a"), name=bad)
    assert not (tmp_path / "ck").exists() or not list((tmp_path / "ck").iterdir())
    assert not (tmp_path / "other-job").exists()


def test_manifest_paths_cannot_escape_on_restore(tmp_path):
    store = CheckpointStore(f"file://{tmp_path}/ck")
    info = store.save(make_ckpt(tmp_path, "a"))
    man_path = tmp_path / "ck" / info.dirname / MANIFEST
    man = json.loads(man_path.read_text())
    man["files"]["../../escaped"] = man["files"].pop("params")
    man_path.write_text(json.dumps(man))
    with pytest.raises(CheckpointNotFound):
        store.restore(tmp_path / "out")  # the only checkpoint is refused -> nothing valid listed
    assert not (tmp_path / "escaped").exists()


def test_symlink_refused(tmp_path):
    src = make_ckpt(tmp_path, "a")
    (src / "link").symlink_to("/etc/passwd")
    with pytest.raises(CheckpointError, match="symbolic"):
        CheckpointStore(f"file://{tmp_path}/ck").save(src)


def test_transient_errors_are_retried_with_backoff(tmp_path, monkeypatch):
    sleeps: list[float] = []
    store = CheckpointStore(f"file://{tmp_path}/ck", retry=RetryPolicy(attempts=4, base_delay=0.1), sleep=sleeps.append)
    real_put = store.fs.put_file
    fails = {"n": 2}

    def flaky(*a, **k):
        if fails["n"]:
            fails["n"] -= 1
            raise ConnectionRefusedError("Connection refused")
        return real_put(*a, **k)

    monkeypatch.setattr(store.fs, "put_file", flaky)  # fsspec shares the instance: undone after the test
    info = store.save(make_ckpt(tmp_path, "a"))
    assert sleeps == [0.1, 0.2]
    assert info.seq == 1 and [c.seq for c in store.list()] == [1]
    assert not [p for p in (tmp_path / "ck").iterdir() if p.name.startswith(".tmp-")]
    # permanent failure: retries exhausted -> StorageUnavailable naming the cause
    fails["n"] = 99
    with pytest.raises(StorageUnavailable, match="4 attempts"):
        store.save(make_ckpt(tmp_path, "b"))
    assert [c.seq for c in store.list()] == [1]


def test_hdfs_outage_during_save_is_retried_and_previous_intact(hdfs, tmp_path):
    root = f"{hdfs.url}/dl2/checkpoints/outage-{uuid.uuid4().hex[:6]}"
    # Retries for up to about 75 s: the NameNode's JVM restart took over 20 s (refused
    # connections) on the 2-core machine with another test worker beside it.
    store = CheckpointStore(root, retry=RetryPolicy(attempts=40, base_delay=0.5, max_delay=2.0))
    first = store.save(make_ckpt(tmp_path, "first"), meta={"batch": 10})
    hdfs.stop()
    result: dict = {}

    def save() -> None:
        try:
            result["info"] = store.save(make_ckpt(tmp_path, "second"), meta={"batch": 20})
        except Exception as exc:  # noqa: BLE001 - reported to the test below
            result["error"] = exc

    t = threading.Thread(target=save)
    try:
        t.start()
        time.sleep(2.0)
        assert t.is_alive(), f"save did not wait for HDFS: {result}"
    finally:
        hdfs.start()
    t.join(120)
    assert "info" in result, result
    assert result["info"].seq == 2
    assert [c.meta["batch"] for c in store.list()] == [10, 20]
    assert store.restore(tmp_path / "r", name=first.dirname).meta == {"batch": 10}


def test_hdfs_down_too_long_fails_cleanly_previous_intact(hdfs, tmp_path):
    root = f"{hdfs.url}/dl2/checkpoints/down-{uuid.uuid4().hex[:6]}"
    store = CheckpointStore(root, retry=RetryPolicy(attempts=3, base_delay=0.2))
    store.save(make_ckpt(tmp_path, "first"), meta={"batch": 10})
    hdfs.stop()
    try:
        with pytest.raises(StorageUnavailable, match="save"):
            store.save(make_ckpt(tmp_path, "second"), meta={"batch": 20})
    finally:
        hdfs.start()
    info = store.restore(tmp_path / "r")
    assert info.meta == {"batch": 10}
    assert (tmp_path / "r" / "params").read_bytes().startswith(b"first")
