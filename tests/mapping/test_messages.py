import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_replay.mapping import MappedSpan, NormalizedSpan, llm_inputs
from agent_replay.mapping.messages import (
    call_id,
    loads_stripped,
    normalize_messages,
    normalize_system,
    normalize_tools,
    requested_tool_calls,
    tool_message,
    tool_responses,
)

# The same conversation (system, user, assistant tool call, tool result) in every accepted
# form; each must normalise to exactly EXPECTED.
EXPECTED = [
    {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}
        ],
    },
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "rainy"}]},
]

OTEL = [
    {"role": "system", "parts": [{"type": "text", "content": "Be brief."}], "name": None},
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}
        ],
    },
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "result": "rainy"}]},
]
OPENAI_CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "rainy"},
]
ANTHROPIC = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}
        ],
    },
    {
        "role": "tool",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "rainy"}],
    },
]
RESPONSES = [
    {"role": "system", "content": "Be brief."},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Weather in Paris?"}],
    },
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "rainy"},
]
GEMINI = [
    {"role": "system", "parts": [{"text": "Be brief."}]},
    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
    {
        "role": "model",
        "parts": [{"functionCall": {"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}}],
    },
    {
        "role": "tool",
        "parts": [{"functionResponse": {"id": "c1", "name": "get_weather", "response": "rainy"}}],
    },
]
LANGCHAIN = [
    {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "SystemMessage"],
        "kwargs": {"content": "Be brief."},
    },
    {"type": "human", "content": "Weather in Paris?"},
    {
        "type": "ai",
        "content": "",
        "tool_calls": [{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}],
    },
    {"type": "tool", "content": "rainy", "tool_call_id": "c1"},
]


@pytest.mark.parametrize(
    "form",
    [OTEL, OPENAI_CHAT, ANTHROPIC, RESPONSES, GEMINI, LANGCHAIN],
    ids=["otel", "openai", "anthropic", "responses", "gemini", "langchain"],
)
def test_every_form_normalises_to_the_otel_parts_shape(form):
    assert normalize_messages(form) == EXPECTED
    assert normalize_messages(json.dumps(form)) == EXPECTED  # JSON text on spans
    assert normalize_messages(EXPECTED) == EXPECTED  # idempotent


def test_wrappers_and_completions():
    assert normalize_messages({"messages": OPENAI_CHAT}) == EXPECTED
    assert normalize_messages({"messages": [OPENAI_CHAT]}) == EXPECTED  # LangChain batch
    choice = {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": "hi"},
    }
    assert normalize_messages({"choices": [choice]}) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}
    ]
    generations = {"generations": [[{"text": "hi", "message": {"type": "ai", "content": "hi"}}]]}
    assert normalize_messages(generations, default_role="assistant") == [
        {"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert normalize_messages("hello") == [
        {"role": "user", "parts": [{"type": "text", "content": "hello"}]}
    ]
    assert normalize_messages({"contents": "hello"}) == normalize_messages("hello")
    assert normalize_messages(None) is None
    assert normalize_messages(42) is None


def test_tool_call_ids_may_be_arrays():
    assert call_id(["run_1", "call_2"]) == "call_2"
    assert call_id([None, ""]) is None
    messages = normalize_messages(
        [
            {
                "role": "assistant",
                "parts": [{"type": "tool_call", "id": ["run_1", "call_2"], "name": "f"}],
            },
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": ["run_1", "call_2"], "response": 1}],
            },
        ]
    )
    assert requested_tool_calls(messages) == [("call_2", "f")]
    assert tool_responses(messages) == {"call_2": 1}


def test_koog_tool_call_messages_labelled_tool_become_assistant_calls():
    (message,) = normalize_messages(
        [
            {
                "role": "tool",
                "content": [
                    {
                        "function": {"name": "Hello", "arguments": {"n": 1}},
                        "id": "c",
                        "type": "function",
                    }
                ],
            }
        ]
    )
    assert message == {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c", "name": "Hello", "arguments": {"n": 1}}],
    }


def test_an_empty_text_part_is_no_content():
    """Traceloop writes a streamed tool call with an empty text part before it; the call reads
    as the same call written without one, in whatever form the empty text comes."""
    call = {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"n": 1}}
    expected = [{"role": "assistant", "parts": [call]}]
    for empty in (
        {"type": "text", "content": ""},
        {"type": "text", "text": None},
        "",
        {"text": ""},
    ):
        assert normalize_messages([{"role": "assistant", "parts": [empty, call]}]) == expected
    openai = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": call}]}
    assert normalize_messages([openai]) == expected
    assert normalize_messages([{"role": "user", "parts": [{"type": "text", "content": ""}]}]) == [
        {"role": "user", "parts": []}
    ]


