"""The README's data-path picture names modules and functions that exist (it must follow renames)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("framework", "executor", "policy", "dl2_mesos", "policy/dl2", "policy/sim", "dl2_mesos/localmesos")


def _picture() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Architecture: the data path", 1)[1]
    return section.split("```", 2)[1]


def _exists(name: str) -> bool:
    """``name`` (a path, or a bare module file name) is a file or folder of the checkout."""
    name = name.rstrip("/").removesuffix("/*")
    if (ROOT / name).exists():
        return True
    return "/" not in name and any((ROOT / folder / name).exists() for folder in FOLDERS)


def test_every_module_in_the_picture_exists():
    names = set(re.findall(r"[\w/]+\.py|[\w]+(?:/[\w*]+)+/?", _picture()))
    assert len(names) > 20
    missing = sorted(n for n in names if not _exists(n))
    assert not missing, f"README data path names modules that do not exist: {missing}"


def test_every_function_in_the_picture_exists():
    from dl2_mesos import slot_accounting
    from dl2_mesos.framework import slot_planner
    from dl2_mesos.framework.core import SchedulerCore

    picture = _picture()
    for module, prefix in ((slot_planner, "slot_planner"), (slot_accounting, "slot_accounting")):
        # "slot_planner.snapshot" and "slot_accounting.py job_view"
        for fn in re.findall(prefix + r"(?:\.(?!py\b)|\.py )(\w+)", picture):
            assert hasattr(module, fn), f"{prefix}: {fn}"
    assert "RescaleLedger" in picture and hasattr(slot_accounting, "RescaleLedger")
    assert "core.tick" in picture and hasattr(SchedulerCore, "tick")
