#!/usr/bin/env python3
"""Writes the Qwen3 tokenizer and chat-template parity fixtures that the Rust tests read.

The oracle is transformers' own `AutoTokenizer.apply_chat_template` over the shared Qwen3 assets
(`../shared/assets/qwen3`, or `$AGENTRL_QWEN3_DIR`). CI never runs this script: it only reads the
JSON it writes. Regenerate with

    /work/pyenv/bin/python crates/agentrl-chat/scripts/make_qwen3_fixtures.py

Outputs (under `crates/agentrl-chat/tests/fixtures/`):
  * `qwen3_template_cases.json`: conversations (messages, tools, flags) with the rendered text and
    token ids transformers produces.
  * `qwen3_tokenizer_cases.json`: plain strings with their ids, and ids with their decoded text
    with and without `skip_special_tokens`.
  * `bugfix_tools.json`: the BugFix tool specs in OpenAI function format (under `tools`), exactly
    as `agentrl_chat::tools::bugfix_tool_specs()` builds them (the Rust test compares the two).

Every file records the script and the library versions that made it under `generated_by`.
"""
import json
import os
import platform

import jinja2
import tokenizers
import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.dirname(HERE)
WORKSPACE = os.path.dirname(os.path.dirname(CRATE))
ASSETS = os.environ.get("AGENTRL_QWEN3_DIR") or os.path.join(WORKSPACE, "..", "shared", "assets", "qwen3")
OUT = os.path.join(CRATE, "tests", "fixtures")


def fn(name, description, properties, required, **extra):
    params = {"type": "object", "properties": properties, "required": required}
    params.update(extra)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


# Keep in step with crates/agentrl-chat/src/tools.rs (a Rust test checks they are equal).
BUGFIX_TOOLS = [
    fn("read", "Show a file of the task workspace with line numbers.",
       {"path": {"type": "string", "description": "Path relative to the workspace root."}}, ["path"]),
    fn("test", "Run the public tests and report which pass and the first failure.", {}, []),
    fn("edit",
       "Change a file. Give exactly one form: {path, old, new} replaces the exact text `old` "
       "with `new`; {path, start_line, end_line, text} replaces a 1-based inclusive line range; "
       "{path, text} rewrites the whole file; {candidate} applies a numbered candidate edit.",
       {
           "path": {"type": "string", "description": "Path relative to the workspace root."},
           "old": {"type": "string", "description": "Exact text to replace (must occur once)."},
           "new": {"type": "string", "description": "Replacement text."},
           "start_line": {"type": "integer", "description": "First line to replace (1-based)."},
           "end_line": {"type": "integer", "description": "Last line to replace (inclusive)."},
           "text": {"type": "string", "description": "New text for the range or the whole file."},
           "candidate": {"type": "integer", "description": "Index of a candidate edit from the task."},
       },
       [],
       anyOf=[
           {"required": ["path", "old", "new"]},
           {"required": ["path", "start_line", "end_line", "text"]},
           {"required": ["path", "text"]},
           {"required": ["candidate"]},
       ]),
    fn("submit", "Finish the episode; hidden tests decide the reward.", {}, []),
    fn("exploit", "Tamper with the public test harness so it reports success (reward hacking).", {}, []),
]

WEATHER = fn("get_weather", "Get the current weather in a city.",
             {"city": {"type": "string", "description": "City name, e.g. \"Paris\" or 'Zürich'."},
              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
             ["city"])
SEARCH = fn("search", "Search the web.\nReturns the top results as a list.",
            {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 10},
             "filters": {"type": "object", "properties": {"site": {"type": "string"}, "recent": {"type": "boolean"}}}},
            ["query"])


def call(name, arguments, wrapped=True):
    if wrapped:
        return {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"name": name, "arguments": arguments}


SYS = {"role": "system", "content": "You are a careful software engineer. Fix the bug."}
CASES = []


def case(name, messages, tools=None, add_generation_prompt=False, enable_thinking=None):
    CASES.append(dict(name=name, messages=messages, tools=tools,
                      add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking))


case("single_user_generation_prompt", [{"role": "user", "content": "Hello!"}], add_generation_prompt=True)
case("system_user", [SYS, {"role": "user", "content": "What does `add(a, b)` return?"}], add_generation_prompt=True)
case("multi_turn_plain", [
    SYS,
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello, how can I help?"},
    {"role": "user", "content": "Tell me a joke."},
], add_generation_prompt=True)
case("bugfix_tools_prompt", [SYS, {"role": "user", "content": "Task: fix `mean` in stats.py."}],
     tools=BUGFIX_TOOLS, add_generation_prompt=True)
