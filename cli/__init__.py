"""agentledger.cli."""

__all__: list[str] = []
