"""agentledger.agents.models."""

__all__: list[str] = []
