"""The measured speed model: exact at measurements, failures dropped, clamped, monotone."""

from __future__ import annotations

import numpy as np
import pytest

from dl2_mesos.job_types import all_job_types, get_job_type
from dl2_mesos.speed_model import clean_measurements, default_speed_model, load_measurements

SM = default_speed_model()
RAW = load_measurements()


def test_file_shape_and_failed_records():
    assert sum(len(v) for v in RAW.values()) == 804
    failed = {(m, p, w) for m, pts in RAW.items() for p, w, s in pts} - {
        (m, p, w) for m, pts in RAW.items() for p, w, s in clean_measurements(pts)
    }
    assert len(failed) == 10
    assert ("inception-bn", 1, 5) in failed and ("vgg-16", 4, 8) in failed


@pytest.mark.parametrize("model", [t.name for t in all_job_types()])
def test_measured_points_are_exact(model):
    for p, w, s in clean_measurements(RAW[model]):
        assert SM.samples_per_second(model, p, w) == s


def test_reference_sample_totals():
    assert SM.samples_per_second("resnet-50", 1, 1) == pytest.approx(15.78, abs=0.01)
    assert SM.samples_per_second("dssm", 5, 5) == pytest.approx(1125.3, abs=0.1)
    # epochs/s = samples/s / epoch_size; 164.7 epochs per 20-min slot for resnet-50 at (1, 1)
    assert SM.epochs_per_second("resnet-50", 1, 1) * 1200 == pytest.approx(164.7, abs=0.1)


def test_failed_records_are_not_used():
    med = float(np.median([s for _, _, s in RAW["vgg-16"]]))
    assert SM.samples_per_second("vgg-16", 4, 8) > 0.1 * med
    assert SM.samples_per_second("inception-bn", 1, 5) > 0.1 * float(
        np.median([s for _, _, s in RAW["inception-bn"]])
    )


@pytest.mark.parametrize("model", [t.name for t in all_job_types()])
def test_clamped_beyond_measured_range(model):
    pts = clean_measurements(RAW[model])
    max_p, max_w = max(p for p, _, _ in pts), max(w for _, w, _ in pts)
    for p in (1, 3, max_p):
        for extra in (1, 5, 40):
            assert SM.samples_per_second(model, p, max_w + extra) == SM.samples_per_second(model, p, max_w)
    for w in (1, max_w):
        assert SM.samples_per_second(model, max_p + 7, w) == SM.samples_per_second(model, max_p, w)
    assert SM.samples_per_second(model, 1000, 1000) == SM.samples_per_second(model, max_p, max_w)


def test_zero_tasks_no_progress_and_all_positive_otherwise():
    assert SM.epochs_per_second("vgg-16", 0, 4) == 0.0 and SM.epochs_per_second("vgg-16", 4, 0) == 0.0
    for t in all_job_types():
        assert (SM.table(t.name)[1:17, 1:17] > 0).all()


def _monotone_series():
    for model, pts in RAW.items():
        d = {(p, w): s for p, w, s in clean_measurements(pts)}
        for p in {p for p, _ in d}:
            ws = sorted(w for q, w in d if q == p)
            vals = [d[(p, w)] for w in ws]
            if len(ws) > 2 and all(b >= a for a, b in zip(vals, vals[1:])):
                yield model, "w", p, ws[0], ws[-1]
        for w in {w for _, w in d}:
            ps = sorted(p for p, x in d if x == w)
            vals = [d[(p, w)] for p in ps]
            if len(ps) > 2 and all(b >= a for a, b in zip(vals, vals[1:])):
                yield model, "p", w, ps[0], ps[-1]


def test_monotone_where_the_data_is_monotone():
    series = list(_monotone_series())
    assert len(series) >= 5
    for model, axis, fixed, lo, hi in series:
        t = SM.table(model)
        seg = t[fixed, lo : hi + 1] if axis == "w" else t[lo : hi + 1, fixed]
        assert np.all(np.diff(seg) >= 0), (model, axis, fixed, seg)


def test_pytorch_jobs_use_balanced_ps_speed():
    assert SM.epochs_per_second("resnet-50", 0, 3, uses_ps=False) == SM.epochs_per_second("resnet-50", 3, 3)
    assert get_job_type("resnet-50").epoch_size == 115
