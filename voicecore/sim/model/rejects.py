"""A client event the simulated server refuses: the exception its handlers raise, and its builders.

Owns the (code, message, param) triple that becomes an `error` server event
(docs/explanation/protocols.md#c0) and the wording of the three common refusals. The session turns the
exception into the event; nothing else catches it.
"""

from __future__ import annotations

from voicecore.errors import PeerInputError


class ClientEventRejected(PeerInputError):
    """The client event is invalid; the session answers it with an `error` server event."""

    def __init__(self, code: str | None, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


def unknown_parameter(param: str) -> ClientEventRejected:
    return ClientEventRejected("unknown_parameter", f"Unknown parameter: '{param}'.", param)


def missing_parameter(param: str) -> ClientEventRejected:
    return ClientEventRejected("missing_required_parameter", f"Missing required parameter: '{param}'.", param)


def invalid_value(param: str, detail: str) -> ClientEventRejected:
    return ClientEventRejected("invalid_value", f"Invalid value for '{param}': {detail}", param)