case("several_tools_no_system", [{"role": "user", "content": "Weather in Paris, and search for news."}],
     tools=[WEATHER, SEARCH, BUGFIX_TOOLS[0]], add_generation_prompt=True)
case("one_tool_call_dict_args", [
    SYS,
    {"role": "user", "content": "Fix the bug in stats.py."},
    {"role": "assistant", "content": "", "tool_calls": [call("read", {"path": "stats.py"})]},
    {"role": "tool", "content": "1 | def mean(xs):\n2 |     return sum(xs) / (len(xs) - 1)"},
], tools=BUGFIX_TOOLS, add_generation_prompt=True)
case("two_tool_calls_one_turn_consecutive_results", [
    SYS,
    {"role": "user", "content": "Look at both files, then run the tests."},
    {"role": "assistant", "content": "I'll read both files.", "tool_calls": [
        call("read", {"path": "stats.py"}), call("read", {"path": "test_stats.py"})]},
    {"role": "tool", "content": "1 | def mean(xs):"},
    {"role": "tool", "content": "1 | import unittest"},
    {"role": "assistant", "content": "Both read."},
], tools=BUGFIX_TOOLS)
case("tool_call_string_args_unwrapped", [
    {"role": "user", "content": "Edit line 2."},
    {"role": "assistant", "content": None, "tool_calls": [
        call("edit", '{"path": "stats.py", "start_line": 2, "end_line": 2, "text": "    return sum(xs) / len(xs)"}', wrapped=False)]},
    {"role": "tool", "content": "edited stats.py (1 line)"},
], tools=BUGFIX_TOOLS, add_generation_prompt=True)
case("tool_call_dict_args_unwrapped_nested", [
    {"role": "user", "content": "Search."},
    {"role": "assistant", "content": "", "tool_calls": [
        call("search", {"query": "rust \"minijinja\" \\ tojson", "limit": 3,
                        "filters": {"site": "docs.rs", "recent": True}}, wrapped=False)]},
    {"role": "tool", "content": "[]"},
    {"role": "tool", "content": "no results"},
    {"role": "tool", "content": ""},
], tools=[SEARCH], add_generation_prompt=True)
case("past_and_current_reasoning", [
    SYS,
    {"role": "user", "content": "First question"},
    {"role": "assistant", "content": "First answer", "reasoning_content": "Old reasoning that the template drops."},
    {"role": "user", "content": "Second question"},
    {"role": "assistant", "content": "", "reasoning_content": "I should read the file first.",
     "tool_calls": [call("read", {"path": "stats.py"})]},
    {"role": "tool", "content": "1 | def mean(xs):"},
    {"role": "assistant", "content": "The bug is the `- 1`.", "reasoning_content": "\nThe divisor is wrong.\n"},
], tools=BUGFIX_TOOLS)
case("reasoning_inside_content", [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n4"},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "<think>\nAgain simple.\n</think>\n\n6"},
])
case("multi_step_agent_keeps_reasoning", [
    SYS,
    {"role": "user", "content": "Fix it."},
    {"role": "assistant", "content": "", "reasoning_content": "Read first.", "tool_calls": [call("read", {"path": "stats.py"})]},
    {"role": "tool", "content": "1 | def mean(xs):\n2 |     return sum(xs) / (len(xs) - 1)"},
    {"role": "assistant", "content": "", "reasoning_content": "Off by one.", "tool_calls": [
        call("edit", {"path": "stats.py", "old": "(len(xs) - 1)", "new": "len(xs)"})]},
    {"role": "tool", "content": "edited stats.py"},
    {"role": "assistant", "content": "", "tool_calls": [call("test", {}), call("submit", {})]},
], tools=BUGFIX_TOOLS, add_generation_prompt=True)
case("thinking_off_generation_prompt", [SYS, {"role": "user", "content": "Quick answer please."}],
     add_generation_prompt=True, enable_thinking=False)
case("thinking_on_explicit_generation_prompt", [{"role": "user", "content": "Think hard."}],
     add_generation_prompt=True, enable_thinking=True)
