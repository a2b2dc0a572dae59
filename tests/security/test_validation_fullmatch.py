"""Full-match validation beyond job names: settings and the API's published patterns
(issue 14, item 3)."""

from __future__ import annotations

import re

import pytest

from dl2_mesos.config import load_config
from dl2_mesos.errors import ConfigError
from dl2_mesos.framework.api import JOB_SPEC_SCHEMA


@pytest.mark.parametrize("key,value", [("master", "m:5050\n"), ("zk", "zk://h:2181/dl2\n"), ("api", "0.0.0.0:8080\n")])
def test_settings_with_a_trailing_newline_are_refused(key, value):
    with pytest.raises(ConfigError) as ei:
        load_config(env={}, overrides={key: value})
    assert key in str(ei.value)
    load_config(env={}, overrides={key: value.rstrip("\n")})  # the same value without it is fine


def test_the_published_name_pattern_refuses_a_trailing_newline():
    pattern = JOB_SPEC_SCHEMA["properties"]["name"]["pattern"]
    assert not pattern.endswith("$")
    assert re.search(pattern, "ok") and not re.search(pattern, "ok\n")


def test_checkpoint_names_with_a_trailing_newline_are_refused():
    from dl2_mesos.storage import InvalidCheckpointName, check_name

    assert check_name("final-0") == "final-0"
    with pytest.raises(InvalidCheckpointName):
        check_name("final-0\n")
