"""Issue 14 item 6: turning the ZooKeeper digest on for an existing path secures the znodes made before
(recursively under the framework's root), and a non-loopback ZooKeeper without a digest is refused.
On the real ZooKeeper the tests start."""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from dl2_mesos.config import ConfigError, check_exposure, load_config
from dl2_mesos.config import load_config as _load
from dl2_mesos.framework.runner import connect_zookeeper


@pytest.fixture
def anonymous(zookeeper):
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def test_ops_digest_secures_znodes_created_before_it(zookeeper, anonymous):
    root = f"/dl2-acl-{uuid.uuid4().hex[:8]}"
    # a deployment that ran without a digest: world-writable state, a job record, a leader node
    anonymous.create(f"{root}/state/jobs/old-job", b"{}", makepath=True, acl=OPEN_ACL_UNSAFE)
    anonymous.create(f"{root}/leader/n_0000000001", b"http://x", makepath=True, acl=OPEN_ACL_UNSAFE)
    cfg = load_config(env={}, overrides={"zk": f"zk://{zookeeper.hosts}{root}", "zk_digest": "dl2:s3cret"})
    client = connect_zookeeper(cfg)
    try:
        expected = [make_digest_acl("dl2", "s3cret", all=True)]
        for path in (root, f"{root}/state", f"{root}/state/jobs", f"{root}/state/jobs/old-job",
                     f"{root}/leader", f"{root}/leader/n_0000000001"):
            acls, _ = client.get_acls(path)
            assert list(acls) == expected, path
        # an unauthenticated client can no longer inject a job, overwrite one or read one
        with pytest.raises(NoAuthError):
            anonymous.create(f"{root}/state/jobs/injected", b"{}")
        with pytest.raises(NoAuthError):
            anonymous.set(f"{root}/state/jobs/old-job", b"{\"evil\": 1}")
        with pytest.raises(NoAuthError):
            anonymous.get(f"{root}/state/jobs/old-job")
    finally:
        client.stop()
        client.close()


def test_ops_digest_on_a_node_owned_by_someone_else_is_a_clear_error(zookeeper, anonymous):
    root = f"/dl2-acl-{uuid.uuid4().hex[:8]}"
    anonymous.add_auth("digest", "other:pw")
    anonymous.create(f"{root}/state", b"", makepath=True, acl=OPEN_ACL_UNSAFE)
    anonymous.create(f"{root}/state/theirs", b"", acl=[make_digest_acl("other", "pw", read=True)])
    cfg = load_config(env={}, overrides={"zk": f"zk://{zookeeper.hosts}{root}", "zk_digest": "dl2:s3cret",
                                         "connect_timeout": "10s"})
    with pytest.raises(ConfigError, match="theirs"):
        connect_zookeeper(cfg)


def test_ops_non_loopback_zookeeper_without_digest_is_refused():
    def load_config(env, overrides):  # noqa: ANN001, ANN202 - the API on loopback: only ZooKeeper is judged
        return _load(env=env, overrides={"api": "127.0.0.1:8080", **overrides})

    for zk in ("zk://10.0.0.5:2181/dl2", "zk://zk1:2181,127.0.0.1:2181/dl2"):
        with pytest.raises(ConfigError, match="zk_digest"):
            check_exposure(load_config(env={}, overrides={"zk": zk}))
    check_exposure(load_config(env={}, overrides={"zk": "zk://10.0.0.5:2181/dl2", "zk_digest": "u:p"}))
    check_exposure(load_config(env={}, overrides={"zk": "zk://10.0.0.5:2181/dl2", "zk_insecure": True}))
    check_exposure(load_config(env={}, overrides={"zk": "zk://127.0.0.1:2181,localhost:2182/dl2"}))
