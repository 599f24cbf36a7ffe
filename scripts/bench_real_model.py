#!/usr/bin/env python3
"""Baselines for `agentrl bench real-model` (issue 41): llama.cpp and transformers on SmolLM2.

`agentrl bench real-model` runs this script (interpreter from AGENTRL_PYTHON, else python3) on the
same GGUF it loads itself, with the same thread count, and reads one JSON object (stdout, and
`--json-out` when given). Measured, each as best of `--repeats` after one warm-up:

  * llama.cpp (llama-cpp-python) on the file's own quantization (Q4_1) and on an F32 GGUF
    (`--f32-gguf`, else written to a temp dir: every tensor dequantized with the `gguf` package,
    same metadata): scoring tokens/s at 128 and 512 tokens (one forward over the prompt with every
    position's logits; the F32 file with an F32 KV cache, the quantized one with llama.cpp's default
    F16 cache), generation tokens/s at batch 1 and batch 16 (greedy, 64 new tokens after
    a short chat prompt; batch 16 = 16 sequences decoded together in one context through the
    low-level `llama_batch` API with `n_seq_max=16`), and the largest |log-prob - transformers
    f32| over the 512-token scoring input;
  * transformers f32 and bf16 (weights dequantized from the same GGUF): the same scoring
    tokens/s, generation tokens/s at batch 1 and 16 (`generate`, greedy, 64 new tokens, left
    padding), and bf16's largest log-prob gap from f32.

Generation tokens/s = new tokens (batch x 64) / wall time of prefill + decode; generation never
stops early (EOS is ignored for llama.cpp, `min_new_tokens=64` for transformers). A backend that
is missing or fails reports {"error": ...} instead of numbers. Each llama.cpp run is a child
process: a native crash there (a `-DGGML_NATIVE=ON` build on a CPU that advertises AMX, in a VM
that faults on AMX instructions, dies with SIGSEGV in `ggml_backend_amx_mul_mat`) is reported, and
the run is retried once with llama.cpp's extra buffer types (AMX, repacking) off, which says so
under `earlier_attempts`. Build llama-cpp-python with CFLAGS/CXXFLAGS="-mno-amx-tile -mno-amx-int8
-mno-amx-bf16" on such machines.

    python3 scripts/bench_real_model.py --gguf ~/.cache/agentrl/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        --threads 2 [--f32-gguf F32.gguf] [--repeats 3] [--json-out out.json]
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback

GEN_NEW = 64
BATCH = 16
SCORE_LENGTHS = (128, 512)

SYSTEM = (
    "You fix a bug in a small Python project. Work in turns: read files, run the public tests, "
    "edit the code, and call `submit` when the fix is done; hidden tests decide the reward. Make "
    "exactly one tool call per turn; its result comes back as a tool response."
)
CODE = '''"""Helpers for keeping the most recent entries of a sequence."""


def newest(records, size):
    """Return the last `size` entries of `records` as a list, oldest first.

    A non-positive `size` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if size <= 0:
        return []
    start = len(records) - size - 1
    if start < 0:
        start = 0
    return list(records[start:])


def count_recent(records, size, target):
    """Count how often `target` occurs among the last `size` entries."""
    return newest(records, size).count(target)


def moving_average(values, window):
    """Average of each run of `window` consecutive values, in order."""
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out


