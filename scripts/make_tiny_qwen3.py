#!/usr/bin/env python3
"""Makes a tiny random Qwen3 model folder with the real Qwen3 tokenizer, to try
`agentrl score` (and `agentrl chat render`) offline:

    python3 scripts/make_tiny_qwen3.py --out /tmp/tiny-qwen3
    echo '{"text": "def add(a, b): return a + b"}' > /tmp/lines.jsonl
    agentrl score --model /tmp/tiny-qwen3 --input /tmp/lines.jsonl

The weights are random (seeded), so the log-probs mean nothing; the shapes, names, vocabulary
and chat template are Qwen3's. Standard library only. The tokenizer and template files are
copied at run time from the shared Qwen3 assets (`--assets`, default `../shared/assets/qwen3`
beside the repository); they are never committed here.
"""

import argparse
import json
import random
import shutil
import struct
import sys
from array import array
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSET_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "generation_config.json",
]


def tiny_config(vocab_size, hidden=16):
    # Mirrors agentrl_model::qwen3::Qwen3Config::to_hf_json.
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": max(8, hidden // 4),
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "tie_word_embeddings": True,
        "max_position_embeddings": 4096,
        "use_sliding_window": False,
        "sliding_window": None,
        "torch_dtype": "float32",
    }


def weight_shapes(c):
    # Mirrors agentrl_model::qwen3::Qwen3Config::weight_shapes.
    h, i, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    shapes = [("model.embed_tokens.weight", [c["vocab_size"], h])]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        shapes += [
            (f"{p}.input_layernorm.weight", [h]),
            (f"{p}.self_attn.q_proj.weight", [nq * hd, h]),
            (f"{p}.self_attn.k_proj.weight", [nkv * hd, h]),
            (f"{p}.self_attn.v_proj.weight", [nkv * hd, h]),
            (f"{p}.self_attn.o_proj.weight", [h, nq * hd]),
            (f"{p}.self_attn.q_norm.weight", [hd]),
            (f"{p}.self_attn.k_norm.weight", [hd]),
            (f"{p}.post_attention_layernorm.weight", [h]),
            (f"{p}.mlp.gate_proj.weight", [i, h]),
            (f"{p}.mlp.up_proj.weight", [i, h]),
            (f"{p}.mlp.down_proj.weight", [h, i]),
        ]
    shapes.append(("model.norm.weight", [h]))
    return shapes


def write_safetensors(path, shapes, seed, scale, embed_scale):
    """safetensors: u64 header length, JSON header, then little-endian f32 data."""
    rng = random.Random(seed)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        if name.endswith("norm.weight"):
            values = array("f", [1.0]) * n
        elif name == "model.embed_tokens.weight":
            # The tied LM head: with LoRA the embedding stays frozen, so its scale sets how
            # sharply any hidden state can single out one token of the 151,936.
            values = array("f", (rng.uniform(-embed_scale, embed_scale) for _ in range(n)))
        else:
            values = array("f", (rng.uniform(-scale, scale) for _ in range(n)))
        if sys.byteorder != "little":
            values.byteswap()
        blob = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def vocab_size(assets):
    """The model's vocabulary size from the real config (151936 for Qwen3)."""
    return json.loads((assets / "config.json").read_text())["vocab_size"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder to create")
    parser.add_argument(
        "--assets",
        type=Path,
        default=REPO.parent / "shared" / "assets" / "qwen3",
        help="folder with the real Qwen3 tokenizer files (default: ../shared/assets/qwen3)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--scale", type=float, default=0.5, help="weights are uniform in ±scale")
    parser.add_argument(
        "--embed-scale",
        type=float,
        default=None,
        help="the (tied) embedding is uniform in ±embed-scale (default: --scale)",
    )
    parser.add_argument("--hidden-size", type=int, default=16, help="hidden size (16, 32, 64, ...)")
    args = parser.parse_args()

    missing = [f for f in ["config.json", "tokenizer.json"] if not (args.assets / f).is_file()]
    if missing:
        sys.exit(f"error: {args.assets} lacks {', '.join(missing)}; pass --assets DIR")
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"error: {args.out} exists and is not empty; choose a new folder")
    args.out.mkdir(parents=True, exist_ok=True)
    config = tiny_config(vocab_size(args.assets), args.hidden_size)
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    embed_scale = args.scale if args.embed_scale is None else args.embed_scale
    write_safetensors(
        args.out / "model.safetensors", weight_shapes(config), args.seed, args.scale, embed_scale
    )
    for name in ASSET_FILES:
        if (args.assets / name).is_file():
            shutil.copyfile(args.assets / name, args.out / name)
    print(args.out)


if __name__ == "__main__":
    main()
