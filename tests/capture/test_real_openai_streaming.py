"""Streamed and async OpenAI chat calls through the three real OpenAI instrumentations, offline.

The real ``openai`` 3.57 client (``OpenAI`` and ``AsyncOpenAI``, over httpx2) talks to the weather
API of ``fake_openai``: a ``get_weather`` call, then the answer, as a JSON body or, when the
request streams, as server-sent events (``data: {chunk}`` lines and ``data: [DONE]``): the tool
call's id and name in the first delta and its arguments in two fragments under its ``index``,
the answer in pieces of 8 characters, the finish reason in a chunk of its own and, with
``stream_options={"include_usage": True}``, the usage in a last chunk without choices. The app
assembles the streamed message itself (or lets ``client.chat.completions.stream(...)`` do it),
runs the tool in an ``execute_tool`` span and sends the result back, all inside an
``invoke_agent`` span made with the OTel API (the instrumentations make neither). Async runs
are driven with ``asyncio.run``. Everything else is real: the instrumentors, the OTel SDK, the
span processor and the SQLite store; the spans are read both ways (``attach`` into SQLite,
``from_otel_spans`` on what an ``InMemorySpanExporter`` kept).

What the instrumentations record of a streamed call (sync and async alike; the
``chat.completions.stream`` helper calls ``create(stream=True)``, so it is one span too):

* ``opentelemetry-instrumentation-genai-openai`` 1.3b0 (``span_only``): ``chat gpt-4o`` with
  ``gen_ai.request.stream=true``, ``gen_ai.response.time_to_first_chunk``, the assembled
  ``gen_ai.output.messages`` (the tool call with id, name and parsed arguments), the response
  id and model, ``gen_ai.response.finish_reasons`` as the API says it (``tool_calls``, while the
  output message says ``tool_call``) and the usage when the stream carried it.
* ``openinference-instrumentation-openai`` 0.1.66: ``ChatCompletion`` (LLM) with ``stream`` in
  ``llm.invocation_parameters``, the assembled message flattened under
  ``llm.output_messages.0.*``, ``output.value`` the accumulated ``chat.completion.chunk``, token
  counts when the stream carried them, and a ``First Token Stream Event`` event.
* Traceloop's ``opentelemetry-instrumentation-openai`` 0.62.4: ``openai.chat`` with
  ``gen_ai.is_streaming=true``, one ``gen_ai.content.completion.chunk`` event per chunk (no
  attributes) and the assembled ``gen_ai.output.messages``. Its accumulator starts the
  message's text at ``""``, so a streamed tool call is written with an empty text part before
  it (a non-streamed one has none). Through the ``stream`` helper, which passes ``omit`` for
  every parameter not given, it writes ``gen_ai.request.temperature`` / ``max_tokens`` /
  ``top_p`` / ``frequency_penalty`` / ``presence_penalty`` (and a few others) with the value
  ``None`` (the SDK's replacement for a value it cannot store).

None of them estimates usage: a stream without ``include_usage`` has no token counts. Each
ends its span when the app has read the stream, and makes it a child of the span current when
the call was made: two calls streamed at once with ``asyncio.gather`` are two sibling spans,
the second inside the first's time when the first is read last.

A stream that breaks off (the answer streamed from a real loopback server, ``fake_openai``'s
``breaking_stream``): the server closes the connection in the middle of the body (the client
raises ``openai.APIConnectionError("Connection error.")`` from httpx2's ``RemoteProtocolError``)
or sends an ``error`` chunk (``openai.APIError`` with its message); or the app stops reading and
closes the stream (a ``with`` block), or drops it unclosed. Every instrumentation ends the span
with the text received as the output and no usage (the usage chunk never came):

* OTel GenAI: the finish reason ``error`` (what it records for a choice that got none), in
  ``gen_ai.response.finish_reasons`` and the output message; status ERROR with the qualified
  ``error.type`` and the message when the client raised (no exception event); UNSET when the
  app closed the stream; an unclosed stream's span ends when the stream is garbage-collected,
  in ERROR described ``"abandoned stream"`` with ``error.type=_OTHER`` (opentelemetry-util-genai
  1.3b0's ``AbandonedStreamError``), though nothing failed.
* OpenInference: no ``llm.finish_reason`` (a whole stream has one); status ERROR with
  ``"Type: message"`` and the exception event when the client raised, UNSET otherwise: nothing
  says the output is partial.
* Traceloop: status OK in every case, also when the client raised (its stream wrapper ends the
  span OK before it sets the ERROR status, which then does not take), and the output message's
  ``finish_reason`` empty (as its LangChain instrumentation writes for any message without
  one); an unclosed stream's span ends when the stream is collected. The run's failure is only
  on the agent's span.

Mapping fixed on these spans: an abandoned stream is no failed call (and not a failed run); a
step whose output ends with the finish reason ``error`` or was abandoned gets a capture note
saying the output is partial. Before that: an empty text part is no content (it was kept, so
Traceloop's streamed tool call read differently from the same call not streamed); a request
parameter recorded as ``None`` is not a parameter; two llm spans of one instrumentation side by
side are two calls (OpenInference records no response id, so two concurrent calls with the same
answer were taken for one call recorded twice, and the second was dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

from agent_replay import StepKind
from agent_replay.mapping import ABANDONED_NOTE, CUT_SHORT_NOTE
from agent_spans import genai_agent_span, genai_tool_span
from fake_openai import (
    STREAM_ERROR,
    breaking_stream,
    chat_chunks,
    chat_completion,
    serving,
    sse_events,
    weather_api,
)
from instrumenting import instrumented, openai_instrumentor
from langchain_weather import SERVED_MODEL
from stored import captured
from weather_run import ANSWER, CALL_PART, QUESTION, SYSTEM, TOOL, TOOL_DEFINITION, text
from weather_run import assert_weather_trajectory as assert_weather_run

MODEL = "gpt-4o"  # asked for; the fake API answers as SERVED_MODEL
RESULT = "rainy in Paris"
#: how the app asks: streamed (with usage, without it, through the ``stream`` helper) or not,
#: with ``OpenAI`` or ``AsyncOpenAI``
SYNC_MODES = ("stream", "stream_without_usage", "stream_helper")
ASYNC_MODES = ("async", "async_stream", "async_stream_helper")
LLM_SPANS = {
    "gen_ai": f"chat {MODEL}",
    "openinference": "ChatCompletion",
    "traceloop": "openai.chat",
}
HOW = pytest.mark.parametrize("how", ["processor", "spans"])
VENDOR = pytest.mark.parametrize("vendor", list(LLM_SPANS))


def client(asynchronous: bool, transport: httpx2.MockTransport | None = None) -> Any:
    transport = transport or weather_api(SERVED_MODEL)
    if asynchronous:
        http: Any = httpx2.AsyncClient(transport=transport)
        return openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:9/v1", http_client=http, max_retries=0
        )
    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


# -- the app -----------------------------------------------------------------------------------


class Assembled:
    """The assistant message an app assembles from the chunks of a stream."""

    def __init__(self) -> None:
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        for choice in chunk.choices:
            delta = choice.delta
            self.content += delta.content or ""
            for piece in delta.tool_calls or []:
                call = self.calls.setdefault(
                    piece.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message


def request(mode: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The arguments of the call: streamed unless ``async`` (the helpers stream anyway), with
    usage asked for unless ``stream_without_usage``."""
    sent: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": [TOOL]}
    if mode in ("stream", "stream_without_usage", "async_stream"):
        sent["stream"] = True
    if mode not in ("async", "stream_without_usage"):
        sent["stream_options"] = {"include_usage": True}
    return sent


