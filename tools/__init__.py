"""agentledger.tools: the tool registry, the ``@tool`` decorator and the built-in offline tools.

Define a tool with ``@tool`` (schema from signature, type hints and Google-style docstring),
register it in an explicit ``ToolRegistry`` (no globals), and call it with ``registry.call`` or
``await registry.acall``: every call returns a ``ToolResult`` envelope and never raises. The
built-in tools answer from bundled offline data; ``builtin_registry()`` returns a new registry
holding them. This package imports nothing else of agentledger.
"""

from agentledger.tools._builtin import (
    BUILTIN_TOOLS,
    add_note,
    builtin_registry,
    calculator,
    create_reminder,
    find_pois,
    geocode,
    send_message,
    transit,
    weather,
)
from agentledger.tools._envelope import RiskLevel, ToolErrorInfo, ToolResult, ToolSpec
from agentledger.tools._json import JSONValue
from agentledger.tools._registry import ToolRegistry
from agentledger.tools._tool import Tool, tool
from agentledger.tools.errors import (
    ToolError,
    ToolFailure,
    ToolRegistrationError,
    UnknownToolError,
)

__all__ = [
    "BUILTIN_TOOLS",
    "JSONValue",
    "RiskLevel",
    "Tool",
    "ToolError",
    "ToolErrorInfo",
    "ToolFailure",
    "ToolRegistrationError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "UnknownToolError",
    "add_note",
    "builtin_registry",
    "calculator",
    "create_reminder",
    "find_pois",
    "geocode",
    "send_message",
    "tool",
    "transit",
    "weather",
]
