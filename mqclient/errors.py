"""Client errors: what went wrong, named the way RocketMQ users search for it."""

from __future__ import annotations

from dataclasses import dataclass


class MQClientError(Exception):
    """Base class of every error raised by ``mqclient``."""


class NameServerUnreachableError(MQClientError):
    """No name server answered (refused, timed out or not a RocketMQ name server)."""


class TopicRouteError(MQClientError):
    """The name server has no usable route for a topic."""


@dataclass
class AttemptError:
    """One failed send attempt: ``kind`` is the busy tag (``TIMEOUT_CLEAN_QUEUE``), a code name or
    ``CLIENT_TIMEOUT`` / ``CONNECT_ERROR`` / ``TIMEOUT_BUDGET`` for client-side failures."""

    kind: str
    code: int | None
    remark: str | None
    broker: str | None
    queue_id: int | None
    started_ms: int
    ended_ms: int


class MQBrokerError(MQClientError):
    """The broker answered with an error code."""

    def __init__(self, code: int, remark: str | None, broker: str | None = None) -> None:
        self.code = code
        self.remark = remark
        self.broker = broker
        super().__init__(f"broker {broker or '?'} answered code {code}: {remark or ''}")


class SendFailedError(MQClientError):
    """Every attempt of a send failed; ``attempts`` holds each attempt's error, the last one last."""

    def __init__(self, message: str, attempts: list[AttemptError]) -> None:
        self.attempts = attempts
        super().__init__(message)

    @property
    def last(self) -> AttemptError | None:
        return self.attempts[-1] if self.attempts else None
