"""tests/models/gpt2_torch.py — an independent GPT-2, written with PyTorch the way Hugging Face's
GPT2LMHeadModel computes it, run in float64 on the weights bora wrote (model.safetensors) and
compared with bora's logits, loss and every parameter's gradient (outputs.safetensors).

Tolerances (bora computes in float32): logits 2e-4 absolute; the summed loss 1e-5 relative;
each gradient tensor's largest difference within 2e-3 of its largest magnitude.

With --hvp, also bora's Hessian-vector products (DIR/hvp.safetensors: tangent.NAME v and hvp.NAME
H·v of the summed loss) against PyTorch's double backward, torch.autograd.grad of the gradients
(made with create_graph=True) along v: each tensor's largest difference within 1e-4 of its
largest magnitude.

usage: /usr/bin/python3 gpt2_torch.py DIR [--hvp]"""
import json
import math
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the test harness turns 77 into "skipped"
    print(f"skipped: {e} (install python3-torch and python3-numpy)")
    sys.exit(77)

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    """A reader of our own: 8-byte length, JSON header, raw little-endian data."""
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
        arr = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2(p, cfg, ids, segments=None):
    E, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    hd, eps = E // H, cfg["layer_norm_epsilon"]
    Bn, T = ids.shape
    ln = lambda x, pre: torch.nn.functional.layer_norm(x, (E,), p[pre + ".weight"], p[pre + ".bias"], eps)
    conv1d = lambda x, pre: torch.addmm(p[pre + ".bias"], x.reshape(-1, x.shape[-1]),
                                        p[pre + ".weight"]).reshape(*x.shape[:-1], -1)
    x = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    if segments is not None:  # attention stays inside a document
        mask = mask & (segments[:, None, :, None] == segments[:, None, None, :])
    for l in range(L):
        pre = f"transformer.h.{l}"
        q, k, v = conv1d(ln(x, pre + ".ln_1"), pre + ".attn.c_attn").split(E, dim=2)
        heads = lambda t: t.view(Bn, T, H, hd).permute(0, 2, 1, 3)
        q, k, v = heads(q), heads(k), heads(v)
        w = q @ k.transpose(-1, -2) / math.sqrt(hd)
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        a = torch.softmax(w, dim=-1) @ v
        a = a.permute(0, 2, 1, 3).reshape(Bn, T, E)
        x = x + conv1d(a, pre + ".attn.c_proj")
        h = gelu_new(conv1d(ln(x, pre + ".ln_2"), pre + ".mlp.c_fc"))
        x = x + conv1d(h, pre + ".mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    return x @ p["transformer.wte.weight"].T  # the tied head


def check_hvp(d, params, loss):
    """bora's H·v against the double backward of loss along the dumped tangents."""
    hv = read_safetensors(f"{d}/hvp.safetensors")
    names = list(params)
    grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=True)
    tangents = [hv["tangent." + k].double() for k in names]
    want = torch.autograd.grad(grads, [params[k] for k in names], grad_outputs=tangents)
    ok, worst = True, 0.0
    for k, w in zip(names, want):
        mine = hv["hvp." + k].double()
        scale = max(w.abs().max().item(), 1e-12)
        diff = (w - mine).abs().max().item() / scale
        worst = max(worst, diff)
        if diff > 1e-4:
            print(f"H·v of {k}: largest difference {diff:.3g} of its scale {scale:.3g}")
            ok = False
    print(f"Hessian-vector products: {len(names)} tensors, worst relative difference {worst:.3g}")
    return ok


def main(d, hvp=False):
    cfg = json.load(open(f"{d}/config.json"))
    params = {k: v.double().requires_grad_(True) for k, v in read_safetensors(f"{d}/model.safetensors").items()}
    inputs = read_safetensors(f"{d}/inputs.safetensors")
    ours = read_safetensors(f"{d}/outputs.safetensors")
    ids, targets = inputs["input_ids"].long(), inputs["targets"].long()
    logits = gpt2(params, cfg, ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    loss.backward(retain_graph=hvp)
    ok = check_hvp(d, params, loss) if hvp else True
    dl = (logits.detach() - ours["logits"].double()).abs().max().item()
    print(f"logits: largest difference {dl:.3g}")
    ok &= dl < 2e-4
    rel = abs(loss.item() - ours["loss_sum"].item()) / abs(loss.item())
    print(f"loss: torch {loss.item():.8f}, bora {ours['loss_sum'].item():.8f}, relative {rel:.3g}")
    ok &= rel < 1e-5
    worst = 0.0
    for name, t in params.items():
        g, mine = t.grad, ours["grad." + name].double()
        scale = max(g.abs().max().item(), 1e-12)
        diff = (g - mine).abs().max().item() / scale
        worst = max(worst, diff)
        if diff > 2e-3:
            print(f"gradient of {name}: largest difference {diff:.3g} of its scale")
            ok = False
    print(f"gradients: {len(params)} tensors, worst relative difference {worst:.3g}")
    print("gpt2_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--hvp" in sys.argv[2:]))
