"""The carrier simulator's new ids and nonces (voicecore.carriers.simulator.RandomIds), from secrets and uuid: the
shells hand it to a carrier's simulator side, which says their shape and draws none itself."""

from __future__ import annotations

import secrets
import uuid

__all__ = ["RANDOM_IDS", "SecretIds"]


class SecretIds:
    def uuid(self) -> str:
        return str(uuid.uuid4())

    def uuid_hex(self) -> str:
        return uuid.uuid4().hex

    def token_hex(self, nbytes: int) -> str:
        return secrets.token_hex(nbytes)

    def token_urlsafe(self, nbytes: int) -> str:
        return secrets.token_urlsafe(nbytes)


RANDOM_IDS = SecretIds()
