"""tests/hf/hf_torch.py — Hugging Face folders as transformers writes them, made with PyTorch
alone, and the validation loss of such a folder by the float64 references
(tests/models/gpt2_torch.py, tests/models/llama_torch.py) to compare with `bora eval --hf`.

write: config.json (with the keys transformers writes: architectures, torch_dtype, dropouts...),
the weights in bf16 as NAME-0000i-of-0000n.safetensors shards with model.safetensors.index.json
(or one model.safetensors with --shards 1), and the tokenizer given as tokenizer.json.
eval: the loss of the folder's own weights over the windows bora's loader makes of a JSON-lines
file with the bytes tokenizer (each document's bytes, then the end-of-text id; window w is
tokens [wT, (w+1)T), attention inside a document, nothing predicted after an end-of-text),
compared with `bora eval --json` output (relative 1e-5).

usage: /usr/bin/python3 hf_torch.py write gpt2|gpt2-base|llama|qwen3 DIR TOKENIZER [--shards N] [--f16]
       /usr/bin/python3 hf_torch.py write-tests DIR TOKENIZER
                        DIR/gpt2 and DIR/llama in three bf16 shards, DIR/qwen3 as one f16 file
       /usr/bin/python3 hf_torch.py eval DIR VALIDATION.jsonl SEQ_LEN BORA_JSON [DIR ...]"""
import os
import json
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

import gpt2_torch
import llama_torch

META = {"torch_dtype": "bfloat16", "transformers_version": "4.46.0", "use_cache": True,
        "bos_token_id": 256, "eos_token_id": 256}
CONFIGS = {
    "gpt2": dict(META, architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=257,
                 n_positions=32, n_ctx=32, n_embd=32, n_layer=2, n_head=4, n_inner=None,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5,
                 initializer_range=0.02, attn_pdrop=0.1, embd_pdrop=0.1, resid_pdrop=0.1,
                 summary_first_dropout=0.1, summary_type="cls_index", summary_use_proj=True,
                 summary_activation=None, summary_proj_to_labels=True,
                 scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
                 reorder_and_upcast_attn=False),
    "llama": dict(META, architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=257,
                  hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                  max_position_embeddings=64, initializer_range=0.02, rms_norm_eps=1e-5,
                  pretraining_tp=1, tie_word_embeddings=False, rope_theta=10000.0,
                  rope_scaling=None, attention_bias=False, attention_dropout=0.0,
                  mlp_bias=False, head_dim=8),
    "qwen3": dict(META, architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=257,
                  hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
                  max_position_embeddings=64, initializer_range=0.02, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, rope_theta=1e6, rope_scaling=None,
                  attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
                  sliding_window=None, max_window_layers=2),
}


def gpt2_shapes(c):
    E, V, P, F = c["n_embd"], c["vocab_size"], c["n_positions"], 4 * c["n_embd"]
    s = {"transformer.wte.weight": (V, E), "transformer.wpe.weight": (P, E)}
    for l in range(c["n_layer"]):
        pre = f"transformer.h.{l}."
        s.update({pre + "ln_1.weight": (E,), pre + "ln_1.bias": (E,),
                  pre + "attn.c_attn.weight": (E, 3 * E), pre + "attn.c_attn.bias": (3 * E,),
                  pre + "attn.c_proj.weight": (E, E), pre + "attn.c_proj.bias": (E,),
                  pre + "ln_2.weight": (E,), pre + "ln_2.bias": (E,),
                  pre + "mlp.c_fc.weight": (E, F), pre + "mlp.c_fc.bias": (F,),
                  pre + "mlp.c_proj.weight": (F, E), pre + "mlp.c_proj.bias": (E,)})
    s.update({"transformer.ln_f.weight": (E,), "transformer.ln_f.bias": (E,)})
    return s


def shapes(cfg):
    if cfg["model_type"] == "gpt2":
        return gpt2_shapes(cfg)
    return llama_torch.param_shapes(llama_torch.load_config(dict(cfg)))


