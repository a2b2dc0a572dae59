"""``dl2 bench NAME [ARGS...]``: run one of the benchmark scripts of a source checkout.

The benchmarks (``bench/*.py``) and the test rigs some of them use (``tests/support/dl2_rigs``)
are not part of the installed package; this command runs ``bench/NAME.py`` of the checkout the
package is installed from (``pip install -e .``, as ``scripts/bootstrap.sh`` does) with the
current interpreter, passing ``ARGS`` on (``dl2 bench faults --help``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

import dl2_mesos


def bench_dir() -> Path | None:
    """``bench/`` of the source checkout this package runs from, or None for an installed wheel."""
    folder = Path(dl2_mesos.__file__).resolve().parents[1] / "bench"
    return folder if folder.is_dir() else None


def _scripts(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


@click.command("bench", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(name: str, args: tuple[str, ...]) -> None:
    """Run the benchmark bench/NAME.py of the source checkout and print its figures.

    For example `dl2 bench faults --scenarios mesos` (fault injection), `dl2 bench simulator`,
    `dl2 bench policy`, `dl2 bench framework`, `dl2 bench rescale`; `dl2 bench NAME --help`
    shows the script's own options.
    """
    folder = bench_dir()
    if folder is None:
        raise click.ClickException("the benchmarks are scripts in bench/ of a source checkout, which this "
                                   "installation does not have: run them from a checkout installed with "
                                   "`pip install -e .` (scripts/bootstrap.sh)")
    if name not in _scripts(folder):
        raise click.BadParameter(f"no benchmark {name!r}; known: {', '.join(_scripts(folder))}", param_hint="NAME")
    script = folder / f"{name}.py"
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, str(script), *args])
