"""The real openai client, intercepted: record -> replay (held: no HTTP) -> re-draw (one each)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response
from pydantic import BaseModel

from agent_replay import CanonicalEncodingError, ReplayPlan, instrument
from agent_replay.errors import RecordedStepError
from agent_replay.instrument import record_agent, replay_agent

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def weather_reply(body, n):
    if body["messages"][-1]["role"] == "user":
        return {"tool_call": ("get_weather", {"city": "Paris"})}
    return f"It is rainy in Paris (answer {n})."


def tool_agent(client, seen=None):
    """Unmodified OpenAI SDK code: the assistant message object goes back into the history."""
    seen = [] if seen is None else seen

    def agent(question):
        messages = [{"role": "user", "content": question}]
        first = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=TOOLS, temperature=0.2
        )
        call = first.choices[0].message.tool_calls[0]
        city = json.loads(call.function.arguments)["city"]
        messages += [
            first.choices[0].message,  # a pydantic object, as real agents pass it
            {"role": "tool", "tool_call_id": call.id, "content": f"rainy in {city}"},
        ]
        final = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
        seen.append([type(first), type(final)])
        return {"answer": final.choices[0].message.content}

    return agent


def test_held_calls_return_real_chat_completions_without_any_request(make_api):
    api = make_api(weather_reply)
    seen = []
    agent = tool_agent(api.openai(), seen)
    with instrument.installed("openai"):
        traj = record_agent(agent, {"question": "Weather in Paris?"})
        assert api.count == 2
        assert [s.label for s in traj.steps] == ["llm:openai.chat.completions.create"] * 2
        assert traj.steps[0].inputs["temperature"] == 0.2
        assert traj.steps[0].attributes["model"] == "gpt-4o-mini"
        assert traj.steps[0].attributes["input_tokens"] == 10
        for _ in range(3):
            result = replay_agent(agent, traj)
            assert api.count == 2  # held: the transport saw nothing
            assert not result.diverged
            assert result.live_steps == 0
            assert result.result["answer"] == traj.outcome.result["answer"]
            assert seen[-1] == [ChatCompletion, ChatCompletion]
            assert result.trajectory().head_hash == traj.head_hash


def test_redrawn_calls_make_exactly_one_request_each(make_api):
    api = make_api(weather_reply)
    seen = []
    agent = tool_agent(api.openai(), seen)
    with instrument.installed("openai"):
        traj = record_agent(agent, {"question": "Weather in Paris?"})
        for start, expected in ((1, 1), (0, 2)):
            before = api.count
            result = replay_agent(agent, traj, ReplayPlan.ablate_from(start), seed=start)
            assert api.count - before == expected
            assert result.live_steps == expected
            assert result.served_steps == 2 - expected
            assert seen[-1] == [ChatCompletion, ChatCompletion]
        assert result.result["answer"] != traj.outcome.result["answer"]  # drawn again: answer 4


def test_swap_model_reaches_the_redrawn_request_only(make_api):
    api = make_api(weather_reply)
    agent = tool_agent(api.openai())
    with instrument.installed("openai"):
        traj = record_agent(agent, {"question": "Weather in Paris?"})
        plan = ReplayPlan.ablate_from(1).swap_model("gpt-4.1", 1)
        result = replay_agent(agent, traj, plan)
    assert [body["model"] for _, body in api.requests] == ["gpt-4o-mini"] * 2 + ["gpt-4.1"]
    assert result.drafts[1].attributes["model"] == "gpt-4.1"
    assert result.drafts[0].attributes["model"] == "gpt-4o-mini"


def test_edited_inputs_reach_the_request(make_api):
    api = make_api(weather_reply)
    agent = tool_agent(api.openai())
    with instrument.installed("openai"):
        traj = record_agent(agent, {"question": "Weather in Paris?"})
        edited = [{"role": "user", "content": "Weather in Lyon?"}]
        replay_agent(agent, traj, ReplayPlan.ablate_from(1).edit(0, {"messages": edited}))
    path, body = api.requests[2]
    assert path.endswith("/chat/completions")
    assert body["messages"] == edited
    assert body["temperature"] == 0.2 and body["tools"] == TOOLS  # the rest as called


def test_outside_a_run_the_client_is_untouched(make_api):
    api = make_api()
    client = api.openai()
    with instrument.installed("openai"):
        out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert isinstance(out, ChatCompletion)
    assert api.count == 1
    # undone on exit: the class attribute is the SDK's own function again
    create = openai.resources.chat.completions.Completions.create
    assert not hasattr(create, "__agent_replay_patch__")


def stream_agent(client, seen):
    def agent():
        with client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        ) as stream:
            chunks = list(stream)
        seen.append(({type(c) for c in chunks}, isinstance(stream, openai.Stream)))
        return {"text": "".join(c.choices[0].delta.content or "" for c in chunks)}

    return agent


def test_streams_record_as_chunks_and_replay_as_streams(make_api):
    api = make_api(lambda body, n: "Hello streaming world")
    seen = []
    agent = stream_agent(api.openai(), seen)
    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert traj.outcome.result["text"] == "Hello streaming world"
        stored = traj.steps[0].action
        assert stored["__agent_replay__"] == "stream" and len(stored["items"]) == 8
        result = replay_agent(agent, traj)
        assert api.count == 1
        assert result.result["text"] == "Hello streaming world"
        assert seen[-1] == ({ChatCompletionChunk}, True)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(0))
        assert api.count == 2 and redrawn.result["text"] == "Hello streaming world"


def test_the_stream_helper_works_on_a_replayed_stream(make_api):
    api = make_api(lambda body, n: "Helper text")
    client = api.openai()

    def agent():
        with client.chat.completions.stream(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            deltas = [e.delta for e in stream if e.type == "content.delta"]
            final = stream.get_final_completion()
        return {"deltas": deltas, "final": final.choices[0].message.content}

    with instrument.installed("openai"):
        traj = record_agent(agent)
        result = replay_agent(agent, traj)
    assert api.count == 1
    assert result.result == traj.outcome.result
    assert result.result["final"] == "Helper text"


def test_replay_stream_close_and_context_manager(make_api):
    api = make_api(lambda body, n: "abcdefghi")
    client = api.openai()

    def agent():
        stream = client.chat.completions.create(model="m", messages=[], stream=True)
        first = next(stream)
        stream.close()
        return [first.choices[0].delta.content, list(stream), stream.response.is_closed]

    with instrument.installed("openai"):
        traj = record_agent(agent)
        result = replay_agent(agent, traj)
    assert result.result == traj.outcome.result == ["abc", [], True]
    assert api.count == 1


def test_async_chat_and_async_streams(make_api):
    api = make_api(lambda body, n: f"async answer {n}")
    client = api.async_openai()
    seen = []

    async def agent():
        one, two = await asyncio.gather(
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}]),
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}]),
        )
        stream = await client.chat.completions.create(model="m", messages=[], stream=True)
        async with stream:
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
        seen.append(({type(one), type(two)}, isinstance(stream, openai.AsyncStream)))
        return {
            "texts": [one.choices[0].message.content, two.choices[0].message.content],
            "stream": text,
        }

    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert api.count == 3
        result = replay_agent(agent, traj)
        assert api.count == 3
        assert result.result == traj.outcome.result
        assert traj.outcome.result["texts"] == ["async answer 1", "async answer 2"]  # in order
        assert seen[-1] == ({ChatCompletion}, True)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(2))
        assert api.count == 4 and redrawn.live_steps == 1


def test_responses_api_sync_async_and_streamed(make_api):
    api = make_api(lambda body, n: f"response text {n}")
    client, aclient = api.openai(), api.async_openai()
    seen = []

    def agent():
        plain = client.responses.create(model="gpt-4.1", input="hello")
        streamed = client.responses.create(model="gpt-4.1", input="hello", stream=True)
        events = [e.type for e in streamed]

        async def later():
            return await aclient.responses.create(model="gpt-4.1", input="again")

        awaited = asyncio.run(later())  # the run follows into asyncio.run (context copied)
        seen.append([type(plain), type(awaited)])
        return {"plain": plain.output_text, "events": events, "awaited": awaited.output_text}

    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert api.count == 3
        assert [s.name for s in traj.steps] == ["openai.responses.create"] * 3
        assert traj.steps[0].attributes["input_tokens"] == 11
        assert traj.steps[1].attributes["output_tokens"] == 6  # read from response.completed
        result = replay_agent(agent, traj)
    assert api.count == 3
    assert result.result == traj.outcome.result
    assert seen[-1] == [Response, Response]
    assert result.result["events"][0] == "response.created"
    assert result.result["events"][-1] == "response.completed"


def test_a_response_that_cannot_be_stored_fails_the_recording_naming_the_step(make_api):
    api = make_api()
    client = api.openai()

    def agent():
        # a raw HTTP response is not data; the agent even swallows the error
        with contextlib.suppress(Exception):
            client.chat.completions.with_raw_response.create(model="m", messages=[])
        return "done"

    with instrument.installed("openai"), pytest.raises(CanonicalEncodingError) as info:
        record_agent(agent)
    message = str(info.value)
    assert "step 0 (llm:openai.chat.completions.create) output" in message
    assert "LegacyAPIResponse" in message and "cannot be stored as data" in message


def test_arguments_that_cannot_be_stored_fail_before_the_request(make_api):
    api = make_api()
    client = api.openai()

    class Opaque:
        pass

    def agent():
        client.chat.completions.create(model="m", messages=[], metadata={"x": Opaque()})

    with instrument.installed("openai"), pytest.raises(CanonicalEncodingError) as info:
        record_agent(agent)
    assert "step 0 (llm:openai.chat.completions.create) inputs" in str(info.value)
    assert "$.metadata.x" in str(info.value)
    assert api.count == 0


def test_a_recorded_api_error_is_served_again_without_a_request(make_api):
    import httpx2

    api = make_api()
    failing = openai.OpenAI(
        api_key="sk",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(
            transport=httpx2.MockTransport(
                lambda request: (
                    api.requests.append(("x", {})),
                    httpx2.Response(400, json={"error": {"message": "bad"}}),
                )[1]
            )
        ),
        max_retries=0,
    )

    def agent():
        try:
            failing.chat.completions.create(model="m", messages=[])
        except openai.BadRequestError as exc:  # the agent's own handler, taken on replay too
            return f"{type(exc).__name__} recorded={isinstance(exc, RecordedStepError)}"
        return "no error"

    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert traj.outcome.result == "BadRequestError recorded=False"
        assert traj.steps[0].error["type"] == "BadRequestError"
        result = replay_agent(agent, traj)
    assert api.count == 1
    assert result.result == "BadRequestError recorded=True"


def test_the_stream_helper_accumulates_a_replayed_tool_call(make_api):
    # the helper merges each chunk's to_dict() into its snapshot: a stored chunk whose unset
    # fields came back as explicit nulls wiped the tool call's type ("assert ... 'function'")
    api = make_api(lambda body, n: {"tool_call": ("get_weather", {"city": "Paris"})})
    client, aclient = api.openai(), api.async_openai()
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}

    def calls(final):
        return [
            (t.type, t.function.name, t.function.arguments)
            for t in final.choices[0].message.tool_calls
        ]

    def agent():
        with client.chat.completions.stream(**ask) as stream:
            final = stream.get_final_completion()

        async def async_part():
            async with aclient.chat.completions.stream(**ask) as astream:
                return await astream.get_final_completion()

        return [calls(final), calls(asyncio.run(async_part()))]

    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert traj.outcome.failed is None
        result = replay_agent(agent, traj)
    assert api.count == 2
    assert result.exception is None
    assert result.result == traj.outcome.result
    assert result.result[0] == [("function", "get_weather", '{"city": "Paris"}')]


def test_held_responses_have_the_fields_the_server_sent_and_no_others(make_api):
    # an agent that keeps message.to_dict() in its history: the held object used to have every
    # field set, so its to_dict() carried refusal/audio/... = None, the next request differed
    # from the recording, and a factual replay diverged and went live
    api = make_api()
    client = api.openai()
    dumps = []

    def agent():
        messages = [{"role": "user", "content": "hi"}]
        first = client.chat.completions.create(model="m", messages=messages)
        message = first.choices[0].message
        dumps.append(
            (message.to_dict(), message.model_fields_set, first.model_dump(exclude_unset=True))
        )
        messages += [message.to_dict(), {"role": "user", "content": "and?"}]
        return (
            client.chat.completions.create(model="m", messages=messages).choices[0].message.content
        )

    with instrument.installed("openai"):
        traj = record_agent(agent)
        held = replay_agent(agent, traj)
        assert api.count == 2
        assert not held.diverged and held.result == traj.outcome.result == "answer 2"
        assert dumps[1] == dumps[0]
        assert dumps[0][0] == {"content": "answer 1", "role": "assistant"}
        # re-drawn after a held step: the request sends the message as it was recorded
        replay_agent(agent, traj, ReplayPlan.ablate_from(1))
    assert api.count == 3
    assert api.requests[2][1]["messages"] == api.requests[1][1]["messages"]


def test_a_held_response_has_its_request_id(make_api):
    # openai documents completion._request_id (the x-request-id header); a held response
    # had none, and reading it raised AttributeError
    api = make_api()
    client = api.openai()

    def agent():
        completion = client.chat.completions.create(model="m", messages=[])
        return [completion._request_id, client.responses.create(model="m", input="x")._request_id]

    with instrument.installed("openai"):
        traj = record_agent(agent)
        result = replay_agent(agent, traj)
    assert api.count == 2
    assert result.exception is None
    assert result.result == traj.outcome.result == ["req_1", "req_2"]


def test_a_held_api_error_has_its_body(make_api):
    # exc.body (the parsed error JSON) is plain data but was not stored, so a handler reading
    # it failed with AttributeError on a held replay
    import httpx2

    error = {"message": "Invalid 'messages'", "type": "invalid_request_error", "code": "bad"}
    client = openai.OpenAI(
        api_key="sk",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(
            transport=httpx2.MockTransport(lambda r: httpx2.Response(400, json={"error": error}))
        ),
        max_retries=0,
    )

    def agent():
        try:
            client.chat.completions.create(model="m", messages=[])
        except openai.BadRequestError as exc:
            seen = [exc.status_code, exc.code, dict(exc.body)]
            exc.body["message"] = "changed by the handler"  # must not reach the recording
            return seen
        return None

    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert traj.outcome.result == [400, "bad", error]
        for _ in range(2):
            result = replay_agent(agent, traj)
            assert result.exception is None
            assert result.result == traj.outcome.result


def broken_stream_client(mode, is_async=False):
    """A client whose streams send three chunks, then an error event or a dropped connection."""
    import httpx2

    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [
        f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': {'content': w}}]})}\n\n"
        for w in ["Hel", "lo ", "wor"]
    ]

    class Body(httpx2.SyncByteStream, httpx2.AsyncByteStream):
        def __iter__(self):
            yield from (e.encode() for e in events)
            raise httpx2.ReadError("connection reset by peer")

        async def __aiter__(self):
            for e in events:
                yield e.encode()
            raise httpx2.ReadError("connection reset by peer")

    def handle(request):
        headers = {"content-type": "text/event-stream"}
        if mode == "error_event":
            error = {"error": {"message": "overloaded mid-stream", "type": "server_error"}}
            content = "".join(events) + f"data: {json.dumps(error)}\n\n"
            return httpx2.Response(200, content=content.encode(), headers=headers)
        return httpx2.Response(200, stream=Body(), headers=headers)

    transport = httpx2.MockTransport(handle)
    if is_async:
        http = httpx2.AsyncClient(transport=transport)
        return openai.AsyncOpenAI(api_key="sk", base_url="http://127.0.0.1:9/v1", http_client=http)
    http = httpx2.Client(transport=transport)
    return openai.OpenAI(
        api_key="sk", base_url="http://127.0.0.1:9/v1", http_client=http, max_retries=0
    )


@pytest.mark.parametrize("mode", ["error_event", "drop"])
def test_a_stream_that_breaks_off_gives_its_chunks_then_the_error(mode):
    # the stream was read whole inside the step, and its error made the step fail: the agent
    # got the error without any of the chunks the server had sent, and the step kept nothing
    client, aclient = broken_stream_client(mode), broken_stream_client(mode, is_async=True)
    ask = {"model": "m", "messages": [], "stream": True}

    def agent():
        got, agot = [], []
        try:
            for chunk in client.chat.completions.create(**ask):
                got.append(chunk.choices[0].delta.content)
        except openai.APIError as exc:
            got.append(type(exc).__name__)

        async def async_part():
            try:
                async for chunk in await aclient.chat.completions.create(**ask):
                    agot.append(chunk.choices[0].delta.content)
            except openai.APIError as exc:
                agot.append(type(exc).__name__)

        asyncio.run(async_part())
        return [got, agot]

    expected = "APIError" if mode == "error_event" else "APIConnectionError"
    assert agent() == [["Hel", "lo ", "wor", expected]] * 2  # not instrumented
    with instrument.installed("openai"):
        traj = record_agent(agent)
        assert traj.outcome.result == [["Hel", "lo ", "wor", expected]] * 2
        for step in traj.steps:
            assert step.error is None
            assert len(step.action["items"]) == 3
            assert step.action["error"]["type"] == expected
        held = replay_agent(agent, traj)
    assert not held.diverged and held.live_steps == 0
    assert held.result == traj.outcome.result


def test_a_lone_surrogate_in_a_response_is_escaped_not_fatal(tmp_path):
    # text that cannot be stored as UTF-8 made record_agent raise CanonicalEncodingError at
    # the end, and the whole run was lost; it is escaped now, as the span processor does
    import httpx2

    requests = []

    def handle(request):
        requests.append(json.loads(request.content))
        raw = (
            '{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
            '"message":{"role":"assistant","content":"bad \\ud800 half"},"finish_reason":"stop"}]}'
        )
        return httpx2.Response(
            200, content=raw.encode(), headers={"content-type": "application/json"}
        )

    client = openai.OpenAI(
        api_key="sk",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handle)),
        max_retries=0,
    )

    def agent():
        messages = [{"role": "user", "content": "hi"}]
        first = client.chat.completions.create(model="m", messages=messages).choices[0].message
        return len(first.content)

    with instrument.installed("openai"):
        traj = record_agent(agent, store=tmp_path / "runs.sqlite")
        assert traj.outcome.result == len("bad \ud800 half")
        content = traj.steps[0].action["data"]["choices"][0]["message"]["content"]
        assert content == "bad \\ud800 half"
        held = replay_agent(agent, traj)
    assert len(requests) == 1
    assert not held.diverged and held.live_steps == 0
    assert held.result == len("bad \\ud800 half")  # a held replay serves the escaped text


def test_embeddings_are_steps_held_without_a_request_and_redrawn_live(make_api):
    from openai.types import CreateEmbeddingResponse

    api = make_api()
    client, aclient = api.openai(), api.async_openai()
    seen = []

    def agent(question):
        one = client.embeddings.create(model="text-embedding-3-small", input=question)
        two = asyncio.run(
            aclient.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
        )
        seen.append([type(one), type(two)])
        return {"one": one.data[0].embedding, "two": [d.embedding for d in two.data]}

    with instrument.installed("openai"):
        traj = record_agent(agent, {"question": "rainy cities"})
        assert api.count == 2
        assert [s.label for s in traj.steps] == ["embedding:openai.embeddings.create"] * 2
        assert traj.steps[0].inputs["input"] == "rainy cities"
        assert traj.steps[0].attributes["input_tokens"] == 3
        assert traj.steps[1].attributes["input_tokens"] == 6
        held = replay_agent(agent, traj)
        assert api.count == 2  # held: no request at all
        assert (held.live_steps, held.diverged) == (0, False)
        assert (
            held.result
            == traj.outcome.result
            == {"one": [0.1, 0.0], "two": [[0.2, 0.0], [0.2, 1.0]]}
        )
        assert seen[-1] == [CreateEmbeddingResponse] * 2
        # re-drawn; a swap-model plan names a chat model, which an embedding call keeps out of
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(1).swap_model("gpt-4.1"))
    assert api.count == 3 and redrawn.live_steps == 1
    assert redrawn.result["two"] == [[0.3, 0.0], [0.3, 1.0]]  # drawn again: request 3
    assert api.requests[-1][1]["model"] == "text-embedding-3-small"
    assert seen[-1] == [CreateEmbeddingResponse] * 2


class City(BaseModel):
    name: str
    rainy: bool


def city_reply(body, n):
    return json.dumps({"name": f"Paris{n}", "rainy": True})


def test_parse_is_a_step_held_as_a_parsed_chat_completion_of_the_users_class(make_api):
    from openai.types.chat import ParsedChatCompletion

    api = make_api(city_reply)
    client, aclient = api.openai(), api.async_openai()
    seen = []

    def agent(question):
        messages = [{"role": "user", "content": question}]
        one = client.chat.completions.parse(model="m", messages=messages, response_format=City)

        async def later():
            return await aclient.chat.completions.parse(
                model="m", messages=messages, response_format=City
            )

        two = asyncio.run(later())
        seen.append([(type(r), type(r.choices[0].message.parsed)) for r in (one, two)])
        return [r.choices[0].message.parsed.name for r in (one, two)]

    with instrument.installed("openai"):
        traj = record_agent(agent, {"question": "capital?"})
        assert api.count == 2
        assert [s.label for s in traj.steps] == ["llm:openai.chat.completions.parse"] * 2
        stored = traj.steps[0].inputs["response_format"]
        assert stored["type"] == f"{__name__}:City"
        assert stored["schema"]["properties"]["rainy"] == {"title": "Rainy", "type": "boolean"}
        assert traj.steps[0].attributes["input_tokens"] == 10
        held = replay_agent(agent, traj)
        assert api.count == 2  # held: no request
        assert (held.live_steps, held.diverged) == (0, False)
        assert held.result == traj.outcome.result == ["Paris1", "Paris2"]
        assert held.trajectory().head_hash == traj.head_hash
        parsed = [(ParsedChatCompletion, City)] * 2
        assert [(origin(t), p) for t, p in seen[-1]] == parsed
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(1))
    assert api.count == 3 and redrawn.live_steps == 1
    assert redrawn.result == ["Paris1", "Paris3"]
    assert [(origin(t), p) for t, p in seen[-1]] == parsed


def origin(cls):
    """``ParsedChatCompletion`` for ``ParsedChatCompletion[City]`` (the SDK parametrises it)."""
    meta = getattr(cls, "__pydantic_generic_metadata__", None) or {}
    return meta.get("origin") or cls


class Town(BaseModel):  # City with one more field: another schema
    name: str
    rainy: bool
    size: int = 0


def test_parse_held_with_tools_and_request_id_live_on_a_changed_class_or_edit(make_api):
    def reply(body, n):
        if body.get("tools"):
            return {"tool_call": ("City", {"name": "Lyon", "rainy": False})}
        return city_reply(body, n)

    api = make_api(reply)
    client = api.openai()
    seen, fmt = [], [City]

    def agent(use_tools):
        tools = [openai.pydantic_function_tool(City)] if use_tools else openai.omit
        out = client.chat.completions.parse(
            model="m",
            messages=[{"role": "user", "content": "capital?"}],
            response_format=fmt[0],
            tools=tools,
        )
        seen.append(out)
        message = out.choices[0].message
        if message.tool_calls:
            return message.tool_calls[0].function.parsed_arguments.name
        return message.parsed.name

    with instrument.installed("openai"):
        traj = record_agent(agent, {"use_tools": True})
        held = replay_agent(agent, traj)
        assert api.count == 1 and held.result == "Lyon"
        arguments = seen[-1].choices[0].message.tool_calls[0].function.parsed_arguments
        assert type(arguments) is City and seen[-1]._request_id == "req_1"

        plain = record_agent(agent, {"use_tools": False})
        assert api.count == 2 and plain.outcome.result == "Paris2"
        # a class whose schema changed is another call: it goes live, never served stale
        fmt[0] = Town
        changed = replay_agent(agent, plain)
        assert api.count == 3 and changed.live_steps == 1 and changed.diverged
        assert type(seen[-1].choices[0].message.parsed) is Town
        # an edited call is made with the caller's class
        fmt[0] = City
        edited = [{"role": "user", "content": "another?"}]
        again = replay_agent(agent, plain, ReplayPlan.ablate_from(0).edit(0, {"messages": edited}))
    assert api.count == 4 and again.result == "Paris4"
    assert type(seen[-1].choices[0].message.parsed) is City
    body = api.requests[-1][1]
    assert body["messages"] == edited and body["response_format"]["json_schema"]["name"] == "City"


def test_parse_built_on_create_is_still_one_step(make_api, monkeypatch):
    # openai 3.57's parse posts by itself; an SDK whose parse calls create (as the stream()
    # helper does) gets one parse step, the create inside it being part of that step
    from openai.lib._parsing import parse_chat_completion, type_to_response_format_param
    from openai.resources.chat.completions import completions

    def parse_on_create(resource, *, response_format, tools=openai.omit, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if v is not openai.omit and v is not None}
        kwargs.pop("timeout", None)
        raw = resource.create(
            response_format=type_to_response_format_param(response_format), tools=tools, **kwargs
        )
        return parse_chat_completion(
            response_format=response_format, input_tools=tools, chat_completion=raw
        )

    monkeypatch.setattr(completions, "parse", parse_on_create)
    api = make_api(city_reply)
    client = api.openai()

    def agent():
        out = client.chat.completions.parse(model="m", messages=[], response_format=City)
        return out.choices[0].message.parsed.name

    with instrument.installed("openai"):
        traj = record_agent(agent)
        held = replay_agent(agent, traj)
    assert [s.label for s in traj.steps] == ["llm:openai.chat.completions.parse"]
    assert api.count == 1 and held.result == traj.outcome.result == "Paris1"
