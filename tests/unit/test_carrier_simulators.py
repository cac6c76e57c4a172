"""Each carrier's simulator side (``voicecore/carriers/<name>/sim.py``, through its descriptor): what the carrier
simulator asks a carrier instead of knowing it. The answer webhooks, answer documents and stream upgrades are
pinned by tests/unit/test_carrier_sim_modes.py; here: which adapter plays each carrier's stream and its calls'
ids."""

from __future__ import annotations

import pytest

from voicecore.carriers import registry
from voicecore.sim import carrier_modes_core as modes


class CountingIds:
    """Ids that say which kind was drawn, so a carrier's shape shows."""

    def uuid(self):
        return "uuid"

    def uuid_hex(self):
        return "hex"

    def token_hex(self, nbytes):
        return "h" * 2 * nbytes

    def token_urlsafe(self, nbytes):
        return "u" * nbytes


def test_every_carrier_but_twilio_is_played_by_the_adapter_on_its_carrier_side():
    for carrier in registry.CARRIERS:
        adapter = modes.adapter_for(carrier.name)
        if carrier.carrier_side is None:
            assert adapter is None  # the simulator's own core (Twilio's)
        else:
            assert adapter.carrier_side is carrier.carrier_side and adapter.carrier == carrier.name
    assert modes.adapter_for("twilio") is None
    with pytest.raises(ValueError):
        modes.adapter_for("no-such-carrier")


def test_a_calls_ids_have_its_carriers_shape():
    ids = {name: registry.get(name).simulator.new_identity(None, None, "+1", "+2", CountingIds())
           for name in ("telnyx", "plivo", "vonage", "exotel")}
    assert ids["telnyx"].call_id == "v3:" + "u" * 39 and ids["telnyx"].session_id == "uuid"
    assert ids["plivo"].call_id == ids["vonage"].call_id == ids["plivo"].stream_id == "uuid"
    assert (ids["exotel"].call_id, ids["exotel"].stream_id, ids["exotel"].account_id, ids["exotel"].session_id) == (
        "hex", "hex", "simulator", "")
    kept = registry.get("telnyx").simulator.new_identity("v3:given", "acct", "+1", "+2", CountingIds())
    assert (kept.call_id, kept.account_id) == ("v3:given", "acct")
    assert registry.get("vonage").simulator.new_nonce(CountingIds()) == "uuid"  # a JWT id
    assert registry.get("plivo").simulator.new_nonce(CountingIds()) == "h" * 20  # a signature nonce
