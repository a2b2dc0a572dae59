"""Domain exceptions shared by every component."""

from __future__ import annotations


class Dl2Error(Exception):
    """Base class of every error raised deliberately by dl2-mesos."""


class InvalidJobSpec(Dl2Error, ValueError):
    """A job specification breaks a rule; the message names the field and the rule."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"invalid job spec: field '{field}': {rule}")


class InvalidAllocation(Dl2Error, ValueError):
    """An allocation does not fit the cluster state it was decided for."""


class TraceFormatError(Dl2Error, ValueError):
    """A trace file row is malformed; the message names the file and the line."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")


class UnknownPolicy(Dl2Error, KeyError):
    """A policy name that no registered policy answers to."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown policy"


class MessageSchemaError(Dl2Error, ValueError):
    """A framework<->executor message is malformed or of an unknown schema version."""


class CheckpointError(Dl2Error):
    """A checkpoint could not be saved or restored."""


class ConfigError(Dl2Error, ValueError):
    """A configuration setting is missing or invalid."""
