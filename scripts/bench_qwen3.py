#!/usr/bin/env python3
"""Baseline for `agentrl bench qwen3`: transformers scoring throughput on CPU.

`agentrl bench qwen3` writes a random-weight Qwen3 folder (float32 safetensors) and an inputs
file, then runs this script (interpreter from AGENTRL_PYTHON, else python3). The script loads the
same folder with transformers in float32, scores the same token ids the same way (full-sequence
forward, log-softmax, gather of the next-token log-probs) and prints one JSON object:
tokens_per_s, the per-repeat seconds, and the first row's log-probs for a cross-check.

    python3 scripts/bench_qwen3.py --model DIR --inputs inputs.json --repeats 3 --threads 2
"""
import argparse
import json
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--inputs", required=True, help='JSON: {"ids": [[...], ...]}')
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    try:
        import torch
        from transformers import Qwen3ForCausalLM
    except ImportError as err:
        print(json.dumps({"error": f"torch/transformers unavailable: {err}"}))
        return 3

    torch.set_num_threads(args.threads)
    with open(args.inputs) as f:
        ids = torch.tensor(json.load(f)["ids"], dtype=torch.long)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    model = Qwen3ForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()

    def score():
        with torch.inference_mode():
            logits = model(input_ids=inputs, use_cache=False).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            return logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    first = score()  # warm-up, also the cross-check values
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        score()
        seconds.append(time.perf_counter() - start)
    tokens = inputs.numel()
    print(json.dumps({
        "tokens_per_s": tokens / min(seconds),
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "first_row_logprobs": first[0].tolist(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
