#!/usr/bin/env python3
# Writes tests/data/text/chat/cases.json: the conversations, tools and variants every real chat
# template is rendered with (by the Jinja2 oracle and by tpullm). Used by gen-chat-oracle.sh.
import json, os, sys

out = sys.argv[1]

tools = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city (°C or °F).",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name, e.g. 東京"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.\nReturns \"snippets\".",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                         "top_k": {"type": "integer", "default": 3}},
                       "required": ["query"]}}},
]

SYS = {"role": "system", "content": "You are a helpful assistant."}
def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}
def T(c): return {"role": "tool", "content": c}

call_obj = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
call_two = {"role": "assistant", "content": "Let me check both.",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                           {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Paris events\"}"}}]}
call_none_str = {"role": "assistant", "content": None,
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                                {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Paris\"}"}}]}

conversations = [
    {"name": "single_user", "messages": [U("Hello!")]},
    {"name": "system_user", "messages": [SYS, U("What is 2 + 2?")]},
    {"name": "multi_turn", "messages": [SYS, U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")]},
    {"name": "multi_turn_no_system", "messages": [U("Hi"), A("Hello."), U("Count to three."), A("1, 2, 3."), U("Thanks")]},
    {"name": "ends_with_assistant", "messages": [SYS, U("Hi"), A("Hello!")]},
    {"name": "think_history", "messages": [U("What is 3*7?"), A("<think>\n3*7 is 21.\n</think>\n\n21"), U("And 4*7?")]},
    {"name": "think_last", "messages": [U("What is 3*7?"), A("<think>\nEasy.\n</think>\n\n21")]},
    {"name": "reasoning_content", "messages": [U("Why is the sky blue?"),
                                               {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Short answer."},
                                               U("More detail?")]},
    {"name": "tools_single", "use_tools": True, "messages": [SYS, U("Weather in Paris?")]},
    {"name": "tools_no_system", "use_tools": True, "messages": [U("Weather in Paris?")]},
    {"name": "tool_call_round", "use_tools": True, "messages": [SYS, U("Weather in Paris?"), call_obj,
                                                                 T("{\"temp\": 18, \"sky\": \"cloudy\"}"), A("It is 18 °C and cloudy in Paris.")]},
    {"name": "two_tool_calls", "use_tools": True, "messages": [U("Weather and events in Paris?"), call_two,
                                                                T("{\"temp\": 18}"), T("[\"Jazz night\"]"), U("Thanks!")]},
    {"name": "tool_call_null_content", "use_tools": True, "messages": [U("Weather in Paris?"), call_none_str,
                                                                        T("{\"temp\": 18}"), T("{\"hits\": 2}"), A("18 °C.")]},
    {"name": "tool_response_user", "messages": [U("Start"), A("ok"), U("<tool_response>\nresult\n</tool_response>")]},
    {"name": "unicode", "messages": [SYS, U("日本語で答えて 🙂👩‍👩‍👧 café, naïve"), A("はい、わかりました。✨"), U("Ελληνικά; Кириллица? עברית")]},
    {"name": "whitespace", "messages": [U("  padded with spaces  \n\n"), A("\n\nanswer\t\n"), U("line1\r\nline2\n  indented")]},
    {"name": "special_chars", "messages": [U("Quotes ' \" and backslash \\ and {{ braces }} {% tag %} {# c #}"), A("<|im_end|> is not special here"), U("</s><s>[INST]")]},
    {"name": "two_systems", "messages": [SYS, {"role": "system", "content": "Answer briefly."}, U("Hi")]},
    {"name": "not_alternating", "messages": [U("one"), U("two")]},
    {"name": "content_parts", "messages": [{"role": "user", "content": [{"type": "text", "text": " Describe "}, {"type": "image"}, {"type": "text", "text": "this."}]}]},
    {"name": "empty_messages", "messages": []},
    {"name": "empty_content", "messages": [U(""), A(""), U("")]},
]

variants = [
    {"add_generation_prompt": True},
    {"add_generation_prompt": False},
    {"add_generation_prompt": True, "enable_thinking": False},
    {"add_generation_prompt": True, "enable_thinking": True},
]

with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"tools": tools, "conversations": conversations, "variants": variants}, f, ensure_ascii=False, indent=1)
    f.write("\n")
