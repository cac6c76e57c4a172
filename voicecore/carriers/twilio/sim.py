"""Twilio as the carrier simulator plays it (voicecore/carriers/simulator.py says what this answers).

Twilio's voice webhook, its TwiML followed to the stream and the stream itself are the simulator's own core and
shell (voicecore/sim/carrier_core.py CarrierCall, voicecore/sim/carrier.py place_call), not its carrier modes:
``answer_path`` stays empty and the descriptor has no ``carrier_side``.
"""

from __future__ import annotations

from voicecore.carriers.simulator import CarrierSimulator

__all__ = ["TwilioSimulator"]


class TwilioSimulator(CarrierSimulator):
    user_agent = "TwilioProxy/1.1"
