"""`voicecore up`'s preflight: before anything starts, one trial session with the configured URL, key, model
(or Azure deployment) and the agent's own session.update, so a configuration the vendor refuses stops the
node with the vendor's words instead of a node that answers every call with an apology.

Owns the check and what it prints; the trial session itself is voicecore/realtime/transport.py's. Skipped for
the built-in simulator (it starts with the stack) and with `voicecore up --no-preflight`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import TextIO

from voicecore.agent.settings import agent_for_config
from voicecore.agent.spec import AgentSpec
from voicecore.call.build import first_session_update
from voicecore.config import Config
from voicecore.gemini import transport as gemini_connect
from voicecore.gemini.driver import VENDOR as GEMINI, driver_for_agent, vendor_of
from voicecore.gemini.transport import VertexTokens
from voicecore.gemini.vertex_tokens import TokenError
from voicecore.realtime import transport as connect


def model_endpoint(config: Config, environ: Mapping[str, str]) -> connect.Endpoint:
    """The endpoint the model worker dials, without a call id."""
    return connect.endpoint(config.model_url, config.model, config.realtime_api_key, config.model_provider,
                            config.realtime_deployment, environ, naming=config.realtime_naming)  # type: ignore[arg-type]


def run_preflight(config: Config, agent: AgentSpec, out: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """True when the vendor accepted a session configured as the agent's calls will be; False (said on
    ``out``, with the vendor's message) when it did not: the node must not start."""
    environ = os.environ if environ is None else environ
    if vendor_of(config.model, agent.model_vendor) == GEMINI:  # the agent's setup, as the Gemini driver sends it
        access = gemini_connect.access_for_config(config, environ)
        model = access.model_name(config.model)
        token = quota_project = ""
        if access.kind == gemini_connect.VERTEX:
            tokens = VertexTokens()
            try:
                token = asyncio.run(tokens.token())
            except TokenError as exc:
                print(f"voicecore up: preflight: no Vertex AI access token for {access.describe()}: {exc}", file=out,
                      flush=True)
                print("voicecore up: nothing was started (check GOOGLE_APPLICATION_CREDENTIALS and the service "
                      "account; --no-preflight starts without this check)", file=out, flush=True)
                return False
            finally:
                tokens.close()
            quota_project = tokens.quota_project
        target = gemini_connect.endpoint_for_access(access, environ, token=token, quota_project=quota_project)
        setup = driver_for_agent(agent_for_config(agent, config), "CApreflight", model=model).setup_message()
        result = asyncio.run(gemini_connect.trial_session(target, setup))
    else:
        target = model_endpoint(config, environ)
        model = config.realtime_deployment or config.model if config.model_provider == "azure" else config.model
        update = first_session_update(config, agent_for_config(agent, config))  # the worker's agent, as it runs it
        result = asyncio.run(connect.trial_session(target, update))
    if result.ok:
        print(f"voicecore up: preflight: {target.describe()} accepted model {model} and the agent's session "
              f"({result.elapsed_s * 1000:.0f} ms)", file=out, flush=True)
        return True
    fault = result.fault
    assert fault is not None
    what = "refused this configuration" if fault.fatal else "could not be used just now"
    print(f"voicecore up: preflight: the model vendor {what} ({target.describe()}, model {model}): {fault.describe()}",
          file=out, flush=True)
    gemini_auth = {gemini_connect.VERTEX: "check the service account's access to Vertex AI in gemini_vertex_project",
                   gemini_connect.API_KEY: "check GEMINI_API_KEY (or GOOGLE_API_KEY, or realtime_api_key)"}
    auth_hint = (gemini_auth.get(gemini_connect.access_for_config(config, environ).kind, "")
                 if target.provider in (gemini_connect.PROVIDER, gemini_connect.VERTEX_PROVIDER) else "")
    hint = {"auth": auth_hint or "check realtime_api_key (VOICECORE_REALTIME_API_KEY)",
            "model": "check model (VOICECORE_MODEL)" + (" and realtime_deployment" if config.model_provider == "azure" else ""),
            "quota": "the vendor account has no quota left",
            "session_config": "the agent's session settings (voice, tools, instructions) were rejected",
            "retired": "this API shape is retired"}.get(fault.kind, "a passing trouble: try again, or skip the check")
    print(f"voicecore up: nothing was started ({hint}; --no-preflight starts without this check)", file=out, flush=True)
    return False
