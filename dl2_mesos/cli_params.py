"""Command-line values checked when the command line is read, before any work starts.

* **Output paths** (``--out``, ``--json``, ``-o`` ...): a training run or an evaluation that
  takes minutes must not end by failing to write its result. The folder is made (the command
  would make it anyway) and a file is created and removed in it, the one test that holds for
  every user, root included, and on read-only or full file systems.
* **Numbers** (:class:`FiniteFloatRange`): click's ``FloatRange`` lets ``nan`` through every
  bound (every comparison with nan is false) and ``inf`` through an open top; neither is a
  number of seconds, CPUs or a learning rate.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that refuses ``nan`` and ``inf`` (same arguments)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(rv, param, ctx)


#: any finite float (for options with no range of their own)
FINITE_FLOAT = FiniteFloatRange()


def _check_folder(folder: Path, what: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dl2-write-check-"):
            pass
    except OSError as exc:
        raise click.BadParameter(f"cannot write {what}: {exc.strerror or exc}") from None


def output_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for an option naming a file to write: its folder must be writable.

    Raises:
        click.BadParameter: the folder cannot be made or written, or the file exists read-only.
    """
    if value is None or value == "-":
        return value
    path = Path(value)
    if path.exists() and not os.access(path, os.W_OK):
        raise click.BadParameter(f"cannot write {value}: permission denied")
    _check_folder(path.parent, f"to {path.parent}/")
    return value


def output_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for an option naming a folder to write into: it is made and must be writable.

    Raises:
        click.BadParameter: the folder cannot be made or written.
    """
    if value is None:
        return value
    _check_folder(Path(value), f"to {value}/")
    return value


__all__ = ["FINITE_FLOAT", "FiniteFloatRange", "output_file", "output_folder"]
