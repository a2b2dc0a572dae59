"""Issue 14 item 14: a hostile or broken manifest never breaks restore; it falls back to the previous checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dl2_mesos.errors import CheckpointError
from dl2_mesos.storage import CheckpointStore, RetryPolicy


def _store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(f"file://{tmp_path}/root", keep=5, retry=RetryPolicy(attempts=1))


def _save_good(store: CheckpointStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "params").write_bytes(b"good")
    store.save(src, meta={"batch": 1})


def _forge(store: CheckpointStore, tmp_path: Path, manifest: str, files: dict[str, bytes]) -> Path:
    """A newer committed checkpoint whose manifest is exactly ``manifest``."""
    d = tmp_path / "root" / "000099-evil"
    d.mkdir(parents=True)
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    (d / "MANIFEST.json").write_text(manifest)
    return d


def _manifest(files: dict, meta: str = "{}", created: str = "1.0") -> str:
    return '{"seq": 99, "name": "evil", "created": %s, "meta": %s, "files": %s}' % (created, meta, json.dumps(files))


def test_ops_manifest_with_file_and_folder_of_same_name_falls_back(tmp_path):
    store = _store(tmp_path)
    _save_good(store, tmp_path)
    import hashlib

    digest = hashlib.sha256(b"p").hexdigest()  # "params" verifies; then "params/x" needs "params" as a folder
    _forge(store, tmp_path, _manifest({"params": {"sha256": digest, "size": 1},
                                       "params/x": {"sha256": digest, "size": 1}}), {"params": b"p"})
    info = store.restore(tmp_path / "out")
    assert info.seq == 1
    assert (tmp_path / "out" / "params").read_bytes() == b"good"


@pytest.mark.parametrize("meta,created", [('{"batch": NaN}', "1.0"), ('{"loss": Infinity}', "1.0"),
                                          ("{}", "NaN"), ('{"x": -Infinity}', "1.0")])
def test_ops_nan_or_infinity_in_manifest_is_refused(tmp_path, meta, created):
    store = _store(tmp_path)
    _save_good(store, tmp_path)
    import hashlib
    _forge(store, tmp_path, _manifest({"params": {"sha256": hashlib.sha256(b"z").hexdigest(), "size": 1}},
                                      meta, created), {"params": b"z"})
    assert [c.seq for c in store.list()] == [1]
    assert store.restore(tmp_path / "out").seq == 1


def test_ops_empty_file_list_is_not_a_valid_checkpoint(tmp_path):
    store = _store(tmp_path)
    _save_good(store, tmp_path)
    _forge(store, tmp_path, _manifest({}), {})
    assert store.restore(tmp_path / "out").seq == 1
    # and with nothing to fall back to, a clear CheckpointError (never a success with no files)
    empty = CheckpointStore(f"file://{tmp_path}/other", retry=RetryPolicy(attempts=1))
    (tmp_path / "other" / "000001").mkdir(parents=True)
    (tmp_path / "other" / "000001" / "MANIFEST.json").write_text(_manifest({}))
    with pytest.raises(CheckpointError):
        empty.restore(tmp_path / "out2")


def test_ops_saving_nan_meta_or_no_files_is_refused(tmp_path):
    store = _store(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(CheckpointError):
        store.save(src)
    (src / "params").write_bytes(b"x")
    with pytest.raises(ValueError):
        store.save(src, meta={"loss": float("nan")})
    assert store.list() == []