def write_shard(path, tensors, dtype):
    """safetensors as transformers saves it: 8-byte length, JSON header, raw data."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.to(dtype).view(torch.int16).numpy().tobytes()
        header[name] = dict(dtype="BF16" if dtype == torch.bfloat16 else "F16",
                            shape=list(t.shape), data_offsets=[at, at + len(b)])
        blobs.append(b)
        at += len(b)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def write(kind, d, tokenizer, shards, dtype):
    """kind gpt2-base: gpt2's weights as openai-community/gpt2 holds them, saved from GPT2Model
    (no "transformer." prefix, the attention's causal-mask buffers h.N.attn.bias included)."""
    base = kind == "gpt2-base"
    kind = "gpt2" if base else kind
    cfg = CONFIGS[kind]
    gen = torch.Generator().manual_seed(7)
    params = {}
    for name, shape in shapes(cfg).items():
        if name.endswith("norm.weight") or ".ln_" in name:
            params[name] = 1 + 0.1 * torch.randn(shape, generator=gen)
        else:
            params[name] = 0.2 * torch.randn(shape, generator=gen)
    if base:
        params = {n.removeprefix("transformer."): t for n, t in params.items()}
        T = cfg["n_positions"]
        for l in range(cfg["n_layer"]):
            params[f"h.{l}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    with open(f"{d}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    with open(tokenizer) as src, open(f"{d}/tokenizer.json", "w") as dst:
        dst.write(src.read())
    names = list(params)
    if shards == 1:
        write_shard(f"{d}/model.safetensors", params, dtype)
        return 0
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: params[n] for n in names[i * per:(i + 1) * per]}
        write_shard(f"{d}/{file}", part, dtype)
        weight_map.update({n: file for n in part})
        total += sum(t.numel() * 2 for t in part.values())
    with open(f"{d}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return 0


def read_folder(d):
    try:
        files = sorted(set(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    p = {}
    for file in files:
        with open(f"{d}/{file}", "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        for name, h in header.items():
            if name == "__metadata__":
                continue
            a, b = h["data_offsets"]
            raw = torch.frombuffer(bytearray(blob[8 + n + a:8 + n + b]), dtype=torch.int16)
            t = raw.view(torch.bfloat16 if h["dtype"] == "BF16" else torch.float16)
            p[name] = t.reshape(h["shape"]).double()
    return p


def evaluate(d, val, T, bora_json):
    cfg = json.load(open(f"{d}/config.json"))
    p, eos = read_folder(d), 256
    stream = []
    for line in open(val, encoding="utf-8"):
        if line.strip():
            stream += list(json.loads(line)["text"].encode("utf-8")) + [eos]
    windows = (len(stream) - 1) // T
    ids = torch.tensor([stream[w * T:(w + 1) * T] for w in range(windows)], dtype=torch.long)
    nxt = torch.tensor([stream[w * T + 1:(w + 1) * T + 1] for w in range(windows)],
                       dtype=torch.long)
    ends = ids == eos
    seg = torch.cumsum(ends.long(), dim=1) - ends.long()
    with torch.no_grad():
        if cfg["model_type"] == "gpt2":
            logits = gpt2_torch.gpt2(p, cfg, ids, seg)
        else:
            logits = llama_torch.forward(p, llama_torch.load_config(dict(cfg)), ids, seg)
    ce = -torch.log_softmax(logits, dim=-1).gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
    keep = ~ends
    loss = float(ce[keep].sum()) / int(keep.sum())
    ours = json.loads(open(bora_json).read())["eval/loss"]
    rel = abs(loss - ours) / loss
    print(f"hf_torch eval: torch {loss:.8f}, bora {ours:.8f}, relative {rel:.3g} "
          f"({windows} windows)")
    return 0 if rel < 1e-5 else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) >= 4 and a[0] == "write":
        shards = int(a[a.index("--shards") + 1]) if "--shards" in a else 3
        sys.exit(write(a[1], a[2], a[3], shards, torch.float16 if "--f16" in a else torch.bfloat16))
    if len(a) == 3 and a[0] == "write-tests":
        for kind in ("gpt2", "llama", "qwen3"):
            os.makedirs(f"{a[1]}/{kind}")
            q = kind == "qwen3"
            write(kind, f"{a[1]}/{kind}", a[2], 1 if q else 3, torch.float16 if q else torch.bfloat16)
        sys.exit(0)
    if len(a) >= 5 and (len(a) - 1) % 4 == 0 and a[0] == "eval":
        sys.exit(max(evaluate(a[i], a[i + 1], int(a[i + 2]), a[i + 3]) for i in range(1, len(a), 4)))
    print("usage: " + __doc__.split("usage: ")[1])
    sys.exit(2)
