"""The real anthropic client (httpx2 transport mocked): messages, streams, the stream helper."""

from __future__ import annotations

import asyncio

import anthropic
from anthropic.types import Message, RawMessageStreamEvent

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import record_agent, replay_agent


def test_messages_are_held_as_real_messages_and_redrawn_live(make_api):
    api = make_api(lambda body, n: f"claude says {n}")
    client = api.anthropic()
    seen = []

    def agent(question):
        first = client.messages.create(
            model="claude-test",
            max_tokens=100,
            messages=[{"role": "user", "content": question}],
        )
        second = client.messages.create(
            model="claude-test",
            max_tokens=100,
            messages=[
                {"role": "user", "content": question},
                {"role": "assistant", "content": first.content},  # pydantic blocks passed back
                {"role": "user", "content": "and?"},
            ],
        )
        seen.append((type(first), type(second)))
        return [first.content[0].text, second.content[0].text]

    with instrument.installed("anthropic"):
        traj = record_agent(agent, {"question": "hi"})
        assert api.count == 2
        assert [s.name for s in traj.steps] == ["anthropic.messages.create"] * 2
        assert traj.steps[0].attributes["input_tokens"] == 12
        held = replay_agent(agent, traj)
        assert api.count == 2
        assert held.result == traj.outcome.result == ["claude says 1", "claude says 2"]
        assert seen[-1] == (Message, Message)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(1).swap_model("claude-x", 1))
    assert api.count == 3
    assert api.requests[-1][1]["model"] == "claude-x"
    assert redrawn.result == ["claude says 1", "claude says 3"]


def test_streams_sync_async_and_the_stream_helper(make_api):
    api = make_api(lambda body, n: f"streamed reply number {n}")
    client, aclient = api.anthropic(), api.async_anthropic()
    seen = []

    def agent():
        with client.messages.create(
            model="claude-test", max_tokens=50, messages=[], stream=True
        ) as stream:
            events = list(stream)
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")

        async def async_part():
            astream = await aclient.messages.create(
                model="claude-test", max_tokens=50, messages=[], stream=True
            )
            return "".join([e.delta.text async for e in astream if e.type == "content_block_delta"])

        async_text = asyncio.run(async_part())
        with client.messages.stream(model="claude-test", max_tokens=50, messages=[]) as helper:
            helper_text = "".join(helper.text_stream)
            final = helper.get_final_message()
        seen.append(
            (
                isinstance(stream, anthropic.Stream),
                all(isinstance(e, RawMessageStreamEvent.__args__) for e in events),  # type: ignore[attr-defined]
                type(final),
            )
        )
        return [text, async_text, helper_text, final.content[0].text, final.stop_reason]

    with instrument.installed("anthropic"):
        traj = record_agent(agent)
        assert api.count == 3
        assert traj.outcome.result == [
            "streamed reply number 1",
            "streamed reply number 2",
            "streamed reply number 3",
            "streamed reply number 3",
            "end_turn",
        ]
        assert [s.name for s in traj.steps] == [
            "anthropic.messages.create",
            "anthropic.messages.create",
            "anthropic.messages.stream",
        ]
        assert traj.steps[0].attributes == {
            "model": "claude-test",
            "input_tokens": 12,
            "output_tokens": 7,
        }
        held = replay_agent(agent, traj)
        assert api.count == 3
        assert held.result == traj.outcome.result
        assert seen[-1][:2] == (True, True) and issubclass(seen[-1][2], Message)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(2))
    assert api.count == 4
    assert redrawn.result[2] == "streamed reply number 4"


def test_blocks_passed_back_after_a_held_step_are_sent_as_recorded(make_api):
    # a held Message had every field set, so the content blocks passed back went out with
    # citations/caller/... = null in the re-drawn request's body
    api = make_api(
        lambda body, n: (
            {"text": "checking", "tool_call": ("get_weather", {"city": "Paris"})}
            if n == 1
            else f"rainy ({n})"
        )
    )
    client = api.anthropic()

    def agent():
        messages = [{"role": "user", "content": "weather?"}]
        first = client.messages.create(model="c", max_tokens=50, messages=messages)
        messages += [
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain"}],
            },
        ]
        return client.messages.create(model="c", max_tokens=50, messages=messages).content[0].text

    with instrument.installed("anthropic"):
        traj = record_agent(agent)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(1))
    assert redrawn.result == "rainy (3)"
    assert api.count == 3
    assert api.requests[2][1]["messages"] == api.requests[1][1]["messages"]


def test_a_held_message_has_its_request_id(make_api):
    api = make_api()
    client = api.anthropic()

    def agent():
        message = client.messages.create(model="c", max_tokens=5, messages=[])
        return getattr(message, "_request_id", "missing")

    with instrument.installed("anthropic"):
        traj = record_agent(agent)
        result = replay_agent(agent, traj)
    assert api.count == 1
    assert result.result == traj.outcome.result == "req_1"


def test_a_held_async_api_error_has_its_body():
    import httpx2

    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant",
        base_url="http://127.0.0.1:9",
        http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(lambda r: httpx2.Response(529, json=body))
        ),
        max_retries=0,
    )

    async def agent():
        try:
            await client.messages.create(model="c", max_tokens=5, messages=[])
        except anthropic.APIStatusError as exc:
            return [type(exc).__name__, exc.status_code, exc.body]
        return None

    with instrument.installed("anthropic"):
        traj = instrument.record_agent(agent)
        result = instrument.replay_agent(agent, traj)
    assert traj.outcome.result == ["OverloadedError", 529, body]
    assert result.exception is None and result.result == traj.outcome.result


def test_the_stream_helper_over_a_stream_that_breaks_off():
    import json

    import httpx2

    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "c",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": w},
                },
            )
            for w in ["Hel", "lo"]
        ),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    ]
    content = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    client = anthropic.Anthropic(
        api_key="sk-ant",
        base_url="http://127.0.0.1:9",
        http_client=httpx2.Client(
            transport=httpx2.MockTransport(
                lambda r: httpx2.Response(
                    200, content=content.encode(), headers={"content-type": "text/event-stream"}
                )
            )
        ),
        max_retries=0,
    )

    def agent():
        got = []
        try:
            with client.messages.stream(model="c", max_tokens=5, messages=[]) as stream:
                for text in stream.text_stream:
                    got.append(text)
        except anthropic.APIStatusError as exc:
            got.append(type(exc).__name__)
        return got

    assert agent() == ["Hel", "lo", "APIStatusError"]
    with instrument.installed("anthropic"):
        traj = record_agent(agent)
        held = replay_agent(agent, traj)
    assert traj.outcome.result == held.result == ["Hel", "lo", "APIStatusError"]
    assert traj.steps[0].error is None and len(traj.steps[0].action["items"]) == 4
