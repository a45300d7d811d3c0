"""agentledger.replay."""

__all__: list[str] = []
