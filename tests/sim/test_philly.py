"""Importing Philly-style job logs."""

from __future__ import annotations

import pytest

from dl2_mesos.errors import TraceFormatError
from dl2_mesos.job_types import get_job_type
from dl2_mesos.policy.sim.philly import import_philly
from dl2_mesos.policy.sim.trace import read_trace, write_trace
from dl2_mesos.speed_model import default_speed_model

LOG = """jobid,submitted_time,duration,num_gpus,status
app-1,2017-10-03 14:00:00,3600,8,Pass
app-2,2017-10-03 14:20:00,600,0,Killed
app-3,2017-10-03 14:05:30,120,1,Pass
"""


def test_import_maps_arrival_type_and_epochs(tmp_path):
    p = tmp_path / "philly.csv"
    p.write_text(LOG)
    tr = import_philly(p, seed=3)
    assert [j.job_id for j in tr] == ["app-1", "app-3", "app-2"]
    assert [j.arrival_time for j in tr] == [0.0, 330.0, 1200.0]
    sm = default_speed_model()
    for j, dur, gpus in zip(tr, (3600, 120, 600), (8, 1, 0)):
        jt = get_job_type(j.spec.job_type)
        assert (jt.worker.gpus > 0) == (gpus > 0)
        assert j.spec.epochs == pytest.approx(dur * sm.epochs_per_second(jt.name, 1, 1))
    assert import_philly(p, seed=3) == tr  # deterministic
    out = tmp_path / "trace.csv"
    write_trace(tr, out)
    assert read_trace(out) == tr


def test_numeric_submit_times_and_default_ids(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("submit_time,run_time,gpus\n100,50,2\n40,60,0\n")
    tr = import_philly(p)
    assert [(j.job_id, j.arrival_time) for j in tr] == [("philly-0001", 0.0), ("philly-0000", 60.0)]


@pytest.mark.parametrize(
    "body, line, msg",
    [
        ("submit_time,duration,gpus\n1,10,1\nsoon,10,1\n", 3, "neither seconds nor a date-time"),
        ("submit_time,duration,gpus\n1,ten,1\n", 2, "duration"),
        ("submit_time,duration,gpus\n1,0,1\n", 2, "duration must be > 0"),
        ("submit_time,duration,gpus\n1,10,1.5\n", 2, "whole number"),
        ("submit_time,duration,gpus\n1,10,-1\n", 2, ">= 0"),
        ("submit_time,duration,gpus\n1,10\n", 2, "expected 3 cells"),
        ("submit_time,duration\n1,10\n", 1, "no GPU count column"),
        ("id,submit_time,duration,gpus\na,1,10,1\na,2,10,1\n", 3, "duplicate job id"),
    ],
)
def test_bad_rows(tmp_path, body, line, msg):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(TraceFormatError, match=msg) as ei:
        import_philly(p)
    assert ei.value.line == line and ei.value.path == str(p)


def test_a_log_that_is_not_utf8_names_its_line(tmp_path):
    p = tmp_path / "log.csv"
    p.write_bytes(b"jobid,submit_time,duration,gpus\na,1,10,1\n\xff\xfeb,2,10,1\n")
    with pytest.raises(TraceFormatError, match="not UTF-8") as ei:
        import_philly(p)
    assert ei.value.line == 3 and ei.value.path == str(p)
