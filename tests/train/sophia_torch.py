#!/usr/bin/python3
"""Sophia-H and Sophia-G against float64 PyTorch: tests/train/sophia_dump.c runs four steps of a
small GPT-2 under each (an estimate at steps 1 and 3, update_interval 2) and dumps the parameters
after each step, the estimate's blocks and the logged metrics; here Sophia is written from the
paper (Liu et al. 2023, Algorithm 3, with Levanter's bias-corrected m̂), on GPT-2 written as
Hugging Face computes it (tests/models/gpt2_torch.py), in float64 from the same initial
parameters and rows:

  m <- β1 m + (1 - β1) g;  on estimate steps h <- β2 h + (1 - β2) ĥ;
  θ <- θ - lr wd θ (the documented mask: not on norms, biases or embeddings);
  θ <- θ - lr clip(m̂ / max(γ h, ε), -ρ, ρ),  m̂ = m / (1 - β1^t).

ĥ is made here, independently of bora's code:
  sophia_h: z ⊙ (H z), H z by torch.autograd double backward of the mean loss over the estimate's
            rows, z regenerated from the documented keying (core/train/hessian.c: Philox4x32-10
            keyed by FNV-1a of the parameter's name xor (seed + "Hutchi") · 0x9E3779B97F4A7C15,
            counter (element, step), Box-Muller over two 53-bit uniforms, rounded to f32);
  sophia_g: B ĝ ⊙ ĝ, ĝ the gradient of the mean loss at labels drawn from this model's own f64
            softmax by tests/graph/sample_reference.py's Philox and inverse CDF (seed, stream
            G_STREAM_LABELS, step, the row's index among the step's cells), the ignored targets
            (-100) left ignored, B their count.

Checks and tolerances (bora computes in f32):
  z: bora's tangent block equals the regenerated z exactly (f32);
  the estimate's block (H z, or ĝ): each tensor within 2e-4 of its largest magnitude;
  parameters after every step: |bora - ref| <= 2e-4 · lr (the step's) + 2e-6 |ref|, an update
            moving each coordinate by up to lr · (ρ + wd |θ|) (ε is set so that a ratio's
            denominator is not f32 noise);
  metrics: optim/hessian_norm and optim/hessian_estimate_norm within 1e-4 relative,
            optim/unclipped_fraction within one coordinate in 200 (a ratio at ±ρ may fall either
            side in f32), and at least one coordinate clipped and one not;
  micro-batching: h_micro's estimate (2 micro-batches of 4 rows) equals h's (1 of 8) within 1e-5
            of each tensor's largest magnitude, g_micro's equals g's; g_first
            (hessian_micro_batches: 1) matches a reference that reads the first 4 rows only.

usage: sophia_torch.py SOPHIA_DUMP PLUGIN_DIR WORK_DIR
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "graph"))
import gpt2_torch  # noqa: E402  (exits 77 without torch or numpy)
import sample_reference as sr  # noqa: E402
import torch  # noqa: E402

torch.set_default_dtype(torch.float64)
dump, plugin_dir, work = sys.argv[1:4]
MASK64 = (1 << 64) - 1
Z_STREAM = 0x487574636869  # "Hutchi"
G_STREAM_LABELS = 0x4C41424C  # "LABL"
CASES = {  # as sophia_dump.c's table: kind, γ, ε, micro-batch rows, estimate micro-batches
    "h": ("h", 2.0, 5e-3, 8, 0), "h_micro": ("h", 2.0, 5e-3, 4, 0),
    "g": ("g", 4.0, 1e-3, 8, 0), "g_micro": ("g", 4.0, 1e-3, 4, 0),
    "g_first": ("g", 4.0, 1e-3, 4, 1)}
LR, BETA1, BETA2, RHO, WD, INTERVAL = 2e-2, 0.9, 0.9, 0.5, 0.3, 2
PARAM_TOL = 2e-4  # of the step's learning rate
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def hutchinson_z(seed, name, shape, step):
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & MASK64
    h ^= ((seed + Z_STREAM) * 0x9E3779B97F4A7C15) & MASK64
    key = (h & 0xFFFFFFFF, h >> 32)
    n = math.prod(shape)
    out = torch.empty(n, dtype=torch.float32)
    for i in range(n):
        w = sr.philox4x32((i & 0xFFFFFFFF, i >> 32, step & 0xFFFFFFFF, step >> 32), key)
        u1 = (((w[0] >> 5) << 26) | (w[1] >> 6)) / float(1 << 53)
        u2 = (((w[2] >> 5) << 26) | (w[3] >> 6)) / float(1 << 53)
        out[i] = math.sqrt(-2.0 * math.log1p(-u1)) * math.cos(2.0 * math.pi * u2)
    return out.reshape(shape).double()


def decayed(name, p):
    """The documented mask: decay on the matrices other than the embeddings."""
    return p.dim() >= 2 and not name.startswith(("transformer.wte", "transformer.wpe"))


def loss_of(params, cfg, ids, targets):
    """The summed cross-entropy over the targets that are not -100, and their count."""
    logits = gpt2_torch.gpt2(params, cfg, ids)
    keep = targets != -100
    lsm = torch.log_softmax(logits, dim=-1)
    picked = lsm.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum(), int(keep.sum()), logits


def estimate(kind, params, cfg, ids, targets, seed, step, names):
    """ĥ per parameter, and the block bora keeps beside it (H z, or ĝ)."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    total, count, logits = loss_of(leaves, cfg, ids, targets)
    if kind == "h":
        z = {k: hutchinson_z(seed, k, tuple(params[k].shape), step) for k in names}
        grads = torch.autograd.grad(total / count, [leaves[k] for k in names], create_graph=True)
        dot = sum((g * z[k]).sum() for g, k in zip(grads, names))
        hz = torch.autograd.grad(dot, [leaves[k] for k in names])
        return {k: z[k] * hz[i] for i, k in enumerate(names)}, dict(zip(names, hz)), z
    flat = logits.detach().reshape(-1, logits.shape[-1])
    labels = torch.tensor([sr.token(flat[r].tolist(), sr.uniform(seed, r, G_STREAM_LABELS, step))
                           for r in range(flat.shape[0])]).reshape(targets.shape)
    labels = torch.where((targets == -100) | (labels < 0), torch.full_like(labels, -100), labels)
    sampled, _, _ = loss_of(leaves, cfg, ids, labels)
    ghat = torch.autograd.grad(sampled / count, [leaves[k] for k in names])
    return {k: count * ghat[i] * ghat[i] for i, k in enumerate(names)}, dict(zip(names, ghat)), None