def histogram(values, bins, low, high):
    """Count values into `bins` equal-width bins over [low, high)."""
    counts = [0] * bins
    width = (high - low) / bins
    for value in values:
        if low <= value < high:
            counts[int((value - low) // width)] += 1
    return counts
'''
GEN_QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Explain recursion in one sentence.",
    "Give me three tips for writing clean code.", "What does a Python list comprehension do?",
    "How do I reverse a string in Python?", "Name three prime numbers.", "What is a hash map?",
    "Why is the sky blue?", "Summarize the plot of Hamlet briefly.", "What is gradient descent?",
    "Translate 'good morning' into Spanish.", "How many legs does a spider have?",
    "What is the difference between a tuple and a list?", "Suggest a name for a pet turtle.",
    "What is 17 times 23?",
]


def chatml(messages, add_generation_prompt=True):
    out = ""
    if messages[0][0] != "system":
        out += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    for role, content in messages:
        out += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    if add_generation_prompt:
        out += "<|im_start|>assistant\n"
    return out


def scoring_text():
    turns = [("system", SYSTEM),
             ("user", "`newest` in `ledger.py` returns the wrong entries. Fix it so that it does what its docstring says."),
             ("assistant", '<tool_call>\n{"name": "read", "arguments": {"path": "ledger.py"}}\n</tool_call>'),
             ("user", "<tool_response>\n" + CODE + "\n</tool_response>"),
             ("assistant", '<tool_call>\n{"name": "test", "arguments": {}}\n</tool_call>'),
             ("user", "<tool_response>\n3 passed, 1 failed: test_newest_two (expected [7, 8], got [6, 7, 8])\n</tool_response>")]
    return chatml(turns, add_generation_prompt=False) * 2


def best(fn, repeats):
    fn()  # warm-up
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    return min(secs), secs


def log_softmax_np(logits):
    import numpy as np
    logits = logits.astype(np.float64)
    mx = logits.max(-1, keepdims=True)
    return logits - (np.log(np.exp(logits - mx).sum(-1, keepdims=True)) + mx)


def versions():
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "gguf", "llama_cpp_python", "numpy", "accelerate"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ----------------------------------------------------------------------------------------------
# F32 GGUF
# ----------------------------------------------------------------------------------------------

def write_f32_gguf(src, dst):
    """Copy `src` to `dst` with every tensor dequantized to F32 and the metadata unchanged
    (except general.file_type = ALL_F32)."""
    import gguf
    import numpy as np
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch=arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------------------------------
# llama.cpp
# ----------------------------------------------------------------------------------------------

def set_llama_extra_bufts(enabled):
    """llama.cpp's extra CPU buffer types (AMX, repacked layouts) on or off for every model loaded
    from now on; llama-cpp-python's `Llama` has no argument for it."""
    import llama_cpp.llama_cpp as lcc
    orig = getattr(lcc, "_agentrl_default_model_params", lcc.llama_model_default_params)
    lcc._agentrl_default_model_params = orig

    def params():
        p = orig()
        p.use_extra_bufts = enabled
        return p

    lcc.llama_model_default_params = params


def bench_llama(path, threads, repeats, score_ids, gen_prompts, ref_lp, extra_bufts=True, kv_f32=False):
    import numpy as np
    import llama_cpp as lc
    from llama_cpp import Llama

    set_llama_extra_bufts(extra_bufts)
    out = {"file": os.path.basename(path), "extra_bufts": extra_bufts, "kv_cache": "f32" if kv_f32 else "f16 (default)"}
    kv = {"type_k": 0, "type_v": 0} if kv_f32 else {}  # GGML_TYPE_F32 = 0
    try:
        out["system_info"] = lc.llama_print_system_info().decode().strip()
    except Exception:  # noqa: BLE001
        pass
    if ref_lp is not None:
        ref_lp = np.asarray(ref_lp, dtype=np.float64)
    n512 = max(SCORE_LENGTHS)
    llm = Llama(model_path=path, n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True,
                n_threads=threads, n_threads_batch=threads, verbose=False, **kv)
    scoring = {}
    for n in SCORE_LENGTHS:
        ids = score_ids[:n]

        def run():
            llm.reset()
            llm.eval(ids)
            return llm.scores[:n]

        sec, secs = best(run, repeats)
        scoring[str(n)] = {"tokens_per_s": n / sec, "seconds": secs}
    out["scoring"] = scoring
    llm.reset()
    llm.eval(score_ids[:n512])
    lp = log_softmax_np(np.array(llm.scores[:n512]))
    mine = lp[np.arange(n512 - 1), score_ids[1:n512]]
    out["max_abs_logprob_gap_vs_transformers_f32"] = float(np.abs(mine - ref_lp).max()) if ref_lp is not None else None
    out["mean_abs_logprob_gap_vs_transformers_f32"] = float(np.abs(mine - ref_lp).mean()) if ref_lp is not None else None
    del llm

    # Generation through the low-level API: one context, n_seq_max = batch, greedy argmax.
    model_params = lc.llama_cpp.llama_model_default_params()
    model = lc.llama_model_load_from_file(path.encode(), model_params)
    if not model:
        raise RuntimeError("llama_model_load_from_file failed")
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    gen = {}
    try:
        for bsz in (1, BATCH):
            prompts = gen_prompts[:bsz]
            try:
                cp = lc.llama_context_default_params()
                cp.n_ctx = 4096
                cp.n_batch = 1024
                cp.n_ubatch = 512
                cp.n_seq_max = bsz
                cp.n_threads = threads
                cp.n_threads_batch = threads
                if kv_f32:
                    cp.type_k = 0
                    cp.type_v = 0
                ctx = lc.llama_init_from_model(model, cp)
                if not ctx:
                    raise RuntimeError("llama_init_from_model failed")
                total_prompt = sum(len(p) for p in prompts)
                batch = lc.llama_batch_init(max(total_prompt, bsz), 0, bsz)
                mem = lc.llama_get_memory(ctx) if hasattr(lc, "llama_get_memory") else None

                def fill(items):
                    # items: (token, pos, seq, want_logits)
                    for i, (tok, pos, seq, want) in enumerate(items):
                        batch.token[i] = tok
                        batch.pos[i] = pos
                        batch.n_seq_id[i] = 1
                        batch.seq_id[i][0] = seq
                        batch.logits[i] = want
                    batch.n_tokens = len(items)

                def argmax_at(i):
                    ptr = lc.llama_get_logits_ith(ctx, i)
                    arr = np.ctypeslib.as_array(ptr, shape=(n_vocab,))
                    return int(arr.argmax())

                def run():
                    if mem is not None:
                        lc.llama_memory_clear(mem, True)
                    else:
                        lc.llama_kv_self_clear(ctx)
                    items, last_index = [], []
                    for s, p in enumerate(prompts):
                        for j, tok in enumerate(p):
                            items.append((tok, j, s, j == len(p) - 1))
                        last_index.append(len(items) - 1)
                    fill(items)
                    if lc.llama_decode(ctx, batch) != 0:
                        raise RuntimeError("llama_decode failed (prefill)")
                    nxt = [argmax_at(i) for i in last_index]
                    pos = [len(p) for p in prompts]
                    produced = [[t] for t in nxt]
                    for _ in range(GEN_NEW - 1):
                        fill([(nxt[s], pos[s], s, True) for s in range(bsz)])
                        if lc.llama_decode(ctx, batch) != 0:
                            raise RuntimeError("llama_decode failed (decode)")
                        nxt = [argmax_at(s) for s in range(bsz)]
                        for s in range(bsz):
                            pos[s] += 1
                            produced[s].append(nxt[s])
                    return produced

                sec, secs = best(run, repeats)
                gen[f"batch{bsz}"] = {"tokens_per_s": bsz * GEN_NEW / sec, "seconds": secs,
                                      "method": f"llama_batch, one context, n_seq_max={bsz}, greedy argmax, prefill+decode timed"}
                lc.llama_batch_free(batch)
                lc.llama_free(ctx)
            except Exception as err:  # noqa: BLE001
                gen[f"batch{bsz}"] = {"error": f"{type(err).__name__}: {err}"}
    finally:
        lc.llama_model_free(model)
    out["generation"] = gen
    return out


def llama_worker(job_path, out_path):
    """Child-process entry: one llama.cpp bench, so that a crash in native code (e.g. AMX
    instructions a VM does not allow) fails soft in the parent."""
    with open(job_path) as f:
        job = json.load(f)
    try:
        res = bench_llama(job["path"], job["threads"], job["repeats"], job["score_ids"], job["gen_prompts"],
                          job["ref_lp"], job["extra_bufts"], job["kv_f32"])
    except Exception as err:  # noqa: BLE001
        res = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=3)}
    with open(out_path, "w") as f:
        json.dump(res, f)
    return 0


def run_llama_isolated(path, threads, repeats, score_ids, gen_prompts, ref_lp, extra_bufts, workdir, kv_f32=False):
    """Runs bench_llama in a child process; when the child dies on a signal with extra buffer types
    on, runs it once more with them off and says so."""
    import subprocess
    attempts = []
    for eb in ([True, False] if extra_bufts else [False]):
        job = os.path.join(workdir, "llama_job.json")
        out = os.path.join(workdir, "llama_out.json")
        with open(job, "w") as f:
            json.dump({"path": path, "threads": threads, "repeats": repeats, "score_ids": score_ids,
                       "gen_prompts": gen_prompts, "ref_lp": None if ref_lp is None else [float(x) for x in ref_lp],
                       "extra_bufts": eb, "kv_f32": kv_f32}, f)
        if os.path.exists(out):
            os.remove(out)
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--llama-worker", job, out],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0 and os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
            if attempts:
                res["earlier_attempts"] = attempts
            return res
        attempts.append({"extra_bufts": eb, "returncode": proc.returncode,
                         "stderr_tail": proc.stderr[-600:] if proc.stderr else ""})
        if proc.returncode >= 0:  # a Python-level failure: retrying without extra bufts will not help
            break
    return {"error": "llama.cpp worker failed" + (" (killed by a signal: native crash)" if attempts[-1]["returncode"] < 0 else ""),
            "attempts": attempts}


# ----------------------------------------------------------------------------------------------
# transformers
# ----------------------------------------------------------------------------------------------

def bench_transformers(model, repeats, score_ids, gen_prompts, pad_id):
    import torch
    out = {}
    scoring = {}
    for n in SCORE_LENGTHS:
        x = torch.tensor([score_ids[:n]], dtype=torch.long)

        def run():
            with torch.inference_mode():
                logits = model(input_ids=x, use_cache=False).logits
                lp = torch.log_softmax(logits.float(), dim=-1)
                return lp[0, :-1].gather(-1, x[0, 1:].unsqueeze(-1))

        sec, secs = best(run, repeats)
        scoring[str(n)] = {"tokens_per_s": n / sec, "seconds": secs}
    out["scoring"] = scoring
    gen = {}
    for bsz in (1, BATCH):
        prompts = gen_prompts[:bsz]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)

        def run():
            with torch.inference_mode():
                return model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=GEN_NEW,
                                      min_new_tokens=GEN_NEW, pad_token_id=pad_id)

        try:
            sec, secs = best(run, repeats)
            gen[f"batch{bsz}"] = {"tokens_per_s": bsz * GEN_NEW / sec, "seconds": secs,
                                  "method": "model.generate, greedy, left padding, KV cache"}
        except Exception as err:  # noqa: BLE001
            gen[f"batch{bsz}"] = {"error": f"{type(err).__name__}: {err}"}
    out["generation"] = gen
    return out


def transformers_logprobs(model, ids):
    import torch
    x = torch.tensor([ids], dtype=torch.long)
    with torch.inference_mode():
        logits = model(input_ids=x, use_cache=False).logits
        lp = torch.log_softmax(logits.double(), dim=-1)
        return lp[0, :-1].gather(-1, x[0, 1:].unsqueeze(-1)).squeeze(-1).numpy()


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="the GGUF to measure (required)")
    ap.add_argument("--f32-gguf", default=None, help="F32 GGUF of the same model; written to a temp dir when absent")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--skip", default="", help="comma list of: llama_q, llama_f32, hf_f32, hf_bf16")
    ap.add_argument("--llama-no-extra-bufts", action="store_true",
                    help="llama.cpp without its extra CPU buffer types (AMX, repacking); by default they are on, "
                         "and turned off for a retry only when the run crashes")
    ap.add_argument("--llama-worker", nargs=2, metavar=("JOB", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_worker:
        return llama_worker(*args.llama_worker)
    if not args.gguf:
        ap.error("--gguf is required")
    skip = set(filter(None, args.skip.split(",")))
    gguf_path = os.path.abspath(args.gguf)
    result = {
        "gguf": gguf_path, "threads": args.threads, "repeats": args.repeats, "cpu": cpu_name(),
        "versions": versions(),
        "definitions": {
            "scoring_tokens_per_s": "tokens / best wall time of one forward over the prompt with every position's logits "
                                    "(transformers: + log_softmax and gather)",
            "generation_tokens_per_s": f"batch x {GEN_NEW} new tokens / best wall time of prefill + greedy decode",
            "logprob_gap": "max |log p(ids[i+1] | ids[..=i]) - transformers f32| over the 512-token scoring input",
        },
    }
    t_start = time.perf_counter()

    # Token ids: from llama.cpp's vocab (the model's own tokenizer), else transformers'.
    score_ids = gen_prompts = None
    tok_source = None
    try:
        from llama_cpp import Llama
        vocab = Llama(model_path=gguf_path, vocab_only=True, verbose=False)

        def encode(text):
            return list(vocab.tokenize(text.encode(), add_bos=False, special=True))
        tok_source = "llama_cpp"
    except Exception:  # noqa: BLE001
        encode = None
    hf_tok = None
    try:
        from transformers import AutoTokenizer
        hf_tok = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))
        if encode is None:
            def encode(text):
                return list(hf_tok(text, add_special_tokens=False)["input_ids"])
            tok_source = "transformers"
    except Exception:  # noqa: BLE001
        pass
    if encode is None:
        result["error"] = "neither llama_cpp nor transformers could load the tokenizer"
        emit(result, args.json_out)
        return 3
    score_ids = encode(scoring_text())[: max(SCORE_LENGTHS)]
    gen_prompts = [encode(chatml([("user", q)])) for q in GEN_QUESTIONS[:BATCH]]
    result["inputs"] = {"tokenizer": tok_source, "scoring_tokens": len(score_ids),
                        "gen_prompt_tokens": [len(p) for p in gen_prompts], "gen_new_tokens": GEN_NEW, "batch": BATCH,
                        # The ids agentrl times too (`agentrl bench real-model` reads them).
                        "score_128": list(score_ids[:128]), "score_512": list(score_ids[:512]),
                        "generation_prompt": list(gen_prompts[0])}

    # Reference: transformers f32 log-probs over the 512-token input.
    ref_lp = None
    hf = {}
    try:
        import torch
        from transformers import AutoModelForCausalLM
        torch.set_num_threads(args.threads)
        result["torch_threads"] = torch.get_num_threads()
        gdir, gname = os.path.dirname(gguf_path), os.path.basename(gguf_path)
        f32_model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32).eval()
        ref_lp = transformers_logprobs(f32_model, score_ids)
        pad_id = hf_tok.pad_token_id if hf_tok is not None and hf_tok.pad_token_id is not None else 2
        if "hf_f32" not in skip:
            try:
                hf["f32"] = bench_transformers(f32_model, args.repeats, score_ids, gen_prompts, pad_id)
                hf["f32"]["attn_implementation"] = getattr(f32_model.config, "_attn_implementation", None)
            except Exception as err:  # noqa: BLE001
                hf["f32"] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=3)}
        del f32_model
        if "hf_bf16" not in skip:
            try:
                bf_model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.bfloat16).eval()
                lp = transformers_logprobs(bf_model, score_ids)
                hf["bf16"] = bench_transformers(bf_model, args.repeats, score_ids, gen_prompts, pad_id)
                hf["bf16"]["max_abs_logprob_gap_vs_transformers_f32"] = float(abs(lp - ref_lp).max())
                hf["bf16"]["mean_abs_logprob_gap_vs_transformers_f32"] = float(abs(lp - ref_lp).mean())
                del bf_model
            except Exception as err:  # noqa: BLE001
                hf["bf16"] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=3)}
    except Exception as err:  # noqa: BLE001
        hf = {"error": f"{type(err).__name__}: {err}"}
    result["transformers"] = hf

    lcpp = {}
    workdir = tempfile.mkdtemp(prefix="agentrl-bench-real-")
    try:
        import llama_cpp  # noqa: F401
        eb = not args.llama_no_extra_bufts
        if "llama_q" not in skip:
            lcpp["quantized"] = run_llama_isolated(gguf_path, args.threads, args.repeats, score_ids, gen_prompts,
                                                   ref_lp, eb, workdir)
        if "llama_f32" not in skip:
            try:
                f32_path = args.f32_gguf
                if f32_path is None:
                    f32_path = os.path.join(workdir, "model.F32.gguf")
                    t0 = time.perf_counter()
                    write_f32_gguf(gguf_path, f32_path)
                    lcpp["f32_gguf_written_s"] = time.perf_counter() - t0
                lcpp["f32"] = run_llama_isolated(os.path.abspath(f32_path), args.threads, args.repeats, score_ids,
                                                 gen_prompts, ref_lp, eb, workdir, kv_f32=True)
            except Exception as err:  # noqa: BLE001
                lcpp["f32"] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=3)}
    except Exception as err:  # noqa: BLE001
        lcpp = {"error": f"llama_cpp unavailable: {type(err).__name__}: {err}"}
    finally:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    result["llama_cpp"] = lcpp
    result.update(flat_sections(result))
    if ref_lp is not None and isinstance(result.get("transformers_f32"), dict):
        # transformers f32 log-probs of the 512-token input, for agentrl's gap.
        result["transformers_f32"]["logprobs_512"] = [float(x) for x in ref_lp]
    result["wall_s"] = time.perf_counter() - t_start
    emit(result, args.json_out)
    return 0


def flat_sections(result):
    """The summary `agentrl bench real-model` reads: one flat object per backend (llama_cpp_q4_1,
    llama_cpp_f32, transformers_f32, transformers_bf16) with scoring_{128,512}_tokens_per_s,
    generation_batch{1,16}_tokens_per_s and max_abs_logprob_gap (vs transformers f32), or
    {"error": ...}. The nested sections keep the details (per-repeat seconds, methods)."""
    def section(d, gap):
        if not isinstance(d, dict):
            return {"error": "not run"}
        if "error" in d:
            return {"error": d["error"]}
        out = {}
        for n in SCORE_LENGTHS:
            v = d.get("scoring", {}).get(str(n), {}).get("tokens_per_s")
            if v is not None:
                out[f"scoring_{n}_tokens_per_s"] = v
        for b in (1, BATCH):
            g = d.get("generation", {}).get(f"batch{b}", {})
            if "tokens_per_s" in g:
                out[f"generation_batch{b}_tokens_per_s"] = g["tokens_per_s"]
            elif "error" in g:
                out[f"generation_batch{b}_error"] = g["error"]
        out["max_abs_logprob_gap"] = gap(d)
        return out

    lcpp, hf = result.get("llama_cpp", {}), result.get("transformers", {})
    gap = lambda d: d.get("max_abs_logprob_gap_vs_transformers_f32")  # noqa: E731
    flat = {}
    for name, parent, key, g in (("llama_cpp_q4_1", lcpp, "quantized", gap), ("llama_cpp_f32", lcpp, "f32", gap),
                                 ("transformers_f32", hf, "f32", lambda d: 0.0),
                                 ("transformers_bf16", hf, "bf16", gap)):
        if not isinstance(parent, dict):
            flat[name] = {"error": "not run"}
        elif "error" in parent and key not in parent:
            flat[name] = {"error": parent["error"]}
        else:
            flat[name] = section(parent.get(key), g)
    return flat


def emit(result, path):
    text = json.dumps(result)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