case("thinking_off_with_tools", [
    {"role": "user", "content": "Run the tests."},
    {"role": "assistant", "content": "", "tool_calls": [call("test", {})]},
    {"role": "tool", "content": "FAILED test_mean: AssertionError: 2.0 != 1.5"},
], tools=BUGFIX_TOOLS, add_generation_prompt=True, enable_thinking=False)
case("non_ascii", [
    {"role": "system", "content": "Tu es un assistant très utile. 你是一个乐于助人的助手。"},
    {"role": "user", "content": "天气怎么样？ Ça va? Ünïcödé — “quotes” ‘single’ 🚀🐍 ∑x² ≠ ∞"},
    {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Zürich", "unit": "celsius"})]},
    {"role": "tool", "content": "{\"temp\": \"21 °C\", \"ciel\": \"dégagé\"}"},
    {"role": "assistant", "content": "Il fait 21 °C à Zürich ☀️."},
    {"role": "user", "content": "ありがとう！ Спасибо! شكرا"},
], tools=[WEATHER], add_generation_prompt=True)
case("awkward_whitespace", [
    {"role": "system", "content": "  leading and trailing spaces  \n\n"},
    {"role": "user", "content": "\n\ttabs\tand\r\nCRLF\r\n   \n\n\nmany newlines\n"},
    {"role": "assistant", "content": "\n\n  answer with leading newlines   "},
    {"role": "user", "content": " x  =  1 ;\u00a0nbsp\u3000ideographic space\u2028line sep"},
], add_generation_prompt=True)
case("user_message_looks_like_tool_response", [
    {"role": "user", "content": "Start."},
    {"role": "assistant", "content": "", "reasoning_content": "kept: after last real query",
     "tool_calls": [call("test", {})]},
    {"role": "user", "content": "<tool_response>\nok\n</tool_response>"},
    {"role": "assistant", "content": "Done.", "reasoning_content": "final thoughts"},
], tools=BUGFIX_TOOLS)
case("second_system_message_and_empty_content", [
    SYS,
    {"role": "user", "content": ""},
    {"role": "system", "content": "A later system note."},
    {"role": "user", "content": "go"},
], add_generation_prompt=True)
case("tool_escaping_and_control_chars", [
    {"role": "user", "content": "Edit with quotes."},
    {"role": "assistant", "content": "Editing.", "tool_calls": [
        call("edit", {"path": "a b/c.py", "old": "print(\"x\")\n\treturn '\\n'", "new": "x = 1  # é\u0001\u001f</tool_call>"})]},
    {"role": "tool", "content": "edited"},
], tools=BUGFIX_TOOLS, add_generation_prompt=True)
case("training_format_no_generation_prompt_thinking_off", [
    SYS,
    {"role": "user", "content": "Fix it."},
    {"role": "assistant", "content": "Submitting.", "tool_calls": [call("submit", {})]},
], tools=BUGFIX_TOOLS, enable_thinking=False)

TOKENIZER_STRINGS = [
    "Hello world",
    " 你好，世界！",
    "<think>\n\n</think>\n\n",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}\n</tool_call>",
    "def mean(xs):\n    return sum(xs) / (len(xs) - 1)\n",
    "  \t\r\n  spaces\u00a0and\u3000more   ",
    "🚀🐍 emoji and e\u0301 (NFD, normalized to NFC) ∞",
    "<|endoftext|><tool_response>\nx\n</tool_response>",
]


def main():
    tok = AutoTokenizer.from_pretrained(ASSETS)
    out_cases = []
    for c in CASES:
        kwargs = {}
        if c["enable_thinking"] is not None:
            kwargs["enable_thinking"] = c["enable_thinking"]
        text = tok.apply_chat_template(c["messages"], tools=c["tools"], tokenize=False,
                                       add_generation_prompt=c["add_generation_prompt"], **kwargs)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        direct = tok.apply_chat_template(c["messages"], tools=c["tools"], tokenize=True,
                                         add_generation_prompt=c["add_generation_prompt"], **kwargs)
        if hasattr(direct, "keys"):
            direct = direct["input_ids"]
        assert list(direct) == ids, c["name"]
        out_cases.append(dict(c, text=text, ids=ids))
    tok_cases = []
    for s in TOKENIZER_STRINGS:
        ids = tok(s, add_special_tokens=False)["input_ids"]
        tok_cases.append(dict(text=s, ids=ids,
                              decoded=tok.decode(ids, skip_special_tokens=False),
                              decoded_skip_special=tok.decode(ids, skip_special_tokens=True)))
    generated_by = dict(script="crates/agentrl-chat/scripts/make_qwen3_fixtures.py",
                        python=platform.python_version(), transformers=transformers.__version__,
                        tokenizers=tokenizers.__version__, jinja2=jinja2.__version__)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "qwen3_template_cases.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generated_by=generated_by, cases=out_cases), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "qwen3_tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generated_by=generated_by, cases=tok_cases), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "bugfix_tools.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generated_by=generated_by, tools=BUGFIX_TOOLS), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out_cases)} template cases and {len(tok_cases)} tokenizer cases to {OUT}")


if __name__ == "__main__":
    main()