def close(got, want, tol, what):
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    if err > tol * max(scale, 1e-30):
        fail(f"{what}: off by {err:.3g}, {err / max(scale, 1e-30):.3g} of its largest "
             f"magnitude {scale:.3g} (tolerance {tol})")
    return err / max(scale, 1e-30)


def run_case(case):
    out = os.path.join(work, case)
    os.makedirs(out, exist_ok=True)
    r = subprocess.run([dump, plugin_dir, case, out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"{case}: sophia_dump failed:\n{r.stdout}")
    return out


def check(case):
    kind, gamma, eps, micro, est_micro = CASES[case]
    out = run_case(case)
    run = json.load(open(os.path.join(out, "run.json")))
    cfg = json.load(open(os.path.join(out, "config.json")))
    init = gpt2_torch.read_safetensors(os.path.join(out, "model.safetensors"))
    names = list(init)
    params = {k: v.double() for k, v in init.items()}
    inputs = gpt2_torch.read_safetensors(os.path.join(out, "inputs.safetensors"))
    ids_all, targets_all = inputs["input_ids"].long(), inputs["targets"].long()
    seed = run["seed"]
    m = {k: torch.zeros_like(v) for k, v in params.items()}
    h = {k: torch.zeros_like(v) for k, v in params.items()}
    worst = {"params": 0.0, "estimate": 0.0}
    fractions = []
    blocks = {}
    for t, step in enumerate(run["steps"], 1):
        lr = LR * step["lr_factor"]
        ids, targets = ids_all[t - 1], targets_all[t - 1]
        dumped = gpt2_torch.read_safetensors(os.path.join(out, f"step-{t}.safetensors"))
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        total, count, _ = loss_of(leaves, cfg, ids, targets)
        grads = dict(zip(names, torch.autograd.grad(total / count, [leaves[k] for k in names])))
        due = (t - 1) % INTERVAL == 0
        if step["estimate"] != due:
            fail(f"{case}: step {t}: estimate {step['estimate']}, want {due}")
        metrics = step["metrics"]
        if due:
            rows = est_micro * micro if est_micro else ids.shape[0]
            hhat, block, z = estimate(kind, params, cfg, ids[:rows], targets[:rows], seed, t,
                                      names)
            for k in names:
                if z is not None and not torch.equal(dumped["tangent." + k].double(), z[k]):
                    fail(f"{case}: step {t}: bora's z for {k} is not the regenerated one")
                e = close(dumped["hvp." + k].double(), block[k], 2e-4,
                          f"{case}: step {t}: the estimate's block for {k}")
                worst["estimate"] = max(worst["estimate"], e)
                h[k] = BETA2 * h[k] + (1 - BETA2) * hhat[k]
            blocks[t] = {k: dumped["hvp." + k].double() for k in names}
            norm = math.sqrt(sum((hhat[k] ** 2).sum().item() for k in names))
            got = metrics.get("optim/hessian_estimate_norm")
            if got is None or abs(got - norm) > 1e-4 * norm:
                fail(f"{case}: step {t}: optim/hessian_estimate_norm {got}, want {norm:.9g}")
        elif "optim/hessian_estimate_norm" in metrics:
            fail(f"{case}: step {t}: optim/hessian_estimate_norm logged off an estimate step")
        inside = total_n = 0
        for k in names:
            m[k] = BETA1 * m[k] + (1 - BETA1) * grads[k]
            mhat = m[k] / (1 - BETA1 ** t)
            ratio = mhat / torch.clamp(gamma * h[k], min=eps)
            inside += int((ratio.abs() < RHO).sum())
            total_n += ratio.numel()
            p = params[k]
            if decayed(k, p):
                p = p - lr * WD * p
            params[k] = p - lr * ratio.clamp(-RHO, RHO)
            got = dumped["param." + k].double()
            err = ((got - params[k]).abs() - 2e-6 * params[k].abs()).max().item()
            worst["params"] = max(worst["params"], err / lr)
            if err > PARAM_TOL * lr:
                fail(f"{case}: step {t}: {k} off by {err:.3g} (tolerance {PARAM_TOL * lr:.3g} + "
                     f"2e-6 |θ|)")
        hnorm = math.sqrt(sum((h[k] ** 2).sum().item() for k in names))
        got = metrics.get("optim/hessian_norm")
        if got is None or abs(got - hnorm) > 1e-4 * hnorm:
            fail(f"{case}: step {t}: optim/hessian_norm {got}, want {hnorm:.9g}")
        frac = inside / total_n
        fractions.append(f"{frac:.2f}")
        got = metrics.get("optim/unclipped_fraction")
        if got is None or abs(got - frac) > 1 / 200:
            fail(f"{case}: step {t}: optim/unclipped_fraction {got}, want {frac:.6f}")
        if not 0 < inside < total_n:
            fail(f"{case}: step {t}: {inside} of {total_n} coordinates unclipped; the case "
                 "should clip some and not others")
    print(f"{case}: 4 steps of {len(names)} parameters checked (largest parameter difference "
          f"{worst['params']:.2g} lr, estimate {worst['estimate']:.2g} of its scale; unclipped "
          f"{', '.join(fractions)})")
    return blocks


def same_estimate(a, b, what):
    for t in a:
        for k in a[t]:
            close(b[t][k], a[t][k], 1e-5, f"{what}: step {t}: {k}")


results = {c: check(c) for c in CASES}
same_estimate(results["h"], results["h_micro"], "2 micro-batches of 4 against 1 of 8 (sophia_h)")
same_estimate(results["g"], results["g_micro"], "2 micro-batches of 4 against 1 of 8 (sophia_g)")
print("sophia: " + ("%d failures" % len(failures) if failures else "all match"))
sys.exit(1 if failures else 0)