def ask(api: openai.OpenAI, mode: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One model call the way ``mode`` makes it; the assistant message it returned."""
    if mode.endswith("helper"):
        with api.chat.completions.stream(**request(mode, messages)) as stream:
            for _ in stream:
                pass
            return stream.get_final_completion().choices[0].message.model_dump(exclude_none=True)
    assembled = Assembled()
    for chunk in api.chat.completions.create(**request(mode, messages)):
        assembled.add(chunk)
    return assembled.message()


async def ask_async(
    api: openai.AsyncOpenAI, mode: str, messages: list[dict[str, Any]]
) -> dict[str, Any]:
    if mode.endswith("helper"):
        async with api.chat.completions.stream(**request(mode, messages)) as stream:
            async for _ in stream:
                pass
            completion = await stream.get_final_completion()
            return completion.choices[0].message.model_dump(exclude_none=True)
    if mode == "async":
        completion = await api.chat.completions.create(**request(mode, messages))
        return completion.choices[0].message.model_dump(exclude_none=True)
    assembled = Assembled()
    async for chunk in await api.chat.completions.create(**request(mode, messages)):
        assembled.add(chunk)
    return assembled.message()


def opening() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def answered(
    tracer: trace.Tracer, messages: list[dict[str, Any]], asked: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run the tool ``asked`` calls for in an ``execute_tool`` span; the messages to send next."""
    (call,) = asked["tool_calls"]
    function = call["function"]
    with genai_tool_span(tracer, function["name"], call["id"], function["arguments"], RESULT):
        pass
    return [*messages, asked, {"role": "tool", "tool_call_id": call["id"], "content": RESULT}]


def run(tracer_provider: TracerProvider, mode: str) -> str:
    """The weather agent, asking the way ``mode`` says; returns the answer."""
    tracer = tracer_provider.get_tracer("weather.app")
    if mode in ASYNC_MODES:
        return asyncio.run(run_async(tracer, mode))
    api = client(asynchronous=False)
    with genai_agent_span(tracer):
        messages = answered(tracer, opening(), ask(api, mode, opening()))
        return ask(api, mode, messages)["content"]


async def run_async(tracer: trace.Tracer, mode: str) -> str:
    api = client(asynchronous=True)
    with genai_agent_span(tracer):
        messages = answered(tracer, opening(), await ask_async(api, mode, opening()))
        return (await ask_async(api, mode, messages))["content"]


def bare_calls() -> None:
    """One streamed call with ``OpenAI`` and one with ``AsyncOpenAI``, outside any agent."""
    ask(client(asynchronous=False), "stream", opening())
    asyncio.run(ask_async(client(asynchronous=True), "async_stream", opening()))


# -- the weather run, every way ------------------------------------------------------------------


def streamed(span: Any, vendor: str) -> bool:
    """Whether ``span`` says its call was streamed, in ``vendor``'s words."""
    attributes = span.attributes
    if vendor == "gen_ai":
        return attributes.get("gen_ai.request.stream", False)
    if vendor == "openinference":
        return json.loads(attributes["llm.invocation_parameters"]).get("stream", False)
    return attributes["gen_ai.is_streaming"]


@HOW
@pytest.mark.parametrize("mode", [*SYNC_MODES, *ASYNC_MODES])
@VENDOR
def test_streamed_and_async_calls_make_the_weather_trajectory(
    db_path, provider, monkeypatch, vendor, mode, how
):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    with instrumented(openai_instrumentor(vendor), provider, bare_calls):
        traj = captured(how, db_path, provider, lambda: run(provider[0], mode))
        llm_spans = [s for s in provider[1].get_finished_spans() if s.name == LLM_SPANS[vendor]]
    assert [streamed(s, vendor) for s in llm_spans] == [mode != "async"] * 2

    # the assembled call (id, name, parsed arguments) and answer; usage when the stream said it
    usage = mode != "stream_without_usage"
    llm = LLM_SPANS[vendor]
    assert_weather_run(traj, llm_names=(llm, llm), tools=[TOOL_DEFINITION], usage=usage)
    first, _, final = traj.steps
    assert (final.attributes.get("input_tokens"), final.attributes.get("output_tokens")) == (
        (20, 6) if usage else (None, None)
    )
    assert (first.attributes["model"], final.attributes["model"]) == (SERVED_MODEL,) * 2
    assert first.attributes["tool_calls"] == ["c1"]
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert traj.session_id == "conv_1"
    # the call the app sent back reads as the call the model made
    assert final.inputs["messages"][2] == {"role": "assistant", "parts": [CALL_PART]}
    assert final.inputs["messages"] == [
        text("system", SYSTEM),
        text("user", QUESTION),
        *first.action,
        {"role": "tool", "parts": [{"type": "tool_call_response", "response": RESULT, "id": "c1"}]},
    ]
    if vendor == "openinference":
        assert first.attributes.get("total_tokens") == (17 if usage else None)
    else:
        assert first.attributes["response_id"] == "chatcmpl-1"
    # no request parameter was given, and none is read
    assert not any("parameters" in s.attributes for s in traj.steps)

    if vendor == "traceloop" and mode != "async":
        # regression: the empty text part Traceloop writes before a streamed call is no content
        output = json.loads(llm_spans[0].attributes["gen_ai.output.messages"])
        assert output[0]["parts"][0] == {"content": "", "type": "text"}
    if vendor == "traceloop" and mode.endswith("helper"):
        # regression: the parameters the helper left out are recorded as None, and not read
        assert llm_spans[0].attributes["gen_ai.request.temperature"] is None


# -- concurrent calls inside one agent -----------------------------------------------------------

#: each city's answer: their own, or the same one (OpenInference records no response id, so
#: only the content tells two calls apart)
ANSWERS = {
    "own": {"Paris": "It is rainy in Paris.", "Rome": "It is sunny in Rome."},
    "same": {"Paris": "I cannot tell.", "Rome": "I cannot tell."},
}


def racing_api(answers: dict[str, str], rome_read: asyncio.Event) -> httpx2.MockTransport:
    """Streams each city's answer; Paris's stream, asked first, holds back after its first
    chunk until the app has read all of Rome's (``rome_read``), so the first call to start
    is the last to end."""

    async def handle(request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.content)
        city = "Paris" if "Paris" in sent["messages"][-1]["content"] else "Rome"
        number = list(answers).index(city) + 1
        message = {"role": "assistant", "content": answers[city]}
        body = chat_completion(number, SERVED_MODEL, message, "stop", (10 + number, 5 + number))
        events = sse_events(chat_chunks(body, usage=True))

        async def content() -> Any:
            yield events[0]
            if city == "Paris":
                await rome_read.wait()
            for event in events[1:]:
                yield event

        return httpx2.Response(
            200, content=content(), headers={"content-type": "text/event-stream"}
        )

    return httpx2.MockTransport(handle)


async def concurrent_agent(tracer_provider: TracerProvider, answers: dict[str, str]) -> list[str]:
    """Asks for Paris's and Rome's weather at once, streamed, inside one agent span."""
    rome_read = asyncio.Event()
    api = client(asynchronous=True, transport=racing_api(answers, rome_read))

    async def weather(city: str) -> str:
        messages = [{"role": "user", "content": f"Weather in {city}?"}]
        assembled = Assembled()
        stream = await api.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            assembled.add(chunk)
        if city == "Rome":
            rome_read.set()
        return assembled.message()["content"]

    with genai_agent_span(tracer_provider.get_tracer("weather.app")):
        return await asyncio.gather(weather("Paris"), weather("Rome"))


@HOW
@pytest.mark.parametrize("answers", list(ANSWERS))
@VENDOR
def test_concurrent_streamed_calls_are_steps_in_start_order(
    db_path, provider, monkeypatch, vendor, answers, how
):
    """``asyncio.gather`` of two streamed calls in one agent span, the first to start the last
    to end: two llm steps in start order, each with its own question, answer and usage, also
    when both calls give the same answer (regression: through OpenInference, which records no
    response id, the second was taken for the first recorded twice and dropped)."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    cities = ANSWERS[answers]

    def both() -> str:
        assert asyncio.run(concurrent_agent(provider[0], cities)) == list(cities.values())
        return ANSWER

    with instrumented(openai_instrumentor(vendor), provider, bare_calls):
        traj = captured(how, db_path, provider, both)
        paris, rome = sorted(
            (s for s in provider[1].get_finished_spans() if s.name == LLM_SPANS[vendor]),
            key=lambda s: s.start_time,
        )
    assert paris.start_time < rome.start_time < rome.end_time < paris.end_time
    assert paris.parent.span_id == rome.parent.span_id  # both children of the agent span

    assert [(s.kind, s.name, s.agent) for s in traj.steps] == [
        (StepKind.LLM, LLM_SPANS[vendor], "weather_agent")
    ] * 2
    for step, (number, (city, answer)) in zip(
        traj.steps, enumerate(cities.items(), 1), strict=True
    ):
        assert step.inputs["messages"] == [text("user", f"Weather in {city}?")]
        assert step.action == [text("assistant", answer)]
        assert (step.attributes["input_tokens"], step.attributes["output_tokens"]) == (
            10 + number,
            5 + number,
        )
    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    traj.verify()


# -- streams that break off ----------------------------------------------------------------------

#: how the answer's stream ends before its last chunk: the server closes the connection, or sends
#: an error event, after ``READ`` chunks; or the app stops reading after ``READ`` chunks and
#: closes the stream (``with``), or drops it unclosed (it is collected when the app returns)
BREAKS = ("cut", "error_event", "closed_early", "left_open")
READ = 3  # the role, then "It is ra" and "iny in P"
PARTIAL = ANSWER[:16]
#: what the client raises when the server breaks the stream off, and its message
RAISED = {
    "cut": (openai.APIConnectionError, "Connection error."),
    "error_event": (openai.APIError, STREAM_ERROR["error"]["message"]),
}


def read_answer(api: openai.OpenAI, breaks: str) -> str:
    """The weather question, its answer streamed; the text read before the stream broke off."""
    stream = api.chat.completions.create(
        model=MODEL, messages=opening(), stream=True, stream_options={"include_usage": True}
    )
    text = ""
    with stream if breaks == "closed_early" else contextlib.nullcontext():
        for number, chunk in enumerate(stream, 1):
            text += chunk.choices[0].delta.content or ""
            if number == READ and breaks in ("closed_early", "left_open"):
                break
    return text


@HOW
@pytest.mark.parametrize("breaks", BREAKS)
@VENDOR
def test_a_stream_that_breaks_off_is_a_partial_step_failed_when_the_span_says_so(
    db_path, provider, monkeypatch, vendor, breaks, how
):
    """The answer streamed from a real loopback server inside the agent span. Broken off by the
    server, the client raises and the run ends in the error; stopped by the app, the app
    returns what it read. Each instrumentation ends the call's span with the text received;
    whether it says the call failed, or that the output is partial, differs."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    body = chat_completion(
        1, SERVED_MODEL, {"role": "assistant", "content": ANSWER}, "stop", (20, 6)
    )
    raised, message = RAISED.get(breaks, (None, None))
    if raised is None:
        server = breaking_stream(body)
    else:
        server = breaking_stream(
            body, keep=READ, error=STREAM_ERROR if breaks == "error_event" else None
        )
    with serving(server) as url, instrumented(openai_instrumentor(vendor), provider, bare_calls):
        api = openai.OpenAI(api_key="sk-test", base_url=url, max_retries=0)

        def agent() -> str:
            with genai_agent_span(provider[0].get_tracer("weather.app")):
                return read_answer(api, breaks)

        traj = captured(how, db_path, provider, agent, expect=raised or PARTIAL)
        (span,) = [s for s in provider[1].get_finished_spans() if s.name == LLM_SPANS[vendor]]
    error = None if raised is None else {"type": f"openai.{raised.__name__}", "message": message}

    # what each instrumentation writes: the text received, and its own idea of how it ended
    status, attributes = span.status.status_code, span.attributes
    exceptions = [e.attributes for e in span.events if e.name == "exception"]
    if vendor == "gen_ai":
        # "error": the finish reason of a choice that got none; ERROR when the call raised, and
        # when the unclosed stream is collected (opentelemetry-util-genai's "abandoned stream")
        assert attributes["gen_ai.response.finish_reasons"] == ("error",)
        output = json.loads(attributes["gen_ai.output.messages"])
        assert output[0]["finish_reason"] == "error"
        if error is not None:
            assert (status, span.status.description) == (StatusCode.ERROR, message)
            assert attributes["error.type"] == error["type"]
        elif breaks == "left_open":
            assert (status, span.status.description) == (StatusCode.ERROR, "abandoned stream")
            assert attributes["error.type"] == "_OTHER"
        else:
            assert status is StatusCode.UNSET and "error.type" not in attributes
        assert exceptions == []
    elif vendor == "openinference":  # no finish reason, nothing says the output is partial
        assert attributes["llm.output_messages.0.message.content"] == PARTIAL
        assert "llm.finish_reason" not in attributes
        if error is not None:
            assert status is StatusCode.ERROR
            assert span.status.description == f"{raised.__name__}: {message}"
            (event,) = exceptions
            assert (event["exception.type"], event["exception.message"]) == (
                error["type"],
                message,
            )
        else:
            assert status is StatusCode.UNSET and exceptions == []
    else:
        # Traceloop's stream wrapper ends the span OK before it sets the error status, which
        # then does not take: OK whatever happened, and an empty finish reason
        assert status is StatusCode.OK and exceptions == []
        output = json.loads(attributes["gen_ai.output.messages"])
        assert output == [
            {
                "role": "assistant",
                "parts": [{"content": PARTIAL, "type": "text"}],
                "finish_reason": "",
            }
        ]
        assert "gen_ai.response.finish_reasons" not in attributes

    # the step: the text received; failed when its span says the call failed
    (step,) = traj.steps
    assert (step.kind, step.name, step.agent) == (StepKind.LLM, LLM_SPANS[vendor], "weather_agent")
    assert step.inputs["messages"] == [text("system", SYSTEM), text("user", QUESTION)]
    assert step.action == [text("assistant", PARTIAL)]
    assert "input_tokens" not in step.attributes  # the usage chunk never came
    # regression: an abandoned stream (gen_ai, left open) is no failed call
    assert step.error == (error if vendor != "traceloop" else None)
    if error is None:
        assert traj.outcome is None
    else:  # the agent's span says how the run ended, whatever the call's span says
        assert traj.outcome.failed is True and traj.outcome.error == error
    # regression: a capture note where the span says the output is partial
    report = traj.metadata["capture"]
    if vendor == "gen_ai":
        note = ABANDONED_NOTE if breaks == "left_open" else CUT_SHORT_NOTE
        assert report["notes"] == [f"step 0: {note}"]
    else:
        assert report["notes"] == []
    assert report["replayable"] is True
    traj.verify()
