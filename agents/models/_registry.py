"""`model_from_spec`: turn a spec string such as `openai:gpt-4o-mini` into a `ChatModel`.

This module owns the spec grammar the CLI and configuration use: `openai:MODEL`,
`anthropic:MODEL` and `scripted:FILE`. It imports the vendor adapters only when a spec names them,
so parsing a scripted spec never imports a vendor SDK. It keeps no registry state: every call
builds a new model.
"""

from __future__ import annotations

from agentledger.agents.models._protocol import ChatModel
from agentledger.agents.models._scripted import ScriptedModel
from agentledger.agents.models.errors import UnknownModelSpecError

KEEP_REQUESTS = 16
"""How many of its latest requests a scripted model named by a spec keeps (nobody reads them
but a debugger; keeping all of a long run's would grow with the square of its length)."""


def model_from_spec(spec: str, *, base_url: str | None = None) -> ChatModel:
    """Build the model a spec names: `openai:MODEL`, `anthropic:MODEL` or `scripted:FILE`.

    `base_url` points a vendor adapter at another server (an OpenAI-compatible one, a proxy); it
    is ignored for scripted models. API keys come from the environment. Raises
    `UnknownModelSpecError` (a `ValueError`) naming the spec and the accepted forms.
    """
    provider, sep, rest = spec.partition(":")
    if not sep or not rest.strip():
        raise UnknownModelSpecError(spec)
    if provider == "openai":
        from agentledger.agents.models.openai import OpenAIChatModel

        return OpenAIChatModel(rest, base_url=base_url)
    if provider == "anthropic":
        from agentledger.agents.models.anthropic import AnthropicChatModel

        return AnthropicChatModel(rest, base_url=base_url)
    if provider == "scripted":
        return ScriptedModel.from_file(rest, keep_requests=KEEP_REQUESTS)
    raise UnknownModelSpecError(spec)
