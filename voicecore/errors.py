"""The one error tree: whose fault an error is decides what the shell does with it.

As h11 splits RemoteProtocolError (the peer's fault) from LocalProtocolError (ours), voicecore's
exceptions sit under three kinds below one root:

- ``PeerInputError``: a peer sent something we cannot use (the carrier, the model vendor, the caller).
  Call-scoped: the shell counts it, logs once with the call id and ends that call with the right close
  code; other calls go on.
- ``MisuseError``: our own caller used the API wrong or configured something we cannot run with. A bug
  or an operator's mistake: report it, do not retry.
- ``DependencyError``: something we depend on failed (the supervisor and its workers, the shared-memory
  arena, a REST endpoint, the model's socket). ``retryable`` says whether trying again may succeed.

Each existing error keeps its older builtin base too (``ConfigError`` is still a ``ValueError``), so
code that catches the builtin keeps working. Pure: this module imports nothing.
"""

from __future__ import annotations


class VoicecoreError(Exception):
    """Root of every error voicecore raises on purpose."""


class PeerInputError(VoicecoreError):
    """Bad input from a peer (carrier, model vendor, caller): the peer's fault, scoped to one call."""


class MisuseError(VoicecoreError):
    """Our caller used the API wrong, or the configuration cannot work: our side's fault."""


class DependencyError(VoicecoreError):
    """A dependency failed (a process, the arena, a REST endpoint, a socket).

    ``retryable`` is True when the same operation may succeed later (a timeout, a 503, a peer still
    starting); the class default is False and a raise site may say otherwise.
    """

    retryable: bool = False

    def __init__(self, *args: object, retryable: bool | None = None) -> None:
        super().__init__(*args)
        if retryable is not None:
            self.retryable = retryable