def test_system_and_tools():
    assert normalize_system("Be brief.") == [{"type": "text", "content": "Be brief."}]
    assert normalize_system([{"type": "text", "content": "x"}]) == [
        {"type": "text", "content": "x"}
    ]
    openai_tool = {
        "type": "function",
        "function": {"name": "f", "description": None, "parameters": {}},
    }
    assert normalize_tools([openai_tool]) == [{"type": "function", "name": "f", "parameters": {}}]
    # Anthropic tools as the API takes them (OpenInference records them so): the schema is
    # the parameters; a server tool has none and keeps its versioned type
    anthropic_tools = [
        {"name": "f", "input_schema": {}},
        {"type": "custom", "name": "g", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    assert normalize_tools(anthropic_tools) == [
        {"type": "function", "name": "f", "parameters": {}},
        {"type": "function", "name": "g", "parameters": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    assert llm_inputs(OPENAI_CHAT, tools=[openai_tool], model="m") == {
        "messages": EXPECTED,
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "model": "m",
    }
    assert llm_inputs(None) is None


def tool_result(value: object) -> tuple[object, object]:
    """``(result, error)`` of a tool step whose recorded output is ``value``."""
    mapped = MappedSpan(span=NormalizedSpan(trace_id="t1", span_id="s1", name="get_weather"))
    mapped.set_tool_output(value)
    return mapped.action, mapped.error


def test_a_langchain_tool_message_as_a_tool_output_is_its_content():
    fields = {"content": "rainy", "type": "tool", "tool_call_id": "c1", "status": "success"}
    # LangSmith's tracer, Langfuse's callback handler
    assert tool_result(fields) == ("rainy", None)
    lc = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"]}
    assert tool_result({**lc, "kwargs": fields}) == ("rainy", None)
    # LangChain's message_to_dict form (openinference-langchain)
    assert tool_message({"type": "tool", "data": fields}) == fields
    assert tool_result({"type": "tool", "data": fields}) == ("rainy", None)
    # anything else is what the tool returned
    assert tool_result({"type": "tool", "content": "x"}) == ({"type": "tool", "content": "x"}, None)
    human = {**lc, "id": ["HumanMessage"], "kwargs": fields}
    assert tool_result(human) == (human, None)
    assert tool_result("rainy") == ("rainy", None)


def test_a_tool_message_of_status_error_is_a_failed_step_with_its_content_as_result():
    """What LangChain makes of a tool error it handled (``handle_tool_error``)."""
    fields = {"content": "timed out", "type": "tool", "tool_call_id": "c1", "status": "error"}
    failed = ("timed out", {"type": "error", "message": "timed out"})
    assert tool_result(fields) == failed
    lc = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"]}
    assert tool_result({**lc, "kwargs": fields}) == failed
    assert tool_result({"type": "tool", "data": fields}) == failed
    blocks = [{"type": "text", "text": "timed out"}]
    assert tool_result({**fields, "content": blocks}) == (
        blocks,
        {"type": "error", "message": json.dumps(blocks)},
    )
    # a dialect with precedence that said how the step failed is kept
    mapped = MappedSpan(span=NormalizedSpan(trace_id="t1", span_id="s1", name="get_weather"))
    mapped.error = {"type": "TimeoutError", "message": "timed out"}
    mapped.set_tool_output(fields)
    assert mapped.error == {"type": "TimeoutError", "message": "timed out"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_normaliser_never_raises_and_is_idempotent(value):
    first = normalize_messages(value)
    if first is not None:
        assert isinstance(first, list)
        assert normalize_messages(first) == first
    normalize_system(value)
    normalize_tools(value)


def _decoded(loads, text):
    try:
        return "value", repr(loads(text))  # repr: NaN is not equal to itself
    except RecursionError:
        return "too deep", None
    except ValueError:
        return "not JSON", None


# JSON text as attributes hold it (any separators, any whitespace inside and around), JSON with
# something after it, JSON's non-finite numbers and text that is not JSON at all
json_texts = st.one_of(
    st.tuples(
        json_values, st.sampled_from([None, 2]), st.sampled_from([(",", ":"), (", ", ": ")])
    ).map(lambda v: json.dumps(v[0], indent=v[1], separators=v[2])),
    st.tuples(json_values, st.text(max_size=5)).map(lambda v: json.dumps(v[0]) + v[1]),
    st.sampled_from(["NaN", "-Infinity", "[1e999]", '"\\ud800"', "[1,]", '{"a" 1}', "[" * 40]),
    st.text(max_size=20),
)


@settings(max_examples=500, deadline=None)
@given(json_texts)
def test_loads_stripped_decodes_as_json_loads(text):
    """The decoder behind every JSON attribute the dialects read gives what ``json.loads``
    gives (or fails where it fails) on the stripped text."""
    stripped = text.strip()
    assert _decoded(loads_stripped, stripped) == _decoded(json.loads, stripped)
