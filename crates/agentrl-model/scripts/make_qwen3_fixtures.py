#!/usr/bin/env python3
"""Makes the Qwen3 parity and LoRA fixtures under ../tests/fixtures/qwen3/.

Run with the project's torch environment (never needed by CI, which only reads the output):

    /work/pyenv/bin/python crates/agentrl-model/scripts/make_qwen3_fixtures.py

For each tiny random configuration it saves an HF model folder (config.json + safetensors,
one of them sharded with model.safetensors.index.json, one of them in bfloat16) and
`reference.json`: per-token log-probs computed by transformers' Qwen3ForCausalLM in float32.

Inputs are real Qwen3 token ids (the shared tokenizer on plain text, and the shared chat
template + tokenizer on conversations with tools), taken modulo the tiny vocabulary size so
they fit the small embedding tables. `logprobs[i]` is log p(ids[i+1] | ids[..=i]).

It also makes `lora_peft/`: a PEFT LoRA adapter (seeded non-zero B) on the first config,
saved by PEFT itself, with the log-probs PEFT computes with the adapter applied.

Every `reference.json` records the script and the library versions that made it under
`generated_by`.
"""
import json
import os
import platform
import shutil
import sys

import peft
import tokenizers
import torch
import transformers
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "qwen3")
ASSETS = os.environ.get(
    "AGENTRL_QWEN3_DIR", os.path.join(HERE, "..", "..", "..", "..", "shared", "assets", "qwen3")
)

VOCAB = 512
GENERATED_BY = {
    "script": "crates/agentrl-model/scripts/make_qwen3_fixtures.py",
    "python": platform.python_version(),
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "tokenizers": tokenizers.__version__,
    "peft": peft.__version__,
}

# name -> (config overrides, save options). head_dim differs from hidden/heads in b and d.
CONFIGS = {
    "gqa2_tied": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      intermediate_size=128, tie_word_embeddings=True, rope_theta=1000000.0),
    "gqa4_untied_hd32": dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=1,
                             head_dim=32, intermediate_size=96, tie_word_embeddings=False,
                             rope_theta=10000.0),
    "mha_untied_sharded": dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                               head_dim=8, intermediate_size=64, tie_word_embeddings=False,
                               rope_theta=1000000.0),
    "gqa4_tied_hd8_bf16": dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
                               head_dim=8, intermediate_size=128, tie_word_embeddings=True,
                               rope_theta=1000000.0),
}

TEXTS = [
    "def add(a, b):\n    return a - b  # bug: should be a + b\n",
    "Hello, world! Ünïcödé → 数字 and   awkward\twhitespace.",
]

TOOLS = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]

CONVERSATIONS = [
    [{"role": "system", "content": "You fix bugs."},
     {"role": "user", "content": "Fix add() in calc.py"},
     {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function",
                      "function": {"name": "read", "arguments": {"path": "calc.py"}}}]},
     {"role": "tool", "content": "def add(a, b):\n    return a - b\n"},
     {"role": "assistant", "content": "The bug is the minus sign."}],
]


def make_inputs(tok):
    inputs = []
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        inputs.append({"kind": "text", "source_ids": ids})
    for messages in CONVERSATIONS:
        ids = tok.apply_chat_template(messages, tools=TOOLS, tokenize=True,
                                      add_generation_prompt=False)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        inputs.append({"kind": "chat", "source_ids": list(ids)})
    for item in inputs:
        item["ids"] = [i % VOCAB for i in item["source_ids"]]
    return inputs


def randomize(model, seed):
    """Large-ish random weights (std 0.2) and non-trivial norm weights, so log-probs are far
    from uniform and every tensor matters for the comparison."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def logprobs_of(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return [lp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]


def build(name, overrides, seed):
    cfg = Qwen3Config(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, attention_bias=False, **overrides)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval().float()
    randomize(model, seed)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model


def main():
    tok = AutoTokenizer.from_pretrained(ASSETS)
    inputs = make_inputs(tok)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    summary = {}
    for seed, (name, overrides) in enumerate(CONFIGS.items()):
        model = build(name, overrides, 1000 + seed)
        folder = os.path.join(OUT, name)
        if name.endswith("_bf16"):
            model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
        elif "sharded" in name:
            model.save_pretrained(folder, safe_serialization=True, max_shard_size="40KB")
        else:
            model.save_pretrained(folder, safe_serialization=True)
        for extra in ("generation_config.json",):
            path = os.path.join(folder, extra)
            if os.path.exists(path):
                os.remove(path)
        # The reference comes from the saved folder, reloaded in float32: for the bf16 folder
        # that is the bf16-rounded weights computed in float32 (module.to(bf16) would also round
        # the RoPE inv_freq buffer, which a fresh load does not).
        model = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        ref = {"generated_by": GENERATED_BY, "vocab_size": VOCAB, "inputs": []}
        for item in inputs:
            ref["inputs"].append({"kind": item["kind"], "ids": item["ids"],
                                  "logprobs": logprobs_of(model, item["ids"])})
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump(ref, f)
        summary[name] = sorted(os.listdir(folder))
        if name == "gqa2_tied":
            make_lora(model, inputs)
    print(json.dumps(summary, indent=1))


def make_lora(model, inputs):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                        "up_proj", "down_proj"])
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "lora_A" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    peft_model.eval()
    folder = os.path.join(OUT, "lora_peft")
    peft_model.save_pretrained(folder)
    # The base folder is a sibling fixture; keep the adapter config portable.
    cfg_path = os.path.join(folder, "adapter_config.json")
    with open(cfg_path) as f:
        adapter_cfg = json.load(f)
    adapter_cfg["base_model_name_or_path"] = "../gqa2_tied"
    with open(cfg_path, "w") as f:
        json.dump(adapter_cfg, f, indent=2, sort_keys=True)
    readme = os.path.join(folder, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    ref = {"generated_by": GENERATED_BY, "base": "gqa2_tied", "inputs": []}
    for item in inputs:
        ref["inputs"].append({"kind": item["kind"], "ids": item["ids"],
                              "logprobs": logprobs_of(peft_model, item["ids"])})
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f)


if __name__ == "__main__":
    sys.exit(main())
