"""bench/step/torch_step.py — the PyTorch peer of bench/step/run: GPT-2 124M (12 layers, 768
wide, 12 heads, vocab 50257, tied LM head, gelu_new), or with --llama a Llama given by Hugging
Face's config.json keys, one full training step (forward, backward, AdamW) on random token ids,
torch.set_num_threads(THREADS). Prints the BLAS the process loaded and its sgemm GFLOP/s (so the
peer is never the reference BLAS), then the median step time.

The Llama is Hugging Face's LlamaForCausalLM written out: RMSNorm (statistics in f32), rotary
positions by rotate-half, grouped-query attention by repeating each key/value head over its
group (repeat_kv), a SwiGLU MLP, linears without biases, a final RMSNorm and an LM head (its own
unless tie_word_embeddings). Keys it does not model (biases, rope_scaling, sliding windows) are
refused, so the peer never times a different function from the one bora runs.

With --mixtral it is Hugging Face's MixtralForCausalLM: the same decoder (Mistral's attention,
without a window) whose MLP is MixtralSparseMoeBlock as transformers writes it: router logits
gate(x), a softmax over the experts in f32, torch.topk of num_experts_per_tok, the weights
divided by their sum, then a loop over the experts, each finding its tokens with torch.where on
the one-hot of the choices, running them through w2(silu(w1 x) * w3 x), scaling by their weights
and index_add_-ing the rows back. No load-balancing loss (output_router_logits false, as bora's
benchmark model).

usage: /usr/bin/python3 torch_step.py [--llama JSON | --mixtral JSON] BATCH SEQ STEPS THREADS [bf16]
       TORCH_STEP_DEVICE=cuda: the GPT-2 step on the GPU instead (scripts/gpu-check's peer)
       /usr/bin/python3 torch_step.py --llama JSON --params
           the Llama's parameter count, params=N (bench/step/run checks it against bora's)
       /usr/bin/python3 torch_step.py --llama JSON --write-case SEQ DIR
           a case for tests/models/llama_torch.py: DIR/config.json, model.safetensors (this
           model's initial weights, Hugging Face's names), inputs.safetensors (2 sequences of SEQ
           random ids and targets) and outputs.safetensors (this model's f32 logits, summed loss
           and every gradient), so the reference can check the peer computes Llama's function
       /usr/bin/python3 torch_step.py --mixtral JSON --params | --write-case SEQ DIR
           the same for the Mixtral (the case for tests/models/mixtral_torch.py)
JSON is an object of config.json keys: hidden_size, intermediate_size, num_hidden_layers,
num_attention_heads, num_key_value_heads, vocab_size, and optionally head_dim, rope_theta,
rms_norm_eps, initializer_range, tie_word_embeddings; for --mixtral also num_local_experts and
num_experts_per_tok (MixtralConfig's defaults: 8 and 2, rope_theta 1e6, rms_norm_eps 1e-5)."""
import json
import math
import os
import struct
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
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


# ---- Llama (Hugging Face's LlamaForCausalLM) ---------------------------------------------------
LLAMA_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "vocab_size")
LLAMA_OPTIONAL = dict(head_dim=None, rope_theta=10000.0, rms_norm_eps=1e-6,
                      initializer_range=0.02, tie_word_embeddings=False, model_type="llama",
                      seq_len=None, max_position_embeddings=None, hidden_act="silu",
                      attention_bias=False, mlp_bias=False, rope_scaling=None)
# keys accepted only at the value that means plain Llama
LLAMA_FIXED = dict(model_type="llama", hidden_act="silu", attention_bias=False, mlp_bias=False,
                   rope_scaling=None)


# MixtralConfig's keys: the Llama's without its biases, the experts', and MixtralConfig's defaults
MIXTRAL_REQUIRED = LLAMA_REQUIRED
MIXTRAL_OPTIONAL = dict(head_dim=None, rope_theta=1e6, rms_norm_eps=1e-5, initializer_range=0.02,
                        tie_word_embeddings=False, model_type="mixtral", seq_len=None,
                        max_position_embeddings=None, hidden_act="silu", rope_scaling=None,
                        sliding_window=None, num_local_experts=8, num_experts_per_tok=2,
                        output_router_logits=False, router_aux_loss_coef=0.001,
                        router_jitter_noise=0.0, attention_dropout=0.0)
MIXTRAL_FIXED = dict(model_type="mixtral", hidden_act="silu", rope_scaling=None,
                     sliding_window=None, output_router_logits=False, router_jitter_noise=0.0,
                     attention_dropout=0.0)
