"""The SDK recipe registry: data only, no code.

Each :class:`Recipe` names a framework, the module whose presence means it is installed, the
distribution whose version is checked, the version range the recipe is known to work with (and
the version it was tested with here), and its :class:`Target` s. A target is what
``instrument.patch`` needs: a dotted path, the step kind and name, whether it is async or
returns a stream (and how to spot that), the SDK classes a replay rebuilds (``module:Name``),
where a swap-model hint goes, where token usage sits in the response data, and the SDK function
that turns a held raw response into what the call returns (``reparse``).

To support another SDK, add a recipe here, or call ``instrument.patch`` with the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RECIPES", "Recipe", "Target"]


@dataclass(frozen=True)
class Target:
    """One patched callable of a recipe (fields as in ``instrument.patch``)."""

    path: str
    kind: str
    name: str
    is_async: bool = False
    stream_arg: str | None = None
    iterator: bool = False
    stream_class: str | None = None
    response_type: str | None = None
    manager_class: str | None = None
    manager_args: tuple[str, ...] = ()
    model_arg: str | None = "model"
    model_attrs: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    usage_input: tuple[str, ...] = ()
    usage_output: tuple[str, ...] = ()
    reparse: str | None = None
    reparse_response: str = "response"
    reparse_args: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Recipe:
    """How to intercept one framework.

    ``versions`` is a comma-separated range (``">=1.40,<4"``) of the distribution's version the
    recipe is known to work with; ``tested`` the version its tests ran against.
    """

    framework: str
    module: str
    distribution: str
    versions: str
    tested: str
    targets: tuple[Target, ...]
    notes: str = ""


# transport-level arguments: they change how a request is sent, not what is asked. Headers
# included: an instrumentation installed over the patch (OpenLLMetry's OpenAI one) injects a
# per-call `traceparent` there, which would make every recorded call unique and no replay hold
_TRANSPORT = ("timeout", "extra_headers")

_OPENAI_CHAT_USAGE = {
    "usage_input": ("usage.prompt_tokens",),
    "usage_output": ("usage.completion_tokens",),
}
_OPENAI_PARSE: dict[str, Any] = {
    "reparse": "openai.lib._parsing:parse_chat_completion",
    "reparse_response": "chat_completion",
    "reparse_args": (("response_format", "response_format"), ("input_tools", "tools")),
}
_OPENAI_RESPONSES_USAGE = {
    "usage_input": ("usage.input_tokens", "response.usage.input_tokens"),
    "usage_output": ("usage.output_tokens", "response.usage.output_tokens"),
}
_ANTHROPIC_USAGE = {
    "usage_input": ("usage.input_tokens", "message.usage.input_tokens"),
    "usage_output": ("usage.output_tokens",),
}

OPENAI = Recipe(
    framework="openai",
    module="openai",
    distribution="openai",
    versions=">=1.66,<4",
    tested="3.57.0",
    notes="client.chat.completions.stream() goes through create(stream=True) and is covered; "
    "chat.completions.parse() is a step of its own; responses.parse() is not covered; "
    "with_raw_response / with_streaming_response return raw HTTP responses and are not.",
    targets=(
        Target(
            "openai.resources.chat.completions.Completions.create",
            "llm",
            "openai.chat.completions.create",
            stream_arg="stream",
            stream_class="openai:Stream",
            response_type="openai.types.chat:ChatCompletion",
            exclude=_TRANSPORT,
            **_OPENAI_CHAT_USAGE,
        ),
        Target(
            "openai.resources.chat.completions.AsyncCompletions.create",
            "llm",
            "openai.chat.completions.create",
            is_async=True,
            stream_arg="stream",
            stream_class="openai:AsyncStream",
            response_type="openai.types.chat:ChatCompletion",
            exclude=_TRANSPORT,
            **_OPENAI_CHAT_USAGE,
        ),
        # parse(response_format=SomeModel): one step (the SDK posts by itself, not through
        # create); a held response goes through the SDK's own parser with the caller's class
        Target(
            "openai.resources.chat.completions.Completions.parse",
            "llm",
            "openai.chat.completions.parse",
            response_type="openai.types.chat:ChatCompletion",
            exclude=_TRANSPORT,
            **_OPENAI_PARSE,
            **_OPENAI_CHAT_USAGE,
        ),
        Target(
            "openai.resources.chat.completions.AsyncCompletions.parse",
            "llm",
            "openai.chat.completions.parse",
            is_async=True,
            response_type="openai.types.chat:ChatCompletion",
            exclude=_TRANSPORT,
            **_OPENAI_PARSE,
            **_OPENAI_CHAT_USAGE,
        ),
        # embeddings: a step of their own kind; a swap-model plan's chat model does not apply
        Target(
            "openai.resources.embeddings.Embeddings.create",
            "embedding",
            "openai.embeddings.create",
            response_type="openai.types:CreateEmbeddingResponse",
            model_arg=None,
            exclude=_TRANSPORT,
            usage_input=("usage.prompt_tokens",),
        ),
        Target(
            "openai.resources.embeddings.AsyncEmbeddings.create",
            "embedding",
            "openai.embeddings.create",
            is_async=True,
            response_type="openai.types:CreateEmbeddingResponse",
            model_arg=None,
            exclude=_TRANSPORT,
            usage_input=("usage.prompt_tokens",),
        ),
        Target(
            "openai.resources.responses.Responses.create",
            "llm",
            "openai.responses.create",
            stream_arg="stream",
            stream_class="openai:Stream",
            response_type="openai.types.responses:Response",
            exclude=_TRANSPORT,
            **_OPENAI_RESPONSES_USAGE,
        ),
        Target(
            "openai.resources.responses.AsyncResponses.create",
            "llm",
            "openai.responses.create",
            is_async=True,
            stream_arg="stream",
            stream_class="openai:AsyncStream",
            response_type="openai.types.responses:Response",
            exclude=_TRANSPORT,
            **_OPENAI_RESPONSES_USAGE,
        ),
    ),
)

ANTHROPIC = Recipe(
    framework="anthropic",
    module="anthropic",
    distribution="anthropic",
    versions=">=0.40,<3",
    tested="2.14.0",
    notes="messages.stream() (sync) is replayed through a real MessageStreamManager; the async "
    "AsyncMessages.stream() helper is not intercepted: use create(stream=True).",
    targets=(
        Target(
            "anthropic.resources.messages.Messages.create",
            "llm",
            "anthropic.messages.create",
            stream_arg="stream",
            stream_class="anthropic:Stream",
            response_type="anthropic.types:Message",
            exclude=_TRANSPORT,
            **_ANTHROPIC_USAGE,
        ),
        Target(
            "anthropic.resources.messages.AsyncMessages.create",
            "llm",
            "anthropic.messages.create",
            is_async=True,
            stream_arg="stream",
            stream_class="anthropic:AsyncStream",
            response_type="anthropic.types:Message",
            exclude=_TRANSPORT,
            **_ANTHROPIC_USAGE,
        ),
        Target(
            "anthropic.resources.messages.Messages.stream",
            "llm",
            "anthropic.messages.stream",
            stream_class="anthropic:Stream",
            manager_class="anthropic.lib.streaming:MessageStreamManager",
            manager_args=("output_format",),
            exclude=_TRANSPORT,
            **_ANTHROPIC_USAGE,
        ),
    ),
)

# One step per model call: invoke/ainvoke/stream/astream are the public entry points of every
# chat model (the _generate layer below them is called once per prompt of a batch, and a
# LangChain model's own SDK call happens inside the step, so it is not a second one).
_LC_MODEL = "langchain.{self.__class__.__name__}"
LANGCHAIN = Recipe(
    framework="langchain",
    module="langchain_core",
    distribution="langchain-core",
    versions=">=0.3,<2",
    tested="1.8.3",
    notes="Tools are steps named after the tool (tool.name); a RunnableConfig argument is "
    "passed through but not stored. Swap-model copies the model with model_name/model set.",
    targets=(
        Target(
            "langchain_core.language_models.chat_models.BaseChatModel.invoke",
            "llm",
            _LC_MODEL,
            response_type="langchain_core.messages:AIMessage",
            model_arg=None,
            model_attrs=("model_name", "model"),
            exclude=("config",),
        ),
        Target(
            "langchain_core.language_models.chat_models.BaseChatModel.ainvoke",
            "llm",
            _LC_MODEL,
            is_async=True,
            response_type="langchain_core.messages:AIMessage",
            model_arg=None,
            model_attrs=("model_name", "model"),
            exclude=("config",),
        ),
        Target(
            "langchain_core.language_models.chat_models.BaseChatModel.stream",
            "llm",
            _LC_MODEL,
            iterator=True,
            model_arg=None,
            model_attrs=("model_name", "model"),
            exclude=("config",),
        ),
        Target(
            "langchain_core.language_models.chat_models.BaseChatModel.astream",
            "llm",
            _LC_MODEL,
            is_async=True,
            iterator=True,
            model_arg=None,
            model_attrs=("model_name", "model"),
            exclude=("config",),
        ),
        Target(
            "langchain_core.tools.BaseTool.invoke",
            "tool",
            "{self.name}",
            model_arg=None,
            exclude=("config",),
        ),
        Target(
            "langchain_core.tools.BaseTool.ainvoke",
            "tool",
            "{self.name}",
            is_async=True,
            model_arg=None,
            exclude=("config",),
        ),
    ),
)

LITELLM = Recipe(
    framework="litellm",
    module="litellm",
    distribution="litellm",
    versions=">=1.40,<2",
    tested="1.110.2",
    notes="Patches the module attributes litellm.completion / litellm.acompletion: code that "
    "did `from litellm import completion` before installing keeps the unpatched function.",
    targets=(
        Target(
            "litellm.completion",
            "llm",
            "litellm.completion",
            stream_arg="stream",
            response_type="litellm:ModelResponse",
            exclude=_TRANSPORT,
            **_OPENAI_CHAT_USAGE,
        ),
        Target(
            "litellm.acompletion",
            "llm",
            "litellm.completion",
            is_async=True,
            stream_arg="stream",
            response_type="litellm:ModelResponse",
            exclude=_TRANSPORT,
            **_OPENAI_CHAT_USAGE,
        ),
    ),
)

RECIPES: tuple[Recipe, ...] = (OPENAI, ANTHROPIC, LANGCHAIN, LITELLM)
"""Every recipe, by framework name in ``instrument.installed(...)``."""
