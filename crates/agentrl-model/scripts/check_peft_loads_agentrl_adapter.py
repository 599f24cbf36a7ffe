#!/usr/bin/env python3
"""Checks that PEFT loads the adapter agentrl saved (tests/fixtures/qwen3/lora_agentrl) and
computes the same log-probs as agentrl did.

The fixture is written by the ignored Rust test `export_agentrl_adapter_fixture` (`cargo test
--release --workspace --test model -- --ignored qwen3::export_agentrl_adapter_fixture`); CI's
`saved_adapter_matches_the_peft_checked_fixture` keeps the saver producing exactly these bytes.

    /work/pyenv/bin/python crates/agentrl-model/scripts/check_peft_loads_agentrl_adapter.py
"""
import json
import os
import sys

import torch
from peft import PeftModel
from transformers import Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "qwen3")


def main():
    base = Qwen3ForCausalLM.from_pretrained(os.path.join(FIXTURES, "gqa2_tied"),
                                            dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, os.path.join(FIXTURES, "lora_agentrl")).eval()
    with open(os.path.join(FIXTURES, "lora_agentrl", "reference.json")) as f:
        ref = json.load(f)
    worst = 0.0
    for item in ref["inputs"]:
        ids = item["ids"]
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        theirs = [lp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
        worst = max(worst, max(abs(a - b) for a, b in zip(theirs, item["logprobs"])))
    # A zero adapter would also "load"; make sure it changed the model.
    with torch.no_grad(), model.disable_adapter():
        ids = ref["inputs"][0]["ids"]
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        base_lp = [lp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
    effect = max(abs(a - b) for a, b in zip(base_lp, ref["inputs"][0]["logprobs"]))
    print(json.dumps({"max_abs_diff_peft_vs_agentrl": worst, "adapter_effect": effect}))
    return 0 if worst <= 1e-4 and effect > 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
