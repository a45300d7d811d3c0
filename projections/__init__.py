"""agentledger.projections."""

__all__: list[str] = []
