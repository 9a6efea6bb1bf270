"""bench/step/torch_step.py — the PyTorch peer of bench/step/run: GPT-2 124M (12 layers, 768
wide, 12 heads, vocab 50257, tied LM head, gelu_new), one full training step (forward, backward,
AdamW) on random token ids, torch.set_num_threads(THREADS). Prints the BLAS the process loaded
and its sgemm GFLOP/s (so the peer is never the reference BLAS), then the median step time.

usage: /usr/bin/python3 torch_step.py BATCH SEQ STEPS THREADS [bf16]"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h, seq):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.h)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, seq, layers=12, d=768, h=12, vocab=50257):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, h, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids, targets):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def blas_line():
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps")
                   if "blas" in l.split()[-1].lower()})
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    t = time.perf_counter()
    for _ in range(10):
        torch.mm(a, b)
    t = (time.perf_counter() - t) / 10
    return "%s; sgemm 1024^3 %.1f GFLOP/s" % (", ".join(libs) or "no BLAS library mapped",
                                                  2 * 1024 ** 3 / t / 1e9)


def main(batch, seq, steps, threads, bf16):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print("torch %s, %d threads, BLAS: %s" % (torch.__version__, torch.get_num_threads(),
                                            blas_line()))
    model = GPT2(seq)
    for m in model.modules():  # GPT-2's initialisation
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    ids = torch.randint(0, 50257, (batch, seq))
    targets = torch.randint(0, 50257, (batch, seq))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
        print("torch step %.3f s, loss %.4f" % (times[-1], loss.item()), flush=True)
    warm = sorted(times[2:] if len(times) > 3 else times)
    print("step_s=%.4f" % warm[len(warm) // 2])


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
         len(sys.argv) == 6 and sys.argv[5] == "bf16")