KINDS = dict(llama=(LLAMA_REQUIRED, LLAMA_OPTIONAL, LLAMA_FIXED),
             mixtral=(MIXTRAL_REQUIRED, MIXTRAL_OPTIONAL, MIXTRAL_FIXED))


def model_config(kind, text):
    """The --llama or --mixtral JSON as a dict with every key set; an error names the key and the
    fix."""
    required, optional, fixed = KINDS[kind]
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        sys.exit("torch_step: --%s: not a JSON object (%s)" % (kind, e))
    if not isinstance(cfg, dict):
        sys.exit("torch_step: --%s: not a JSON object of config.json keys" % kind)
    for k in cfg:
        if k not in required and k not in optional:
            sys.exit("torch_step: --%s: key %r is not modelled here (known: %s)"
                     % (kind, k, ", ".join(required + tuple(optional))))
    for k, v in fixed.items():
        if cfg.get(k, v) != v:
            sys.exit("torch_step: --%s: %s %r is not modelled here (only %r)"
                     % (kind, k, cfg[k], v))
    c = dict(optional, **cfg)
    for k in required + (("num_local_experts", "num_experts_per_tok") if kind == "mixtral"
                         else ()):
        if not isinstance(c.get(k), int) or c[k] <= 0:
            sys.exit("torch_step: --%s: %s must be a positive integer (got %r)"
                     % (kind, k, c.get(k)))
    if kind == "mixtral" and c["num_experts_per_tok"] > c["num_local_experts"]:
        sys.exit("torch_step: --mixtral: num_experts_per_tok %d must be at most "
                 "num_local_experts %d" % (c["num_experts_per_tok"], c["num_local_experts"]))
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        sys.exit("torch_step: --%s: num_key_value_heads %d must divide num_attention_heads %d"
                 % (kind, c["num_key_value_heads"], c["num_attention_heads"]))
    if c["head_dim"] is None:
        if c["hidden_size"] % c["num_attention_heads"]:
            sys.exit("torch_step: --%s: num_attention_heads %d must divide hidden_size %d "
                     "(or give head_dim)" % (kind, c["num_attention_heads"], c["hidden_size"]))
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    if c["head_dim"] % 2:
        sys.exit("torch_step: --%s: head_dim %d must be even for rotary positions"
                 % (kind, c["head_dim"]))
    return c


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):  # LlamaRMSNorm: the statistics in f32, the result in x's dtype
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, hd = c["hidden_size"], c["head_dim"]
        self.h, self.kv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.q_proj = nn.Linear(E, self.h * hd, bias=False)
        self.k_proj = nn.Linear(E, self.kv * hd, bias=False)
        self.v_proj = nn.Linear(E, self.kv * hd, bias=False)
        self.o_proj = nn.Linear(self.h * hd, E, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        g = self.h // self.kv  # repeat_kv: each key/value head serves g query heads
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1, dtype=torch.float32)
        y = (att.to(v.dtype) @ v).transpose(1, 2).reshape(B, T, self.h * self.hd)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, F = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(E, F, bias=False)
        self.up_proj = nn.Linear(E, F, bias=False)
        self.down_proj = nn.Linear(F, E, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MixtralSparseMoeBlock(nn.Module):
    """transformers' MixtralSparseMoeBlock: route, then loop over the experts."""

    def __init__(self, c):
        super().__init__()
        E, Fi, self.k = c["hidden_size"], c["intermediate_size"], c["num_experts_per_tok"]
        self.E = c["num_local_experts"]
        self.gate = nn.Linear(E, self.E, bias=False)
        self.experts = nn.ModuleList(MixtralExpert(E, Fi) for _ in range(self.E))

    def forward(self, h):
        B, T, D = h.shape
        x = h.view(-1, D)
        router_logits = self.gate(x)
        w = F.softmax(router_logits, dim=1, dtype=torch.float)
        w, selected = torch.topk(w, self.k, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros((B * T, D), dtype=x.dtype, device=x.device)
        mask = F.one_hot(selected, num_classes=self.E).permute(2, 1, 0)  # (expert, choice, token)
        for e in range(self.E):
            idx, top_x = torch.where(mask[e])
            if top_x.shape[0] == 0:
                continue
            y = self.experts[e](x[top_x]) * w[top_x, idx, None]
            out.index_add_(0, top_x, y.to(x.dtype))
        return out.view(B, T, D)


class MixtralExpert(nn.Module):  # MixtralBlockSparseTop2MLP
    def __init__(self, E, Fi):
        super().__init__()
        self.w1 = nn.Linear(E, Fi, bias=False)
        self.w2 = nn.Linear(Fi, E, bias=False)
        self.w3 = nn.Linear(E, Fi, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        if c["model_type"] == "mixtral":
            self.block_sparse_moe = MixtralSparseMoeBlock(c)
        else:
            self.mlp = LlamaMLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        ffn = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        return x + ffn(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(LlamaLayer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """Parameter names are the Hugging Face state dict's (model.layers.N.self_attn.q_proj...);
    with model_type mixtral, MixtralForCausalLM's (model.layers.N.block_sparse_moe.gate,
    .experts.E.w1 ...)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = LlamaModel(c)
        if not c["tie_word_embeddings"]:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c["head_dim"]
        self.inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
        for name, p in self.named_parameters():  # the PreTrainedModels' initialisation
            if p.dim() == 2:
                nn.init.normal_(p, std=c["initializer_range"])

    def head(self):
        return self.model.embed_tokens.weight if self.c["tie_word_embeddings"] else \
            self.lm_head.weight

    def logits(self, ids):
        T, dev = ids.shape[1], ids.device  # the rotary tables and the mask where ids are
        freqs = torch.outer(torch.arange(T, device=dev).float(), self.inv_freq.to(dev))
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=dev))
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.model.norm(x) @ self.head().t()

    def forward(self, ids, targets):
        logits = self.logits(ids)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def write_case(c, seq, d):
    """The model's initial weights, inputs and f32 outputs as tests/models/llama_torch.py (and
    mixtral_torch.py) read them (F32 and I32 safetensors; the loss summed over the targets, as
    bora's loss_sum)."""
    torch.manual_seed(0)
    model = Llama(c)
    ids = torch.randint(0, c["vocab_size"], (2, seq))
    targets = torch.randint(0, c["vocab_size"], (2, seq))
    logits = model.logits(ids)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), reduction="sum")
    loss.backward()
    os.makedirs(d, exist_ok=True)
    cfg = {k: v for k, v in c.items() if k != "seq_len" and v is not None}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    params = dict(model.named_parameters())
    outputs = dict(logits=logits, loss_sum=loss.reshape(()))
    outputs.update({"grad." + k: p.grad for k, p in params.items()})
    for name, tensors in (("model", params), ("inputs", dict(input_ids=ids, targets=targets)),
                          ("outputs", outputs)):
        write_safetensors(os.path.join(d, name + ".safetensors"), tensors)


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        t = t.float() if t.is_floating_point() else t.int()
        blob = t.numpy().tobytes()
        header[name] = dict(dtype="F32" if t.is_floating_point() else "I32",
                            shape=list(t.shape), data_offsets=[at, at + len(blob)])
        blobs.append(blob)
        at += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


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


def main(batch, seq, steps, threads, bf16, llama):
    """llama: None for GPT-2, else the --llama or --mixtral config (model_type says which)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = os.environ.get("TORCH_STEP_DEVICE", "cpu")
    if device == "cuda":
        print("torch %s on %s (f32 matmuls in f32: no TF32)" % (torch.__version__,
                                                                 torch.cuda.get_device_name()))
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        print("torch %s, %d threads, BLAS: %s" % (torch.__version__, torch.get_num_threads(),
                                                blas_line()))
    if llama:
        model, vocab = Llama(llama), llama["vocab_size"]
    else:
        model, vocab = GPT2(seq), 50257
        for m in model.modules():  # GPT-2's initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    ids = torch.randint(0, vocab, (batch, seq)).to(device)
    targets = torch.randint(0, vocab, (batch, seq)).to(device)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        print("torch step %.3f s, loss %.4f" % (times[-1], loss.item()), flush=True)
    warm = sorted(times[2:] if len(times) > 3 else times)
    print("step_s=%.4f" % warm[len(warm) // 2])


def positive(text, what):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        sys.exit("torch_step: %s must be a positive integer (got %r)" % (what, text))
    return n


if __name__ == "__main__":
    args, llama = sys.argv[1:], None
    if args[:1] in (["--llama"], ["--mixtral"]) and len(args) >= 2:
        llama, args = model_config(args[0][2:], args[1]), args[2:]
        if args == ["--params"]:
            print("params=%d" % sum(p.numel() for p in Llama(llama).parameters()))
            sys.exit(0)
        if len(args) == 3 and args[0] == "--write-case":
            write_case(llama, positive(args[1], "SEQ"), args[2])
            sys.exit(0)
    if len(args) not in (4, 5) or (len(args) == 5 and args[4] != "bf16"):
        sys.exit(__doc__)
    main(positive(args[0], "BATCH"), positive(args[1], "SEQ"), positive(args[2], "STEPS"),
         positive(args[3], "THREADS"), len(args) == 5, llama)
