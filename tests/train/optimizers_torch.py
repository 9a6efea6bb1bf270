#!/usr/bin/python3
"""Lion, Muon and optimizer groups against float64 PyTorch: tests/train/optimizer_dump.c runs a
few steps of bora's apply graph and dumps the gradients it read and the parameters after each
step; here each optimizer is written out from its paper / reference code (Lion: Chen et al.
2023, Algorithm 2; Muon: Keller Jordan's muon.py, its Newton-Schulz in float64 rather than
bf16; AdamW: torch.optim.AdamW itself), applied to the same gradients from the same initial
values, and every parameter compared after every step.

Tolerance: |bora - reference| <= 2e-6 * max(1, |reference|) per element (bora computes in f32).

Lion's update is elementwise: its chain must fuse, one kernel for the parameters with weight
decay and one for those without, as AdamW's (tests/train/test_fusion.c).

Which group takes which parameter is written out here too, from the case's YAML
(optimizer_dump.c) by the documented rules, not asked of bora.

usage: optimizers_torch.py OPTIMIZER_DUMP PLUGIN_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

import torch

torch.set_default_dtype(torch.float64)
dump, plugin_dir, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
TOL = 2e-6
NS = (3.4445, -4.7750, 2.0315)


class Lion:
    """c = b1 m + (1 - b1) g; p -= lr (sign(c) + wd p); m = b2 m + (1 - b2) g"""

    def __init__(self, lr, beta1=0.9, beta2=0.99, weight_decay=0.1):
        self.lr, self.b1, self.b2, self.wd = lr, beta1, beta2, weight_decay
        self.m = {}

    def step(self, name, p, g, factor, decay, in_out=False):
        m = self.m.setdefault(name, torch.zeros_like(p))
        lr = self.lr * factor
        c = self.b1 * m + (1 - self.b1) * g
        p = p - lr * (torch.sign(c) + (self.wd * p if decay else 0))
        self.m[name] = self.b2 * m + (1 - self.b2) * g
        return p


def newton_schulz5(G):
    a, b, c = NS
    X = G
    if G.size(0) > G.size(1):
        X = X.T
    X = X / (X.norm() + 1e-7)
    for _ in range(5):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


class Muon:
    """muon.py: buf.lerp_(g, 1 - beta); u = g.lerp(buf, beta) if nesterov else buf;
    p *= 1 - lr wd; p -= lr * scale * NS5(u)"""

    def __init__(self, lr, momentum=0.95, nesterov=True, weight_decay=0.0, scale="keller"):
        self.lr, self.beta, self.nesterov, self.wd, self.scale = (lr, momentum, nesterov,
                                                                 weight_decay, scale)
        self.buf = {}

    def step(self, name, p, g, factor, decay, in_out=False):
        if in_out:  # stored (in, out) as GPT-2's Conv1D: the reference's nn.Linear holds p.T
            return self.step(name, p.T, g.T, factor, decay).T
        buf = self.buf.setdefault(name, torch.zeros_like(p))
        buf = torch.lerp(buf, g, 1 - self.beta)
        self.buf[name] = buf
        u = torch.lerp(g, buf, self.beta) if self.nesterov else buf
        rows, cols = p.shape  # nn.Linear's (fan_out, fan_in)
        if self.scale == "keller":
            s = max(1.0, rows / cols) ** 0.5
        else:
            s = 0.2 * max(rows, cols) ** 0.5
        lr = self.lr * factor
        if decay:
            p = p * (1 - lr * self.wd)
        return p - lr * s * newton_schulz5(u)


class AdamW:
    """torch.optim.AdamW, one instance per parameter (its decay per the host's mask)."""

    def __init__(self, lr, beta1=0.9, beta2=0.95, epsilon=1e-8, weight_decay=0.1):
        self.lr, self.betas, self.eps, self.wd = lr, (beta1, beta2), epsilon, weight_decay
        self.opt = {}

    def step(self, name, p, g, factor, decay, in_out=False):
        if name not in self.opt:
            t = torch.nn.Parameter(p.clone())
            self.opt[name] = (t, torch.optim.AdamW([t], lr=self.lr, betas=self.betas,
                                                   eps=self.eps,
                                                   weight_decay=self.wd if decay else 0.0))
        t, opt = self.opt[name]
        with torch.no_grad():
            t.copy_(p)
        opt.param_groups[0]["lr"] = self.lr * factor
        t.grad = g.clone()
        opt.step()
        return t.detach().clone()


def reference(case):
    """The optimizer of each parameter, by the case's YAML."""
    if case == "lion":
        o = Lion(1e-2, beta1=0.8, beta2=0.97, weight_decay=0.5)
        return lambda name: o
    if case == "muon":
        o = Muon(2e-2, weight_decay=0.3)
        return lambda name: o
    if case == "muon_plain":
        o = Muon(2e-2, momentum=0.9, nesterov=False, scale="match_rms_adamw")
        return lambda name: o
    if case == "muon_group":
        # Muon's defaults for the rest, AdamW's own (weight_decay 0.1, not Muon's 0) for h.0.v
        muon, adamw = Muon(2e-2), AdamW(1e-2)
        return lambda name: adamw if name == "h.0.v" else muon
    # groups: muon at 2e-2 with weight_decay 0.3 for the rest; the groups inherit the base's
    # keys (weight_decay 0.3) where they do not set their own: emb.proj, decayed, shows it
    base = Muon(2e-2, weight_decay=0.3)
    embeddings = AdamW(3e-3, beta2=0.9, weight_decay=0.3)  # groups[0]: match emb.*
    vectors = AdamW(2e-2, weight_decay=0.0)                # groups[1]: ndim 1
    no_decay = Lion(1e-3, weight_decay=0.3)                # groups[2]: no_decay, ndim 2
    owner = {"emb.weight": embeddings, "emb.bias": embeddings, "emb.proj": embeddings,
             "h.0.w": base, "h.0.v": base, "h.0.b": vectors, "h.0.n": no_decay}
    return lambda name: owner[name]


def check(case):
    out = os.path.join(work, case + ".json")
    r = subprocess.run([dump, plugin_dir, case, out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"{case}: optimizer_dump failed:\n{r.stdout}")
    with open(out) as f:
        d = json.load(f)
    owner = reference(case)
    params = {p["name"]: torch.tensor(p["init"]).reshape(p["shape"]) for p in d["params"]}
    bad, worst = 0, 0.0
    for k, step in enumerate(d["steps"], 1):
        for i, p in enumerate(d["params"]):
            name = p["name"]
            g = torch.tensor(step["grads"][i]).reshape(p["shape"])
            params[name] = owner(name).step(name, params[name], g, step["lr_factor"],
                                            not p["no_decay"], p["in_out"])
            got = torch.tensor(step["params"][i]).reshape(p["shape"])
            err = ((got - params[name]).abs() / params[name].abs().clamp(min=1)).max().item()
            worst = max(worst, err)
            if err > TOL:
                bad += 1
                print(f"{case}: step {k} {name}: off by {err:.3g} (relative; tolerance {TOL})")
    if case == "lion" and (d["fused_update_groups"], d["updates_outside"]) != (2, 0):
        bad += 1
        print(f"lion: the updates ran as {d['fused_update_groups']} fused kernels, "
              f"{d['updates_outside']} outside them; want 2 (decay, no decay) and none outside")
    print(f"{case}: {len(d['steps'])} steps of {len(d['params'])} parameters "
          f"{'differ' if bad else 'match'} (largest relative difference {worst:.2g})")
    return bad


failures = sum(check(c) for c in ("lion", "muon", "muon_plain", "groups", "muon_group"))
sys.exit(1 if failures else 0)
