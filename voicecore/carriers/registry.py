"""The carriers voicecore serves, by name: one descriptor per carrier package (voicecore/carriers/base.py says
what a descriptor answers). The gateway and the model worker find a call's carrier here and nowhere else; adding a
carrier is its package and one line below.

Must not know: sockets, clocks, the configuration (settings come in).
"""

from __future__ import annotations

from voicecore.carriers.base import Carrier, CarrierSettings
from voicecore.carriers.exotel.carrier import EXOTEL
from voicecore.carriers.plivo.carrier import PLIVO
from voicecore.carriers.telnyx.carrier import TELNYX
from voicecore.carriers.twilio.carrier import TWILIO
from voicecore.carriers.vonage.carrier import VONAGE
from voicecore.carriers.webhook import Route

__all__ = ["CARRIERS", "NAMES", "PLACING", "get", "routes", "served", "stream_paths"]

CARRIERS: tuple[Carrier, ...] = (TWILIO, TELNYX, PLIVO, VONAGE, EXOTEL)
NAMES: tuple[str, ...] = tuple(carrier.name for carrier in CARRIERS)
# The carriers that place calls (their descriptor's ``placing``: voicecore/outbound/dial.py)
PLACING: tuple[str, ...] = tuple(carrier.name for carrier in CARRIERS if carrier.placing is not None)
_BY_NAME: dict[str, Carrier] = {carrier.name: carrier for carrier in CARRIERS}


def get(name: str) -> Carrier:
    """The carrier called ``name``; ValueError for a name no package serves."""
    carrier = _BY_NAME.get(name)
    if carrier is None:
        raise ValueError(f"unknown carrier {name!r}")
    return carrier


def served(settings: CarrierSettings) -> tuple[str, ...]:
    """The names of the carriers ``settings`` serve, in the order above."""
    return tuple(carrier.name for carrier in CARRIERS if carrier.served(settings))


def routes(names: tuple[str, ...]) -> dict[str, Route]:
    """The HTTP routes of the carriers named (the others' paths are 404 like any unknown path)."""
    return {path: route for carrier in CARRIERS if carrier.name in names for path, route in carrier.routes.items()}


def stream_paths(names: tuple[str, ...]) -> dict[str, str]:
    """WebSocket path -> carrier name, for the carriers named."""
    return {carrier.stream_path: carrier.name for carrier in CARRIERS if carrier.name in names}
