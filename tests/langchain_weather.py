"""The weather run (``weather_run``) as a small LangChain agent loop, written with langchain-core
alone, for the tests that trace LangChain through a tracing SDK's callbacks (Langfuse's
``CallbackHandler``, LangSmith's tracer).

``weather_agent`` is a ``RunnableLambda`` named ``weather_agent`` around the loop: each turn
invokes ``prompt | model`` (a ``RunnableSequence`` chain: a ``ChatPromptTemplate`` that adds the
system message, then the chat model), runs the real ``@tool`` ``get_weather`` on every tool call
the model asked for, and ends with a ``StrOutputParser`` on the model's answer. The chat model
is ``GenericFakeChatModel`` replaying two scripted ``AIMessage`` s (a tool call, then the
answer) with usage; its tools are bound the way OpenAI-style ``bind_tools`` binds them, so
callbacks see the definitions in the run's ``invocation_params``.
"""

from __future__ import annotations

import json

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from weather_run import ANSWER, CALL

#: the chat model's run name, which the tracers give its llm spans
MODEL_RUN = "ScriptedChatModel"
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Be brief."), MessagesPlaceholder("messages")]
)


class ScriptedChatModel(GenericFakeChatModel):
    """The fake chat model under a model name (LangChain reports it as ``ls_model_name``)."""

    model_name: str = "gpt-4o"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"rainy in {city}"


def scripted_model() -> Runnable:
    tool_call = {
        "name": CALL["function"]["name"],
        "args": json.loads(CALL["function"]["arguments"]),
        "id": CALL["id"],
        "type": "tool_call",
    }
    replies = iter(
        [
            AIMessage(
                "",
                tool_calls=[tool_call],
                usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
            ),
            AIMessage(
                ANSWER,
                usage_metadata={"input_tokens": 20, "output_tokens": 6, "total_tokens": 26},
            ),
        ]
    )
    # what ChatOpenAI.bind_tools does: the OpenAI-format definitions as the `tools` kwarg
    return ScriptedChatModel(messages=replies).bind(tools=[convert_to_openai_tool(get_weather)])


def weather_loop(question: str, config: RunnableConfig) -> str:
    chain = PROMPT | scripted_model()
    messages: list[BaseMessage] = [HumanMessage(question)]
    while True:
        reply = chain.invoke({"messages": messages}, config)
        messages.append(reply)
        if not reply.tool_calls:
            return StrOutputParser().invoke(reply, config)
        messages += [get_weather.invoke(call, config) for call in reply.tool_calls]


weather_agent = RunnableLambda(weather_loop, name="weather_agent")
