"""Agents as files: an agent's settings, flow and tools (spec.py), read and checked from its directory (load.py).

The package's modules import nothing of the call path; the shell loads an agent once, before it starts.
"""

from voicecore.agent.load import AgentError, AgentProblem, default_agent_dir, load_agent, load_configured_agent
from voicecore.agent.spec import AgentSpec, FlowSpec, FunctionSpec, NodeSpec

__all__ = ["AgentError", "AgentProblem", "AgentSpec", "FlowSpec", "FunctionSpec", "NodeSpec", "default_agent_dir",
           "load_agent", "load_configured_agent"]
