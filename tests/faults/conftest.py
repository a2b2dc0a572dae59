"""Fixtures of the fault suite: a scratch folder for rigs (the shared ZooKeeper and HDFS come from
tests/conftest.py)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_http_logs():
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    yield
