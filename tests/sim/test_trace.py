"""Trace generation and the CSV format."""

from __future__ import annotations

from collections import Counter

import pytest

from dl2_mesos.errors import ConfigError, TraceFormatError
from dl2_mesos.job_types import get_job_type
from dl2_mesos.policy.sim.settings import TraceConfig
from dl2_mesos.policy.sim.trace import (
    generate_trace,
    google_patterns,
    parse_trace,
    read_trace,
    write_trace,
)
from dl2_mesos.resources import Resources


def per_slot(trace, slot=1200.0):
    return Counter(int(j.arrival_time // slot) for j in trace)


def test_generate_is_deterministic_and_sorted():
    cfg = TraceConfig(num_jobs=50, arrival="poisson", max_arrivals_per_slot=3)
    a, b = generate_trace(cfg, 7), generate_trace(cfg, 7)
    assert a == b and len(a) == 50
    assert generate_trace(cfg, 8) != a
    assert list(a) == sorted(a, key=lambda j: (j.arrival_time, j.job_id))
    assert len({j.job_id for j in a}) == 50


def test_uniform_arrivals_fill_the_cap():
    tr = generate_trace(TraceConfig(num_jobs=7, arrival="uniform", max_arrivals_per_slot=2), 0)
    assert per_slot(tr) == {0: 2, 1: 2, 2: 2, 3: 1}
    assert all(j.arrival_time % 1200.0 == 0 for j in tr)


def test_poisson_arrivals_are_capped():
    tr = generate_trace(TraceConfig(num_jobs=300, arrival="poisson", max_arrivals_per_slot=4), 1)
    counts = per_slot(tr)
    assert max(counts.values()) <= 4
    assert len(counts) < 300 / 2  # mostly at the cap (Poisson(4) >= 4 about 57% of the time)


def test_google_arrivals_follow_the_pattern():
    cfg = TraceConfig(num_jobs=578 // 2, arrival="google", max_arrivals_per_slot=10)
    tr = generate_trace(cfg, 0)
    pattern = google_patterns()[10]
    counts = per_slot(tr)
    last = max(counts)
    # some offset in 0..4 reproduces every full slot's count
    ok = [
        off
        for off in range(5)
        if all(counts.get(t, 0) == min(10, pattern[(t + off) % 75]) for t in range(last))
    ]
    assert ok
    with pytest.raises(ConfigError, match="known caps"):
        generate_trace(TraceConfig(num_jobs=5, arrival="google", max_arrivals_per_slot=7), 0)


def test_arrival_scale_multiplies_each_slot_and_carries_the_fraction():
    base = TraceConfig(num_jobs=9, arrival="uniform", max_arrivals_per_slot=2)
    doubled = generate_trace(TraceConfig(**{**base.to_dict(), "arrival_scale": 2.0}), 0)
    assert per_slot(doubled) == {0: 4, 1: 4, 2: 1}
    halved = generate_trace(TraceConfig(**{**base.to_dict(), "arrival_scale": 0.75}), 0)
    # 1.5 per slot: 1, 2, 1, 2, ...
    assert per_slot(halved) == {0: 1, 1: 2, 2: 1, 3: 2, 4: 1, 5: 2}
    same = TraceConfig(**{**base.to_dict(), "arrival_scale": 1.0})
    assert generate_trace(same, 0) == generate_trace(base, 0)


def test_arrival_scale_keeps_the_google_shape():
    cfg = TraceConfig(num_jobs=400, arrival="google", max_arrivals_per_slot=10)
    one = per_slot(generate_trace(cfg, 3))
    two = per_slot(generate_trace(TraceConfig(**{**cfg.to_dict(), "arrival_scale": 2.0}), 3))
    assert all(two[t] == 2 * one[t] for t in range(max(two)))  # same offset: same seed, same draw


def test_lengths_fixed_and_varied():
    fixed = generate_trace(TraceConfig(num_jobs=40, arrival="uniform", max_epochs=1000.0), 2)
    for j in fixed:
        assert j.spec.epochs == pytest.approx(get_job_type(j.spec.job_type).num_epochs_fraction * 1000.0)
        assert j.spec.max_ps == 16 and j.spec.max_workers == 16
    varied = generate_trace(
        TraceConfig(num_jobs=40, arrival="uniform", max_epochs=1000.0, fixed_length=False), 2
    )
    ratios = {
        round(j.spec.epochs / (get_job_type(j.spec.job_type).num_epochs_fraction * 1000.0), 6) for j in varied
    }
    assert len(ratios) > 3 and min(ratios) >= 0.9 and max(ratios) <= 1.09


def test_job_type_subset():
    tr = generate_trace(TraceConfig(num_jobs=30, job_types=("dssm", "wlm")), 0)
    assert {j.spec.job_type for j in tr} == {"dssm", "wlm"}
    with pytest.raises(ConfigError):
        TraceConfig(job_types=("nope",))


def test_csv_round_trip(tmp_path):
    tr = generate_trace(
        TraceConfig(num_jobs=25, arrival="poisson", fixed_length=False, max_arrivals_per_slot=3), 4
    )
    p = tmp_path / "t.csv"
    write_trace(tr, p)
    assert read_trace(p) == tr
    assert p.read_text().splitlines()[0].startswith("job_id,arrival_time,job_type,epochs")


def test_minimal_columns_and_defaults(tmp_path):
    text = """# a comment
arrival_time,job_type,epochs

30.5,3,100
0,dssm,200
"""
    tr = parse_trace(text, "x.csv")
    assert [j.job_id for j in tr] == ["job-0001", "job-0000"]  # ids from row order, sorted by arrival
    assert tr[1].spec.job_type == "resnext-110" and tr[1].arrival_time == 30.5
    assert tr[0].spec.worker == get_job_type("dssm").worker


def test_optional_resources_and_limits():
    text = "job_id,arrival_time,job_type,epochs,max_ps,max_workers,"
    text += "worker_cpus,worker_gpus,worker_mem,restart_seconds\n"
    text += "j1,0,vgg-16,10,4,8,3,2,1000,20\n"
    (j,) = parse_trace(text)
    assert j.spec.worker == Resources(3, 2, 1000) and j.spec.max_ps == 4 and j.spec.max_workers == 8
    assert j.spec.restart_seconds == 20


@pytest.mark.parametrize(
    "row, msg",
    [
        ("abc,vgg-16,10", "arrival_time"),
        ("-5,vgg-16,10", "arrival_time"),
        ("0,nope,10", "unknown type"),
        ("0,vgg-16,0", "epochs"),
        ("0,vgg-16,", "'epochs' is empty"),
        ("0,vgg-16,10,extra", "more cells"),
        ("0,vgg-16", "expected 3 cells"),
        ("0,vgg-16,inf", "finite"),
        ("1733400000,vgg-16,10", "not timestamps"),  # a Unix timestamp where an offset belongs
        ("1e308,vgg-16,10", "about 30 years"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, row, msg):
    p = tmp_path / "bad.csv"
    p.write_text("# header next\narrival_time,job_type,epochs\n0,dssm,5\n" + row + "\n")
    with pytest.raises(TraceFormatError, match=msg) as ei:
        read_trace(p)
    assert ei.value.line == 4 and ei.value.path == str(p)
    assert str(ei.value).startswith(f"{p}:4:")


def test_bad_headers_and_duplicates(tmp_path):
    with pytest.raises(TraceFormatError, match="missing required column 'epochs'"):
        parse_trace("arrival_time,job_type\n0,dssm\n")
    with pytest.raises(TraceFormatError, match="unknown column 'gpus'"):
        parse_trace("arrival_time,job_type,epochs,gpus\n")
    with pytest.raises(TraceFormatError, match="empty trace"):
        parse_trace("# nothing\n")
    with pytest.raises(TraceFormatError, match="duplicate job_id 'a'") as ei:
        parse_trace("job_id,arrival_time,job_type,epochs\na,0,dssm,1\na,1,dssm,1\n")
    assert ei.value.line == 3
    with pytest.raises(TraceFormatError, match="give all of worker_cpus"):
        parse_trace("arrival_time,job_type,epochs,worker_cpus\n0,dssm,1,2\n")


def test_bytes_that_are_not_utf8_name_file_and_line(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes(b"arrival_time,job_type,epochs\n0,dssm,5\n0,vgg-16,7 # caf\xe9\n")
    with pytest.raises(TraceFormatError, match=r"not UTF-8 text \(byte 0xe9") as ei:
        read_trace(p)
    assert ei.value.line == 3 and ei.value.path == str(p)


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    p = tmp_path / "excel.csv"
    p.write_bytes(b"\xef\xbb\xbfarrival_time,job_type,epochs\n0,dssm,5\n")
    (job,) = read_trace(p)
    assert job.spec.job_type == "dssm" and job.spec.epochs == 5
