"""tests/hf/export_torch.py — an exported Hugging Face folder read back by PyTorch, with nothing
from bora but the folder: its own safetensors reader (F32, BF16 as int16 viewed as bfloat16,
F16; one file or the shards its index names) and the float64 references of
tests/models (gpt2_torch.py, llama_torch.py) configured from the folder's config.json alone.

Checks, against the checkpoint it came from and what bora computed from it:
- the f32 folder's tensors are the checkpoint's (model.safetensors) bit for bit, and every
  tensor of the model is there once (the tied head nowhere);
- greedy decoding by the reference from the f32 folder gives the token ids `bora generate
  --temperature 0 --ids` gave from the checkpoint (prompt and continuation within one context);
- each reduced folder (bf16, f16) holds exactly the round-to-nearest-even of the f32 values
  (PyTorch's own conversion), and its logits over the same ids are within 2% of the largest f32
  logit's magnitude of the f32 folder's (a bf16 weight carries 8 significant bits).

usage: /usr/bin/python3 export_torch.py CHECKPOINT_DIR F32_DIR PROMPT_LEN EOS_ID IDS...
           [--reduced DIR ...]"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))

try:
    import numpy as np
    import torch
except ImportError as e:  # the test harness turns 77 into "skipped"
    print(f"skipped: {e} (install python3-torch and python3-numpy)")
    sys.exit(77)

import gpt2_torch  # noqa: E402
import llama_torch  # noqa: E402

NUMPY = {"F32": np.float32, "F16": np.float16, "BF16": np.int16, "F64": np.float64,
         "I32": np.int32, "I64": np.int64}


def read_file(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=NUMPY[info["dtype"]]).reshape(info["shape"])
        t = torch.from_numpy(arr.copy())
        out[name] = t.view(torch.bfloat16) if info["dtype"] == "BF16" else t
    return out


def read_folder(d):
    """Every tensor of an exported folder, whether one file or shards with an index."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_file(os.path.join(d, "model.safetensors"))
    with open(index) as f:
        idx = json.load(f)
    out = {}
    for shard in sorted(set(idx["weight_map"].values())):
        for name, t in read_file(os.path.join(d, shard)).items():
            if name in out or idx["weight_map"].get(name) != shard:
                raise AssertionError(f"{d}: tensor {name} in {shard}, the index says "
                                     f"{idx['weight_map'].get(name)}")
            out[name] = t
    if set(out) != set(idx["weight_map"]):
        raise AssertionError(f"{d}: the index and the shards name different tensors")
    return out


def logits_fn(d):
    """The reference model of a folder: config.json picks it and configures it."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    p = {k: v.double() for k, v in read_folder(d).items()}
    if cfg["model_type"] == "gpt2":
        if cfg.get("activation_function") != "gelu_new":
            raise AssertionError(f"{d}: the reference models gelu_new only")
        return lambda ids: gpt2_torch.gpt2(p, cfg, ids)
    c = llama_torch.load_config(cfg, f"{d}/config.json")
    llama_torch.check_params(p, c, f"{d}/model.safetensors")
    return lambda ids: llama_torch.forward(p, c, ids)


def main(ckpt, f32_dir, prompt_len, eos, bora_ids, reduced):
    ok = True
    ours, theirs = read_file(os.path.join(ckpt, "model.safetensors")), read_folder(f32_dir)
    if set(ours) != set(theirs):
        print(f"FAIL: tensors differ: checkpoint only {sorted(set(ours) - set(theirs))}, "
              f"export only {sorted(set(theirs) - set(ours))}")
        return 1
    same = all(torch.equal(ours[k], theirs[k]) for k in ours)
    print(f"f32: {len(ours)} tensors, {'bit for bit the checkpoint' if same else 'DIFFERENT'}")
    ok &= same
    with open(os.path.join(f32_dir, "config.json")) as f:
        cfg = json.load(f)
    for key in ("torch_dtype", "architectures", "bos_token_id", "eos_token_id"):
        if key not in cfg:
            print(f"FAIL: config.json has no {key}")
            ok = False
    model = logits_fn(f32_dir)
    ids = list(bora_ids[:prompt_len])
    with torch.no_grad():
        while len(ids) < len(bora_ids) + 1:
            logits = model(torch.tensor([ids]))[0, -1]
            nxt = int(torch.argmax(logits))
            top2 = torch.topk(logits, 2).values
            if top2[0] - top2[1] < 1e-4:
                print(f"note: a near tie at token {len(ids)} ({(top2[0] - top2[1]).item():.2g})")
            if nxt == eos or len(ids) == len(bora_ids):
                break
            ids.append(nxt)
    greedy_same = ids == list(bora_ids)
    print(f"greedy from the folder: {len(ids) - prompt_len} tokens, "
          f"{'the ids bora generate gave' if greedy_same else 'DIFFERENT ids'}")
    if not greedy_same:
        print(f"torch {ids}\nbora  {list(bora_ids)}")
    ok &= greedy_same
    with torch.no_grad():
        full = model(torch.tensor([list(bora_ids)]))
    for d in reduced:
        with open(os.path.join(d, "config.json")) as f:
            dtype = json.load(f)["torch_dtype"]
        want = getattr(torch, dtype)
        got = read_folder(d)
        rounded = all(got[k].dtype == want and torch.equal(got[k], theirs[k].to(want)) for k in theirs)
        with torch.no_grad():
            other = logits_fn(d)(torch.tensor([list(bora_ids)]))
        rel = ((other - full).abs().max() / full.abs().max()).item()
        print(f"{dtype}: {'each value the f32 value rounded to nearest even' if rounded else 'NOT the rounded values'}; "
              f"logits within {rel:.3g} of the largest f32 logit")
        ok &= rounded and rel < 0.02
    print("export_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    red = []
    while "--reduced" in a:
        i = a.index("--reduced")
        red.append(a[i + 1])
        del a[i:i + 2]
    sys.exit(main(a[0], a[1], int(a[2]), int(a[3]), [int(x) for x in a[4:]], red))
