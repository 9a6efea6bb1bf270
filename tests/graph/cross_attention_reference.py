"""tests/graph/cross_attention_reference.py — an independent float64 reference for bora's
attention with T queries over S keys, T != S (cross-attention).

Reads `test_cross_attention PLUGIN_DIR --dump` (per case: the shape, the masks, q, k, v, the
upstream gradient u, and what the C computed: the output and the gradients of sum(out * u) to
q, k and v) and recomputes them in PyTorch float64 with the softmax written out:
scores = scale * q k^T (scale 1/sqrt(E)), key s hidden from query t where s >= L (the key
length, else S), and under causal masking where s > p(t), with the sliding window where
s <= p(t) - W, p(t) = L - T + t (the queries are the last T positions of the L keys); grouped kv
heads repeated as transformers' repeat_kv does (query head h reads kv head h // (H / H_kv)); a
row that sees no key gives 0. Gradients by autograd.

Tolerances against each element's scale (the same computation with |q|, |k|, |v|, |u| and the
probabilities kept, which bounds the rounding of any summation order): f64 1e-12; f32 1e-5;
with bf16 products (trainer.mp c=bf16: q, k, v, the probabilities and the gradients rounded to
bf16 for the products, accumulated in f32) 2e-2.
usage: cross_attention_reference.py DUMP
"""
import math
import sys

try:
    import torch
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)

TOL = {"f64": 1e-12, "f32": 1e-5, "bf16": 2e-2}


def parse(path):
    cases, cur = [], None
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "case":
            cur = {"name": parts[1], "kind": parts[2], "path": parts[3]}
            it = iter(parts[4:])
            for k in it:
                cur[k] = int(next(it))
            cases.append(cur)
        else:
            cur[parts[0]] = torch.tensor([float(v) for v in parts[1:]], dtype=torch.float64)
    return cases


def attend(c, q, k, v, absolute=False):
    B, H, Hkv, T, S, E = c["B"], c["H"], c["Hkv"], c["T"], c["S"], c["E"]
    L = c["key_length"] or S
    kk = k.repeat_interleave(H // Hkv, dim=1)
    vv = v.repeat_interleave(H // Hkv, dim=1)
    scores = (q @ kk.transpose(-1, -2)) / math.sqrt(E)
    t = torch.arange(T).reshape(T, 1)
    s = torch.arange(S).reshape(1, S)
    p = L - T + t
    allowed = s < L
    if c["causal"]:
        allowed = allowed & (s <= p)
    if c["window"]:
        allowed = allowed & (s > p - c["window"])
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # a row that sees no key
    if absolute:
        probs = probs.detach()
        return probs @ vv.abs()
    return probs @ vv


def main():
    cases = parse(sys.argv[1])
    if not cases:
        print("no cases in the dump")
        return 1
    failures = 0
    for c in cases:
        B, H, Hkv, T, S, E = c["B"], c["H"], c["Hkv"], c["T"], c["S"], c["E"]
        q = c["q"].reshape(B, H, T, E).clone().requires_grad_(True)
        k = c["k"].reshape(B, Hkv, S, E).clone().requires_grad_(True)
        v = c["v"].reshape(B, Hkv, S, E).clone().requires_grad_(True)
        u = c["u"].reshape(B, H, T, E)
        out = attend(c, q, k, v)
        (out * u).sum().backward()
        want = [out.detach().reshape(-1), q.grad.reshape(-1), k.grad.reshape(-1), v.grad.reshape(-1)]
        # scales: every term's magnitude (|out| sums of |p v|; gradients of the same with |u|)
        qa = c["q"].reshape(B, H, T, E).abs().clone().requires_grad_(True)
        ka = c["k"].reshape(B, Hkv, S, E).abs().clone().requires_grad_(True)
        va = c["v"].reshape(B, Hkv, S, E).abs().clone().requires_grad_(True)
        oa = attend(c, qa, ka, va, absolute=True)
        (oa * u.abs()).sum().backward()
        # dq and dk scale with |dS| · |k| (|q|): bound by the output scale times the key norms
        kn = c["k"].abs().max().item() + 1e-300
        qn = c["q"].abs().max().item() + 1e-300
        gscale = (u.abs() * oa).sum(-1).max().item() + u.abs().max().item() * va.abs().max().item()
        scales = [oa.reshape(-1), torch.full_like(want[1], gscale * kn * E),
                  torch.full_like(want[2], gscale * qn * E), va.grad.reshape(-1).abs() + gscale]
        tol = TOL[c["kind"]]
        for what, ref, sc in zip(("out", "dq", "dk", "dv"), want, scales):
            got = c[what]
            err = (got - ref).abs()
            bad = err > tol * sc + 1e-300
            if bool(bad.any()):
                i = int(bad.nonzero()[0][0])
                print(f"{c['name']} {c['kind']} {c['path']}: {what}[{i}] = {got[i].item():.17g}, "
                      f"want {ref[i].item():.17g} (scale {sc[i].item():.3g})")
                failures += 1
    print(f"cross_attention_reference: {len(cases)} cases (T > S and T < S, f64/f32/bf16 "
          f"products, kernels and decomposition), {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
