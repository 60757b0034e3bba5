"""The weather run (``weather_run``) as a small LangChain agent loop, written with langchain-core
alone, for the tests that trace LangChain through a tracing SDK's callbacks (Langfuse's
``CallbackHandler``, LangSmith's tracer); its model and tool also drive the OpenInference
LangChain instrumentation's agents.

``weather_agent`` is a ``RunnableLambda`` named ``weather_agent`` around the loop: each turn
invokes ``prompt | model`` (a ``RunnableSequence`` chain: a ``ChatPromptTemplate`` that adds the
system message, then the chat model), runs the real ``@tool`` ``get_weather`` on every tool call
the model asked for, and ends with a ``StrOutputParser`` on the model's answer. The chat model
is ``GenericFakeChatModel`` replaying two scripted ``AIMessage`` s (a tool call, then the
answer) with usage; its tools are bound the way OpenAI-style ``bind_tools`` binds them, so
callbacks see the definitions in the run's ``invocation_params``.

``broken_agent(handled=...)`` is the same agent with the weather service down: the tool's
``TimeoutError`` ends the run, or its ``ToolException`` is turned by LangChain
(``handle_tool_error=True``) into a ``ToolMessage(status="error")`` the model answers anyway;
``broken_graph(factory)`` is a prebuilt LangGraph agent with that service down, where the graph
(its ``ToolNode``, or a middleware) handles the tool's ``TimeoutError`` or lets it end the run;
``assert_broken_weather`` is what the trajectory must hold then, whatever traced it.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import httpx2
from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, ToolException, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import ToolNode, create_react_agent

from agent_replay import StepKind, Trajectory
from fake_openai import weather_api
from weather_run import ANSWER, CALL, SYSTEM, TIMED_OUT

#: the model the fake OpenAI API answers as (``chat_openai``)
SERVED_MODEL = "gpt-4o-2024-08-06"
#: the chat model's run name, which the tracers give its llm spans
MODEL_RUN = "ScriptedChatModel"
PROMPT = ChatPromptTemplate.from_messages([("system", SYSTEM), MessagesPlaceholder("messages")])


class ScriptedChatModel(GenericFakeChatModel):
    """The fake chat model under a model name (LangChain reports it as ``ls_model_name``),
    binding tools the way ``ChatOpenAI.bind_tools`` does: their OpenAI-format definitions as
    the ``tools`` keyword of every call."""

    model_name: str = "gpt-4o"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # ChatOpenAI's: the model under both names; they end up in the invocation parameters
        return {"model_name": self.model_name, "model": self.model_name}

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"rainy in {city}"


#: the tool call the model asks for first, as a LangChain ``ToolCall``
TOOL_CALL = {
    "name": CALL["function"]["name"],
    "args": json.loads(CALL["function"]["arguments"]),
    "id": CALL["id"],
    "type": "tool_call",
}


def scripted_model() -> ScriptedChatModel:
    """Asks for the weather first (12 + 5 tokens), then answers (20 + 6)."""
    replies = iter(
        [
            AIMessage(
                "",
                tool_calls=[TOOL_CALL],
                usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
            ),
            AIMessage(
                ANSWER,
                usage_metadata={"input_tokens": 20, "output_tokens": 6, "total_tokens": 26},
            ),
        ]
    )
    return ScriptedChatModel(messages=replies)


def agent_with(weather: BaseTool) -> Runnable:
    """The weather agent with ``weather`` as its ``get_weather`` tool."""

    def weather_loop(question: str, config: RunnableConfig) -> str:
        chain = PROMPT | scripted_model().bind_tools([weather])
        messages: list[BaseMessage] = [HumanMessage(question)]
        while True:
            reply = chain.invoke({"messages": messages}, config)
            messages.append(reply)
            if not reply.tool_calls:
                return StrOutputParser().invoke(reply, config)
            messages += [weather.invoke(call, config) for call in reply.tool_calls]

    return RunnableLambda(weather_loop, name="weather_agent")


weather_agent = agent_with(get_weather)


def broken_agent(*, handled: bool) -> Runnable:
    """The weather agent with the weather service down: ``get_weather`` raises
    ``TimeoutError``, which ends the run; ``handled``: a ``ToolException`` instead, which
    LangChain (``handle_tool_error=True``) returns as ``ToolMessage(TIMED_OUT,
    status="error")``."""

    @tool("get_weather")
    def weather(city: str) -> str:
        """The weather in a city."""
        raise ToolException(TIMED_OUT) if handled else TimeoutError(TIMED_OUT)

    weather.handle_tool_error = handled
    return agent_with(weather)


#: how ``broken_graph`` builds the agent: whether the graph handles the tool's error, and what
#: the model is shown then (langchain 1.5.2, langgraph-prebuilt 1.1.3)
GRAPHS: dict[str, tuple[bool, str | None]] = {
    # create_agent's ToolNode handles only the ToolInvocationError of bad arguments by default
    "create_agent": (False, None),
    # ToolErrorMiddleware: its on_error's text, as a ToolMessage(status="error")
    "create_agent_middleware": (True, f"Error: {TIMED_OUT}"),
    # ToolNode(handle_tool_errors=True): its template around the exception's repr
    "tool_node": (True, f"Error: TimeoutError('{TIMED_OUT}')\n Please fix your mistakes."),
}


def broken_graph(factory: str) -> Runnable:
    """A prebuilt LangGraph agent named ``weather_agent`` on the scripted model whose
    ``get_weather`` raises ``TimeoutError`` (see ``GRAPHS``): LangChain's ``create_agent`` as it
    comes, or with a ``ToolErrorMiddleware`` that shows the model the error, or LangGraph's
    ``create_react_agent`` on a ``ToolNode`` with ``handle_tool_errors=True``."""

    @tool("get_weather")
    def weather(city: str) -> str:
        """The weather in a city."""
        raise TimeoutError(TIMED_OUT)

    if factory == "tool_node":
        with warnings.catch_warnings():  # deprecated since LangGraph 1.0, still much used
            warnings.simplefilter("ignore")
            return create_react_agent(
                scripted_model(),
                ToolNode([weather], handle_tool_errors=True),
                prompt=SYSTEM,
                name="weather_agent",
            )
    handled = GRAPHS[factory][0]
    middleware = [ToolErrorMiddleware(lambda error, request: f"Error: {error}")] * handled
    return create_agent(
        scripted_model(),
        [weather],
        system_prompt=SYSTEM,
        name="weather_agent",
        middleware=middleware,
    )


def assert_broken_weather(
    traj: Trajectory,
    *,
    handled: bool,
    llm_name: str,
    error_type: str = "TimeoutError",
    agent: str | None = "weather_agent",
    shown: str | None = None,
) -> None:
    """The trajectory of ``broken_agent(handled=handled)``: the planning llm step,
    then the tool step, failed with ``TIMED_OUT`` (type ``error_type``, or ``"error"`` when
    LangChain handled it: nothing records the exception's type then). Handled, the tool's
    result is the error text and the model answers after it; otherwise the run ends there,
    failed with the same error. ``agent``: the acting agent the tracer names. ``shown``: what
    the model was shown when the graph handled the error outside the tool (``broken_graph``):
    the tool's run raised, so its step keeps the exception's type, and its result is that
    text, taken from the model's next input. The capture report counts nothing missing."""
    names = [(StepKind.LLM, llm_name), (StepKind.TOOL, "get_weather")]
    assert [(s.kind, s.name) for s in traj.steps] == names + handled * [(StepKind.LLM, llm_name)]
    tool_step = traj.steps[1]
    assert {s.agent for s in traj.steps} == {agent}
    assert (tool_step.attributes["requested_by"], tool_step.attributes["tool_call_id"]) == (0, "c1")
    typed = not handled or shown is not None
    error = {"type": error_type if typed else "error", "message": TIMED_OUT}
    assert tool_step.error == error
    assert [s.error for s in traj.steps if s is not tool_step] == [None] * (1 + handled)
    if handled:
        given = shown or TIMED_OUT
        assert tool_step.action == given  # what the model was given
        response = traj.steps[2].inputs["messages"][-1]["parts"]
        assert response == [{"type": "tool_call_response", "response": given, "id": "c1"}]
        assert traj.steps[2].action == [
            {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}
        ]
        assert traj.outcome is None
    else:
        assert tool_step.action is None
        assert traj.outcome.failed is True and traj.outcome.error == error
    report = traj.metadata["capture"]
    assert report["tool_steps_without_result"] == [] and report["opaque_steps"] == []
    assert report["unanswered_tool_calls"] == [] and report["notes"] == []
    traj.verify()


def chat_openai(served_model: str = SERVED_MODEL) -> ChatOpenAI:
    """``ChatOpenAI`` for ``gpt-4o`` on the weather run's fake OpenAI API
    (``fake_openai.weather_api``, answering as ``served_model``), no network."""
    return ChatOpenAI(
        model="gpt-4o",
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=weather_api(served_model)),
        max_retries=0,
    )
