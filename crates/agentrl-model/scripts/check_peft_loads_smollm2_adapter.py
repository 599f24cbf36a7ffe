#!/usr/bin/env python3
"""Checks that PEFT loads the adapter agentrl saved over SmolLM2 (tests/fixtures/smollm2/lora_agentrl)
and computes the same log-probs as agentrl did.

The base is the GGUF file itself, loaded by transformers (weights dequantized to f32); the
adapter is written by the ignored Rust test `export_smollm2_adapter_fixture` (`cargo test
--release --workspace --test model -- --ignored smollm2::export_smollm2_adapter_fixture`); CI's
`saved_smollm2_adapter_matches_the_peft_checked_fixture` keeps the saver producing these bytes.

    /work/venv-oracle/bin/python crates/agentrl-model/scripts/check_peft_loads_smollm2_adapter.py \
        [--gguf ~/.cache/agentrl/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json
import os
import sys

import peft
import torch
import transformers
from peft import PeftModel
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.join(HERE, "..", "tests", "fixtures", "smollm2", "lora_agentrl")
DEFAULT_GGUF = os.path.expanduser("~/.cache/agentrl/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", default=os.environ.get("AGENTRL_SMOLLM2_GGUF", DEFAULT_GGUF))
    args = parser.parse_args()
    torch.set_num_threads(2)
    base = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf), dtype=torch.float32
    ).eval()
    model = PeftModel.from_pretrained(base, ADAPTER).eval()
    with open(os.path.join(ADAPTER, "reference.json")) as f:
        ref = json.load(f)
    worst = 0.0
    effect = 0.0
    for item in ref["inputs"]:
        ids = item["ids"]
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
            theirs = [lp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
            with model.disable_adapter():
                base_lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
            base_theirs = [base_lp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
        worst = max(worst, max(abs(a - b) for a, b in zip(theirs, item["logprobs"])))
        # A zero adapter would also "load"; make sure it changed the model.
        effect = max(effect, max(abs(a - b) for a, b in zip(base_theirs, item["logprobs"])))
    print(json.dumps({
        "max_abs_diff_peft_vs_agentrl": worst,
        "adapter_effect": effect,
        "peft": peft.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }))
    return 0 if worst <= 1e-4 and effect > 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
