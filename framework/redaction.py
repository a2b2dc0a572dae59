"""Masking of secret-looking values in what the HTTP API shows of a job.

Users pass credentials in job arguments (``--password=...``, ``DB_TOKEN=...``, a URL with
``user:password@``) and in ``extra``. The API shows jobs to every reader; the values that look
secret are replaced by ``***`` there. The stored job keeps them (the executor needs them), and
the holder of the api (write) token can read them back (``GET /api/v1/jobs/{id}?full=true``).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# a name is secret-looking when one of its words is one of these (password, db_password,
# apiKey, X-Auth-Token, aws_secret_access_key, ...)
_SECRET_WORDS = frozenset({"password", "passwd", "pwd", "pass", "secret", "token", "key", "apikey",
                           "credential", "credentials", "auth", "authorization", "cookie", "signature"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):[^/@\s]*@")


def secret_name(name: str) -> bool:
    """True when ``name`` (a key, a flag without dashes, a variable name) looks like it holds a secret."""
    words = re.split(r"[^A-Za-z0-9]+", _CAMEL.sub("_", name))
    return any(w.lower() in _SECRET_WORDS for w in words if w)


def redact_argv(argv: list[str]) -> list[str]:
    """``--password=x`` -> ``--password=***``; ``--token x`` -> ``--token ***``; ``KEY=x``; URL passwords."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if not isinstance(arg, str):
            out.append(arg)
            continue
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        flag = re.fullmatch(r"(-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*)(=(.*))?", arg, flags=re.S)
        if flag and secret_name(flag.group(1).lstrip("-")):
            if flag.group(2) is None:
                mask_next = True  # the value is the next argument
                out.append(arg)
            else:
                out.append(f"{flag.group(1)}={MASK}")
            continue
        assign = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_.-]*)=(.*)", arg, flags=re.S)
        if assign and secret_name(assign.group(1)):
            out.append(f"{assign.group(1)}={MASK}")
            continue
        out.append(_URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", arg))
    return out


def redact_value(value: Any) -> Any:
    """A copy of JSON data with the values under secret-looking keys masked (iterative: no depth limit)."""
    root: list[Any] = [None]
    stack: list[tuple[Any, list[Any] | dict[str, Any], Any]] = [(value, root, 0)]
    while stack:
        v, parent, slot = stack.pop()
        if isinstance(v, dict):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for k, item in v.items():
                if isinstance(k, str) and secret_name(k) and item not in (None, ""):
                    copy[k] = MASK
                else:
                    copy[k] = None
                    stack.append((item, copy, k))
        elif isinstance(v, list):
            items: list[Any] = [None] * len(v)
            parent[slot] = items
            stack.extend((item, items, i) for i, item in enumerate(v))
        elif isinstance(v, str):
            parent[slot] = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", v)
        else:
            parent[slot] = v
    return root[0]


def redact_job(job: dict[str, Any]) -> dict[str, Any]:
    """The API's job dict (``FrameworkJob.public()``) with its spec's command and extra redacted."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return job
    spec = dict(spec)
    if isinstance(spec.get("command"), list):
        spec["command"] = redact_argv(spec["command"])
    if isinstance(spec.get("extra"), dict):
        spec["extra"] = redact_value(spec["extra"])
    return {**job, "spec": spec}
