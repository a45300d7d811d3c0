"""agentledger.agents.integrations: bridges from other agent stacks onto the ledger.

Each module needs its optional extra (``pip install 'agentledger[langgraph]'``, ``[otel]``,
``[openai-agents]``).
"""
