"""Where the node's agent talks to its model, and with which credentials: decided once at `voicecore up`
from the agent's vendor, the configuration and the environment, and said in one line at start.

Owns the rule. An agent on OpenAI (the Realtime API) uses the built-in model simulator when neither
``realtime_url`` nor ``realtime_api_key`` is set, as it always has; an agent on Gemini uses Google when it
has Gemini credentials (GEMINI_API_KEY / GOOGLE_API_KEY / ``realtime_api_key``: the Gemini API; or
``gemini_vertex_project`` with Application Default Credentials: Vertex AI), or ``realtime_url`` when set (a
Gemini Live simulator, a proxy). A Gemini agent with neither has nowhere to go: the built-in simulator
speaks the Realtime protocol only, so `up` refuses to start and names what is missing. Pure: fed the
configuration, the agent and the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from voicecore.agent.spec import AgentSpec
from voicecore.config import Config
from voicecore.gemini import transport as gemini_connect
from voicecore.gemini.driver import VENDOR as GEMINI, vendor_of

OPENAI_CREDENTIALS = "realtime_api_key (VOICECORE_REALTIME_API_KEY) or realtime_url"
GEMINI_CREDENTIALS = ("GEMINI_API_KEY (or GOOGLE_API_KEY, or realtime_api_key), or gemini_vertex_project with "
                      "Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS), or realtime_url")


@dataclass(frozen=True, slots=True)
class VendorRoute:
    agent: str
    vendor: str  # openai | gemini
    model: str
    endpoint: str  # where, and with which credentials (never a key or a token)
    simulated: bool  # the built-in model simulator (started with the stack)
    missing: str = ""  # credentials the agent's vendor would need and the node lacks ("": none)
    refused: bool = False  # the node cannot serve this agent at all: `up` stops

    def line(self) -> str:
        said = f"agent {self.agent}: model {self.model} on {self.vendor}, {self.endpoint}"
        if self.missing:
            said += f"; missing: {self.missing}"
        return said


def route_for(config: Config, agent: AgentSpec, environ: Mapping[str, str]) -> VendorRoute:
    """The route of ``agent`` (as configured: ``config.model`` is the agent's model after configure)."""
    vendor = vendor_of(config.model, agent.model_vendor)
    if vendor == GEMINI:
        access = gemini_connect.access_for_config(config, environ)
        model = access.model_name(config.model)
        if access.kind == gemini_connect.NO_CREDENTIALS and not config.realtime_url:
            return VendorRoute(agent.name, vendor, model, "no endpoint (the built-in simulator speaks the OpenAI "
                               "Realtime protocol only)", False, GEMINI_CREDENTIALS, refused=True)
        endpoint = access.describe()
        if config.realtime_url:
            endpoint += ", realtime_url"
        return VendorRoute(agent.name, vendor, model, endpoint, False,
                           "" if access.kind != gemini_connect.NO_CREDENTIALS else GEMINI_CREDENTIALS)
    if config.uses_simulator:
        return VendorRoute(agent.name, vendor, config.model, "the built-in model simulator (no OpenAI credentials)",
                           True, OPENAI_CREDENTIALS)
    provider = config.model_provider
    credentials = "API key" if config.realtime_api_key else "no API key"
    return VendorRoute(agent.name, vendor, config.model, f"{provider} {config.model_url.split('?', 1)[0]} ({credentials})",
                       False)
