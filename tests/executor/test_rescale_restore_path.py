"""The cheaper rescale path: the executor that saved the final checkpoint restores the next
generation from its own copy once the upload committed it (no download), and the new generation's
processes start while the checkpoint is made durable, waiting for the restore folder."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from dl2_mesos.errors import CheckpointError
from dl2_mesos.executor.uploader import Uploader
from dl2_mesos.job_runtime import NO_CHECKPOINT, JobRuntime, RestoreNotReady, wait_for_restore
from dl2_mesos.messages import ClusterSpec, Endpoint, LaunchSpec
from dl2_mesos.storage import MANIFEST, CheckpointStore

G1 = ClusterSpec(1, Endpoint("j-sched", "127.0.0.1", 9000), (Endpoint("j-ps-0", "127.0.0.1", 9001),),
                 (Endpoint("j-worker-0", "127.0.0.1", 9002),))


def _folder(root: Path, name: str, epoch: float, params: bytes = b"p" * 1000) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "model.params").write_bytes(params)
    (d / "sub").mkdir()
    (d / "sub" / "trainer.states").write_bytes(b"s" * 10)
    (d / "state.json").write_text(json.dumps({"epoch": epoch}))
    return d


def _no_download(monkeypatch, store: CheckpointStore) -> None:
    def refuse(*a, **k):
        raise AssertionError("downloaded although a local copy was there")
    monkeypatch.setattr(store.fs, "get_file", refuse)  # fsspec shares the instance: undone after the test


META = {"epoch": 2.0, "batch": 20, "final": True, "generation": 0}


# -- storage: adopt a local copy ----------------------------------------------------------------------
def test_a_committed_checkpoint_is_restored_from_the_folder_it_was_uploaded_from(tmp_path, monkeypatch):
    store = CheckpointStore(f"file://{tmp_path}/ckpt/j")
    src = _folder(tmp_path, "local", 2.0)
    info = store.save(src, name="final", meta=META)
    _no_download(monkeypatch, store)
    target = tmp_path / "restore-g1"
    assert store.adopt_local(info, src, target) == info
    assert not src.exists() and (target / "model.params").read_bytes() == b"p" * 1000
    assert (target / "sub" / "trainer.states").exists()
    rt = JobRuntime({"DL2_RESTORE_DIR": str(target)})
    restored = rt.restored()
    assert restored is not None and restored.checkpoint == info.dirname and restored.batch == 20


@pytest.mark.parametrize("change", ["size", "extra", "missing"])
def test_a_local_copy_that_differs_from_its_manifest_is_refused_and_left_alone(tmp_path, change):
    store = CheckpointStore(f"file://{tmp_path}/ckpt/j")
    src = _folder(tmp_path, "local", 2.0)
    info = store.save(src, name="final", meta=META)
    if change == "size":
        (src / "model.params").write_bytes(b"p" * 999)
    elif change == "extra":
        (src / "other").write_bytes(b"x")
    else:
        (src / "sub" / "trainer.states").unlink()
    with pytest.raises(CheckpointError):
        store.adopt_local(info, src, tmp_path / "restore-g1")
    assert src.exists() and not (tmp_path / "restore-g1" / MANIFEST).exists()


# -- the uploader keeps a final checkpoint's folder when asked --------------------------------------
def test_uploader_keeps_final_folders_only_when_asked(tmp_path):
    store = CheckpointStore(f"file://{tmp_path}/ckpt/j")
    for keep in (True, False):
        up = Uploader(store, keep_final=keep)
        periodic, final = _folder(tmp_path / str(keep), "p", 1.0), _folder(tmp_path / str(keep), "f", 2.0)
        up.submit(str(periodic), "", {**META, "final": False})
        assert up.drain(30)
        up.submit(str(final), "final", META)
        assert up.drain(30)
        up.close()
        results = [up.results.get_nowait() for _ in range(2)]
        assert not periodic.exists() and [r.info is not None for r in results] == [True, True]
        assert final.exists() == keep and results[1].kept == (str(final) if keep else "")


# -- a process started early waits for its restore folder -------------------------------------------
def test_wait_for_restore_sees_the_manifest_or_the_no_checkpoint_marker(tmp_path):
    folder = tmp_path / "restore"
    with pytest.raises(RestoreNotReady):
        wait_for_restore(folder, 0.2)
    folder.mkdir()
    threading.Timer(0.3, lambda: (folder / NO_CHECKPOINT).touch()).start()
    t0 = time.monotonic()
    assert wait_for_restore(folder, 10) is False and time.monotonic() - t0 >= 0.25
    (folder / MANIFEST).write_text("{}")
    assert wait_for_restore(folder, 10) is True


def test_a_pending_restore_is_read_once_the_executor_finished_it(tmp_path):
    store = CheckpointStore(f"file://{tmp_path}/ckpt/j")
    store.save(_folder(tmp_path, "local", 2.0), name="final", meta=META)
    target = tmp_path / "restore-g1"
    rt = JobRuntime({"DL2_RESTORE_DIR": str(target), "DL2_RESTORE_PENDING_S": "20"})
    threading.Timer(0.3, lambda: store.restore(target)).start()
    restored = rt.restored()  # waits: the folder does not even exist yet
    assert restored is not None and restored.batch == 20
    empty = tmp_path / "restore-g2"
    empty.mkdir()
    (empty / NO_CHECKPOINT).touch()
    assert JobRuntime({"DL2_RESTORE_DIR": str(empty), "DL2_RESTORE_PENDING_S": "5"}).restored() is None
    # without the variable nothing waits (a launch after a crash gets a finished folder)
    assert JobRuntime({"DL2_RESTORE_DIR": str(tmp_path / "nothing")}).restored() is None


# -- the runner: local copy when it is the newest committed checkpoint, download otherwise ----------
def _spec(uri: str) -> LaunchSpec:
    return LaunchSpec(job_id="j", task_id="j-worker-0", role="worker", rank=0, runtime="mxnet", job_type="mlp",
                      epochs=5.0, command=("true",), checkpoint_uri=uri, cluster=G1, previous_stop="crashed")


def _runner_with_uploaded_final(make_runner, tmp_path):
    uri = f"file://{tmp_path}/ckpt/j"
    runner = make_runner(_spec(uri))
    ckdir = runner.workdir / "checkpoints"
    final = _folder(ckdir, "g0-1-1", 2.0)
    runner.uploader.submit(str(final), "final", META)
    assert runner.uploader.drain(30)
    runner._collect_uploads()
    assert final.exists()  # kept for the restore
    return runner, uri, final


def test_runner_restores_its_own_final_checkpoint_without_downloading(make_runner, tmp_path, monkeypatch):
    runner, _, final = _runner_with_uploaded_final(make_runner, tmp_path)
    _no_download(monkeypatch, runner.store)
    restore = runner._restore_dir(wait_for_previous=False)
    assert restore is not None and json.loads((restore / "state.json").read_text()) == {"epoch": 2.0}
    assert not final.exists()


def test_runner_downloads_when_a_newer_checkpoint_was_committed_elsewhere(make_runner, tmp_path):
    runner, uri, final = _runner_with_uploaded_final(make_runner, tmp_path)
    CheckpointStore(uri).save(_folder(tmp_path, "elsewhere", 3.0), meta={**META, "epoch": 3.0, "final": False})
    restore = runner._restore_dir(wait_for_previous=False)
    assert json.loads((restore / "state.json").read_text()) == {"epoch": 3.0}
    assert not final.exists()  # the stale local copy is removed


def test_closing_the_runner_removes_a_kept_copy(make_runner, tmp_path):
    runner, _, final = _runner_with_uploaded_final(make_runner, tmp_path)
    runner.close()
    assert not final.exists()
