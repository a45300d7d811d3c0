"""agentledger.agents."""

__all__: list[str] = []
