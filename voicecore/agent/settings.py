"""How an agent and the configuration meet: which settings the agent's files decide, and which the operator's.

Owns the precedence rules, in one place: the agent names its model, knowledge folder and languages unless the
operator set them (``VOICECORE_MODEL`` aside: an agent that names a model gets it); a call-wide
``gate_policy`` applies where the agent sets none; ``call_control = auto`` is the turn-taking controller,
for the configured agent or the shipped default one. Pure functions of (config, agent); loading the
files is voicecore/agent/load.py's business.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from voicecore.agent.spec import AgentSpec
from voicecore.config import Config, effective_call_control, forbidden_phrases, node_policies


def call_control(config: Config) -> str:
    """spine or turns: what ``call_control`` means for this configuration."""
    return effective_call_control(config)


def config_for_agent(config: Config, agent: AgentSpec) -> Config:
    """The configuration every process of the stack runs with (the supervisor passes it on as VOICECORE_*)."""
    return dataclasses.replace(
        config,
        call_control=call_control(config),
        knowledge_dir=config.knowledge_dir or agent.knowledge_dir,
        model=agent.model or config.model,
        gate_language=config.gate_language if config.gate_language != "auto" else agent.gate_language,
    )


def agent_for_config(agent: AgentSpec, config: Config) -> AgentSpec:
    """The agent as this configuration runs it: a call-wide gate policy where the agent's files set none."""
    changes: dict[str, str] = {}
    if config.gate_policy != "off":
        if agent.gate_answers == "off":
            changes["gate_answers"] = config.gate_policy
        if agent.gate_prompts == "off":
            changes["gate_prompts"] = config.gate_policy
    return dataclasses.replace(agent, **changes) if changes else agent


def flow_overrides(config: Config) -> dict[str, dict]:
    """The operator's per-node gate settings (JSON-able keyword arguments of AgentFlow)."""
    args: dict[str, dict] = {}
    if config.gate_node_policies:
        args["node_policies"] = node_policies(config.gate_node_policies)
    if config.gate_forbidden:
        args["node_forbidden"] = forbidden_phrases(config.gate_forbidden)
    return args


def configure(config: Config, environ: Mapping[str, str]) -> tuple[Config, AgentSpec]:
    """Load the configured agent (its directory, or the shipped default) and resolve the configuration with
    it. Raises voicecore.agent.load.AgentError listing every problem of the agent's files."""
    from voicecore.agent.load import load_configured_agent

    agent = load_configured_agent(config, environ)
    return config_for_agent(config, agent), agent
