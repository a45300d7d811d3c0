"""agentledger.tools."""

__all__: list[str] = []
