"""The one error tree (voicecore/errors.py): every error voicecore raises on purpose says whose fault it is,
and still is what it was before the tree existed, so every existing ``except ValueError`` keeps working."""

from __future__ import annotations

import importlib
import pickle

import pytest

from voicecore.errors import DependencyError, MisuseError, PeerInputError, VoicecoreError

# (module, class, its kind, the builtin base it had before the tree). The internal ones never leave their
# module, but they sit in the tree too: a core that lets one escape still raises the right kind.
KNOWN_ERRORS = [
    ("voicecore.config", "ConfigError", MisuseError, ValueError),
    ("voicecore.bus.transport", "BusError", MisuseError, RuntimeError),
    ("voicecore.call.record", "RecordError", MisuseError, ValueError),
    ("voicecore.shm.arena", "ArenaError", DependencyError, RuntimeError),
    ("voicecore.supervise", "StackError", DependencyError, RuntimeError),
    ("bench.run", "BenchError", DependencyError, RuntimeError),
    ("voicecore.carriers.twilio.webhook", "WebhookError", PeerInputError, Exception),
    ("voicecore.carriers.twilio.stream", "_Violation", PeerInputError, Exception),
    ("voicecore.realtime.events", "_Bad", PeerInputError, Exception),
    ("voicecore.sim.model.rejects", "ClientEventRejected", PeerInputError, Exception),
]
KINDS = (PeerInputError, MisuseError, DependencyError)


@pytest.mark.parametrize(("module", "name", "kind", "old_base"), KNOWN_ERRORS, ids=[row[1] for row in KNOWN_ERRORS])
def test_each_error_has_one_kind_and_keeps_its_old_base(module, name, kind, old_base):
    error = getattr(importlib.import_module(module), name)
    assert issubclass(error, VoicecoreError) and issubclass(error, kind)
    assert [k for k in KINDS if issubclass(error, k)] == [kind], f"{name} must be exactly one kind"
    assert issubclass(error, old_base)


def test_the_kinds_share_the_root_and_nothing_else():
    for kind in KINDS:
        assert kind.__bases__ == (VoicecoreError,)
    assert VoicecoreError.__bases__ == (Exception,)


def test_dependency_errors_say_whether_to_retry():
    assert DependencyError("down").retryable is False
    assert DependencyError("503", retryable=True).retryable is True
    assert str(DependencyError("503", retryable=True)) == "503"


def test_an_existing_except_clause_still_catches():
    from voicecore.config import ConfigError

    with pytest.raises(ValueError):
        raise ConfigError("VOICECORE_MAX_CALLS: expected an integer")
    with pytest.raises(MisuseError):
        raise ConfigError("VOICECORE_MAX_CALLS: expected an integer")


def test_errors_survive_pickling():
    """Errors cross process boundaries (multiprocessing, the bench's load processes): kind and retryable
    come back as they were."""
    for error in (PeerInputError("bad frame"), MisuseError("bad setting"), DependencyError("503", retryable=True)):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and copy.args == error.args
    assert pickle.loads(pickle.dumps(DependencyError("503", retryable=True))).retryable is True
