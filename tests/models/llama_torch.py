"""tests/models/llama_torch.py — an independent Llama family (model_type llama, mistral, qwen2,
qwen3), written with PyTorch the way Hugging Face's LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM and Qwen3ForCausalLM compute it, run in float64 on the weights bora wrote
(model.safetensors, Hugging Face's names and (out, in) layouts) and compared with bora's logits,
loss and every parameter's gradient (outputs.safetensors).

Conventions, as Hugging Face's modeling code has them:
- Sliding window (Mistral; Qwen2/3 with use_sliding_window on the layers from max_window_layers
  on): a query at position i sees the key positions j with i - sliding_window < j <= i, that is
  the sliding_window most recent positions itself included (masking_utils'
  sliding_window_overlay, `kv_idx > q_idx - sliding_window`, and the causal `kv_idx <= q_idx`).
  With L such layers the logits at i depend on the tokens i - L*(sliding_window - 1) .. i.
- Loss: the cross-entropy summed over the targets that are not -100, where targets[t] is the token
  predicted at position t (already shifted). Hugging Face's ForCausalLM loss is the mean of the
  same terms (labels shifted inside the model): ours = HF's * the number of targets counted.
- Documents (segment_ids, as bora's GPT-2 reference): a query sees only keys of its own segment.
  Positions are not restarted at a document's start; RoPE depends only on relative position, so
  a document's logits equal those of the document alone (self-check (g)).
- KV cache (decoding): keys and values are kept after RoPE; a sliding-window layer keeps only its
  last sliding_window positions, all a later query can see.
- Rotary embeddings cover the whole head: LlamaForCausalLM and the other three rotate every dim
  of head_dim (their apply_rotary_pos_emb has no partial path), so a config.json with a
  partial_rotary_factor other than 1 is refused.
- Dynamic NTK scaling grows the base past config.max_position_embeddings (transformers'
  _compute_dynamic_ntk_parameters and dynamic_rope_update read only that; a
  rope_scaling.original_max_position_embeddings is accepted and has no effect).
- Qwen2/3's sliding_window is None unless use_sliding_window (Qwen2Config), so without it no
  layer slides, whatever layer_types says.

Tolerances against bora (which computes in float32): logits 2e-4 absolute; the summed loss 1e-5
relative; each gradient tensor's largest difference within 2e-3 of its largest magnitude.

With --hvp, each DIR also holds hvp.safetensors (tangent.NAME v and hvp.NAME, bora's H·v of the
summed loss), checked against PyTorch's double backward, torch.autograd.grad of the gradients
(made with create_graph=True) along v: each tensor's largest difference within 1e-4 of its
largest magnitude.

usage: /usr/bin/python3 llama_torch.py DIR...   each DIR holds config.json, model.safetensors,
                                                inputs.safetensors (input_ids, targets, optional
                                                segment_ids) and outputs.safetensors (logits,
                                                loss_sum, grad.NAME)
       /usr/bin/python3 llama_torch.py --hvp DIR...   the same, and hvp.safetensors in each DIR
       /usr/bin/python3 llama_torch.py --write-case NAME DIR
                                                writes one of the self-check's configurations
                                                (llama2, llama3, yarn, mistral, qwen2, qwen3,
                                                qwen3_window; all:
                                                each as DIR/NAME) as such a DIR, outputs computed
                                                here and stored in f32
       /usr/bin/python3 llama_torch.py --self-check
                                                checks of the reference itself on six tiny
                                                configurations (see self_check)"""
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the test harness turns 77 into "skipped"
    print(f"skipped: {e} (install python3-torch and python3-numpy)")
    sys.exit(77)

torch.set_default_dtype(torch.float64)
LOGITS_TOLERANCE = 2e-4  # bora (float32) against the float64 reference, absolute
DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


class InputError(Exception):
    pass


def write_safetensors(path, tensors):
    """The same format, written: F32 for floating tensors, I32 for integer ones."""
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().numpy().astype(np.float32 if t.is_floating_point() else np.int32)
        header[name] = dict(dtype="F32" if t.is_floating_point() else "I32",
                            shape=list(a.shape), data_offsets=[at, at + a.nbytes])
        blobs.append(a.tobytes())
        at += a.nbytes
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


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
        if info["dtype"] not in DTYPES:
            raise InputError(f"{path}: tensor {name} has dtype {info['dtype']}; this reader takes "
                             f"{', '.join(DTYPES)} (write it in one of those)")
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


# ---- configuration: each model_type's config.json keys and transformers' defaults ----------------
# Keys and defaults of LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config. Where a type has no
# key (Mistral and Qwen2 have no attention_bias), the value is what its modeling code hard-wires.
DEFAULTS = {
    "llama": dict(rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False, mlp_bias=False,
                  head_dim=None, sliding_window=None, max_position_embeddings=2048),
    "mistral": dict(rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=None, sliding_window=4096,
                    max_position_embeddings=4096 * 32),
    "qwen2": dict(rms_norm_eps=1e-6, rope_theta=10000.0, use_sliding_window=False,
                  sliding_window=4096, max_window_layers=28, max_position_embeddings=32768),
    "qwen3": dict(rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False, head_dim=128,
                  use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  max_position_embeddings=32768),
}
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads")


def load_config(cfg, where="config.json"):
    """A flat dict of what the forward needs, from a config.json dict; errors name the key."""
    kind = cfg.get("model_type")
    if kind not in DEFAULTS:
        raise InputError(f"{where}: model_type {kind!r} is not one of {', '.join(DEFAULTS)}")
    c = dict(DEFAULTS[kind], tie_word_embeddings=False, hidden_act="silu", rope_scaling=None)
    c.update(cfg)  # null is a value: Mistral's "sliding_window": null means no window
    c["model_type"] = kind
    for k in REQUIRED:
        if not isinstance(c.get(k), int) or c[k] <= 0:
            raise InputError(f"{where}: {k} must be a positive integer (got {c.get(k)!r})")
    if c["hidden_act"] != "silu":  # every one of the four uses SwiGLU
        raise InputError(f"{where}: hidden_act {c['hidden_act']!r}: only silu is modelled")
    H = c["num_attention_heads"]
    c["num_key_value_heads"] = c.get("num_key_value_heads") or H  # LlamaConfig: None means H
    if H % c["num_key_value_heads"]:
        raise InputError(f"{where}: num_key_value_heads {c['num_key_value_heads']} must divide "
                         f"num_attention_heads {H}")
    if not c.get("head_dim"):  # Llama, Mistral: hidden_size // num_attention_heads
        c["head_dim"] = c["hidden_size"] // H
    w = c["sliding_window"]
    if w is not None and (not isinstance(w, int) or w <= 0):
        raise InputError(f"{where}: sliding_window must be a positive integer or null (got {w!r})")
    # Qwen2 has q/k/v biases and no o_proj bias; Mistral none; Llama and Qwen3 attention_bias.
    c["qkv_bias"] = kind == "qwen2" or (kind in ("llama", "qwen3") and c["attention_bias"])
    c["o_bias"] = kind in ("llama", "qwen3") and c["attention_bias"]
    c["mlp_bias"] = kind == "llama" and c["mlp_bias"]
    c["qk_norm"] = kind == "qwen3"
    # Which layers slide: Mistral all; Qwen2/3 those >= max_window_layers when use_sliding_window
    # (Qwen2Config's layer_types); an explicit layer_types wins.
    L = c["num_hidden_layers"]
    if kind in ("qwen2", "qwen3"):
        if not c["use_sliding_window"]:  # Qwen2Config: sliding_window None
            c["sliding_window"] = None
        w = c["sliding_window"]
        slide = [w is not None and i >= c["max_window_layers"] for i in range(L)]
    else:
        slide = [c["sliding_window"] is not None] * L
    if cfg.get("layer_types") is not None:
        if len(cfg["layer_types"]) != L:
            raise InputError(f"{where}: layer_types has {len(cfg['layer_types'])} entries, "
                             f"num_hidden_layers is {L}")
        slide = [t == "sliding_attention" for t in cfg["layer_types"]]
    c["window"] = [c["sliding_window"] if s else None for s in slide]
    # The rope spec: legacy rope_scaling (with "type" or "rope_type") or newer rope_parameters.
    rs = dict(cfg.get("rope_parameters") or c["rope_scaling"] or {})
    c["rope_theta"] = rs.get("rope_theta", c["rope_theta"])
    c["rope"] = rs
    c["rope_type"] = rs.get("rope_type", rs.get("type", "default"))
    if c["rope_type"] not in ("default", "linear", "dynamic", "llama3", "yarn"):
        raise InputError(f"{where}: rope_scaling.rope_type {c['rope_type']!r} is not one of "
                         "default, linear, dynamic, llama3, yarn")
    need = {"linear": ("factor",), "dynamic": ("factor",), "yarn": (),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                       "original_max_position_embeddings")}.get(c["rope_type"], ())
    for k in need:
        if not isinstance(rs.get(k), (int, float)) or rs[k] <= 0:
            raise InputError(f"{where}: rope_scaling.{k} must be a positive number for "
                             f"rope_type {c['rope_type']} (got {rs.get(k)!r})")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise InputError(f"{where}: partial_rotary_factor {cfg['partial_rotary_factor']!r}: "
                         f"{kind}'s modeling code rotates the whole head")
    c["partial_rotary_factor"] = 1.0
    c["rotary_dims"] = c["head_dim"]
    least = 4 if c["rope_type"] == "dynamic" else 2  # dynamic divides by dims - 2
    if c["rotary_dims"] < least or c["rotary_dims"] % 2:
        raise InputError(f"{where}: head_dim * partial_rotary_factor is {c['rotary_dims']}; "
                         f"rotate-half needs an even number of rotary dims, at least {least}")
    return c


def param_shapes(c):
    """Hugging Face's parameter names and shapes (Linear weights are (out, in))."""
    E, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    s = {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,)}
    for l in range(c["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        s[pre + "input_layernorm.weight"] = (E,)
        s[pre + "post_attention_layernorm.weight"] = (E,)
        for n, out in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            s[pre + f"self_attn.{n}_proj.weight"] = (out, E)
            if c["qkv_bias"]:
                s[pre + f"self_attn.{n}_proj.bias"] = (out,)
        s[pre + "self_attn.o_proj.weight"] = (E, H * hd)
        if c["o_bias"]:
            s[pre + "self_attn.o_proj.bias"] = (E,)
        if c["qk_norm"]:  # Qwen3: one RMSNorm weight over head_dim, shared by all heads
            s[pre + "self_attn.q_norm.weight"] = (hd,)
            s[pre + "self_attn.k_norm.weight"] = (hd,)
        for n, shape in (("gate", (F, E)), ("up", (F, E)), ("down", (E, F))):
            s[pre + f"mlp.{n}_proj.weight"] = shape
            if c["mlp_bias"]:
                s[pre + f"mlp.{n}_proj.bias"] = shape[:1]
    if not c["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, E)
    return s


def check_params(p, c, where="model.safetensors"):
    want = param_shapes(c)
    for name, shape in want.items():
        if name not in p:
            raise InputError(f"{where}: tensor {name} is missing (the config wants it, {shape})")
        if tuple(p[name].shape) != shape:
            raise InputError(f"{where}: tensor {name} is {tuple(p[name].shape)}, the config "
                             f"wants {shape}")
    for name in p:
        if name not in want:
            hint = (" (tie_word_embeddings is true: the head is model.embed_tokens.weight)"
                    if name == "lm_head.weight" else "")
            raise InputError(f"{where}: tensor {name} is not a parameter of this config{hint}")


# ---- rotary embeddings: transformers' modeling_rope_utils, in float64 ----------------------------
def rope_inv_freq(c, seq_len):
    """inv_freq (rotary_dims/2,) and the factor cos and sin are multiplied by."""
    rs, base, dim = c["rope"], c["rope_theta"], c["rotary_dims"]
    kind, factor = c["rope_type"], rs.get("factor", 1.0)

    def default(b):  # _compute_default_rope_parameters
        return 1.0 / b ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim)

    if kind == "default":
        return default(base), 1.0
    if kind == "linear":  # position interpolation: positions / factor
        return default(base) / factor, 1.0
    if kind == "dynamic":  # NTK: the base grows once the sequence passes the model's context
        orig = c["max_position_embeddings"]
        n = max(seq_len, orig)
        return default(base * ((factor * n / orig) - (factor - 1)) ** (dim / (dim - 2))), 1.0
    if kind == "llama3":  # long wavelengths / factor, short ones kept, a smooth band between
        inv = default(base)
        orig = rs["original_max_position_embeddings"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > orig / low, inv / factor, inv)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= orig / high) & (wavelen <= orig / low)
        return torch.where(medium, smoothed, scaled), 1.0
    # yarn: a linear ramp over dims between interpolation (/ factor) and extrapolation
    orig = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
    if "factor" not in rs:  # transformers: the ratio of the context lengths
        factor = c["max_position_embeddings"] / orig

    def mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    att = rs.get("attention_factor")
    if att is None:
        m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
        att = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def correction_dim(rotations):  # the dim whose wavelength makes `rotations` turns in orig
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = correction_dim(fast), correction_dim(slow)
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    hi = hi + 0.001 if lo == hi else hi  # no division by zero
    ramp = ((torch.arange(dim // 2).double() - lo) / (hi - lo)).clamp(0, 1)
    extra = default(base)
    inter = extra / factor
    return inter * ramp + extra * (1 - ramp), att


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin, rot):
    """x (B, heads, T, hd); cos/sin (T, rot): rotate the first rot dims, pass the rest."""
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


# ---- the model: LlamaModel's forward, with the differences of the other three --------------------
def rms_norm(x, w, eps):
    # LlamaRMSNorm: statistics over the last dim (in float; here float64), weight after
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def linear(p, name, x):  # nn.Linear: x @ W.T + b, W (out, in)
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if name + ".bias" in p else y


def repeat_kv(x, n_rep):
    """(B, KV, T, hd) -> (B, KV * n_rep, T, hd): query head h reads kv head h // n_rep."""
    B, KV, T, hd = x.shape
    return x[:, :, None].expand(B, KV, n_rep, T, hd).reshape(B, KV * n_rep, T, hd)


def attention(p, c, l, h, pos, cos, sin, segments, cache):
    pre, eps = f"model.layers.{l}.self_attn.", c["rms_norm_eps"]
    B, T, _ = h.shape
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    q = linear(p, pre + "q_proj", h).view(B, T, H, hd)
    k = linear(p, pre + "k_proj", h).view(B, T, KV, hd)
    v = linear(p, pre + "v_proj", h).view(B, T, KV, hd)
    if c["qk_norm"]:  # Qwen3: RMSNorm over each head's head_dim, before RoPE
        q = rms_norm(q, p[pre + "q_norm.weight"], eps)
        k = rms_norm(k, p[pre + "k_norm.weight"], eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rope(q, cos, sin, c["rotary_dims"]), apply_rope(k, cos, sin, c["rotary_dims"])
    kpos, window = pos, c["window"][l]
    if cache is not None:  # keys and values after RoPE, as DynamicCache keeps them
        if l in cache:
            k0, v0, kpos0 = cache[l]
            k, v, kpos = torch.cat((k0, k), 2), torch.cat((v0, v), 2), torch.cat((kpos0, pos))
        keep = slice(-window, None) if window else slice(None)  # a window keeps only its keys
        cache[l] = (k[:, :, keep], v[:, :, keep], kpos[keep])
    k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
    w = q @ k.transpose(-1, -2) * hd ** -0.5  # self.scaling = head_dim ** -0.5
    mask = kpos[None, :] <= pos[:, None]  # causal
    if window:  # sliding_window_overlay
        mask = mask & (kpos[None, :] > pos[:, None] - window)
    if segments is not None:  # attention stays inside a document
        mask = mask & (segments[:, None, :, None] == segments[:, None, None, :])
    w = w.masked_fill(~mask, torch.finfo(w.dtype).min)
    a = (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
    return linear(p, pre + "o_proj", a)


def forward(p, c, ids, segments=None, cache=None, start=0):
    """Logits (B, T, vocab) of ids (B, T) at positions start.. ; cache: {} to fill / reuse."""
    eps = c["rms_norm_eps"]
    T = ids.shape[1]
    pos = torch.arange(start, start + T)
    inv_freq, scale = rope_inv_freq(c, start + T)
    freqs = pos[:, None].double() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)  # LlamaRotaryEmbedding: cat(freqs, freqs)
    cos, sin = emb.cos() * scale, emb.sin() * scale  # * attention_scaling (yarn)
    x = p["model.embed_tokens.weight"][ids]
    for l in range(c["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        x = x + attention(p, c, l, rms_norm(x, p[pre + "input_layernorm.weight"], eps), pos, cos,
                          sin, segments, cache)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        gate, up = linear(p, pre + "mlp.gate_proj", h), linear(p, pre + "mlp.up_proj", h)
        x = x + linear(p, pre + "mlp.down_proj", torch.nn.functional.silu(gate) * up)  # SwiGLU
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight"]
    return x @ head.T


def loss_sum(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1), ignore_index=-100,
                                             reduction="sum")


# ---- against bora --------------------------------------------------------------------------------
def check_hvp(d, params, loss):
    """bora's H·v (hvp.safetensors) against the double backward of loss along its tangents."""
    hv = read_safetensors(f"{d}/hvp.safetensors")
    names = list(params)
    for name in names:
        for what in ("tangent.", "hvp."):
            if what + name not in hv:
                raise InputError(f"{d}/hvp.safetensors: tensor {what + name} is missing")
    # a parameter the loss does not reach (an expert no token was routed to) has H·v zero
    leaves = [params[k] for k in names]
    grads = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
    used = [(k, g) for k, g in zip(names, grads) if g is not None and g.requires_grad]
    want = torch.autograd.grad([g for _, g in used], leaves, allow_unused=True,
                               grad_outputs=[hv["tangent." + k].double() for k, _ in used])
    want = [torch.zeros_like(t) if w is None else w for t, w in zip(leaves, want)]
    ok, worst = True, 0.0
    for name, w in zip(names, want):
        scale = max(w.abs().max().item(), 1e-12)
        diff = (w - hv["hvp." + name].double()).abs().max().item() / scale
        worst = max(worst, diff)
        if diff > 1e-4:
            print(f"H·v of {name}: largest difference {diff:.3g} of its scale {scale:.3g}")
            ok = False
    print(f"Hessian-vector products: {len(names)} tensors, worst relative difference {worst:.3g}")
    return ok


def read_case(d, load=None, check=None):
    """A DIR's config (through load, a family's load_config), float64 leaf parameters (checked
    by check, its check_params), input_ids, targets, segment_ids or None, and bora's outputs."""
    load, check = load or load_config, check or check_params
    try:
        with open(f"{d}/config.json") as f:
            cfg = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{d}/config.json: not JSON ({e})")
    c = load(cfg, f"{d}/config.json")
    params = read_safetensors(f"{d}/model.safetensors")
    check(params, c, f"{d}/model.safetensors")
    params = {k: v.double().requires_grad_(True) for k, v in params.items()}
    inputs = read_safetensors(f"{d}/inputs.safetensors")
    ours = read_safetensors(f"{d}/outputs.safetensors")
    for name in ("input_ids", "targets"):
        if name not in inputs:
            raise InputError(f"{d}/inputs.safetensors: tensor {name} is missing")
    ids, targets = inputs["input_ids"].long(), inputs["targets"].long()
    seg = inputs["segment_ids"].long() if "segment_ids" in inputs else None
    V, where = c["vocab_size"], f"{d}/inputs.safetensors"
    for name, t in (("targets", targets), ("segment_ids", seg)):
        if ids.dim() != 2 or (t is not None and t.shape != ids.shape):
            raise InputError(f"{where}: {name} must be (batch, position) like input_ids "
                             f"{tuple(ids.shape)}, is {tuple(t.shape)}")
    bad_target = (targets != -100) & ((targets < 0) | (targets >= V))
    if ids.min() < 0 or ids.max() >= V or bad_target.any():
        raise InputError(f"{where}: input_ids and targets must lie in 0 .. vocab_size-1 = {V - 1} "
                         "(targets may be -100)")
    for name in ["logits", "loss_sum"]:
        if name not in ours:
            raise InputError(f"{d}/outputs.safetensors: tensor {name} is missing")
    if ours["logits"].shape != (*ids.shape, V):
        raise InputError(f"{d}/outputs.safetensors: logits are {tuple(ours['logits'].shape)}, "
                         f"want {(*ids.shape, V)}")
    return c, params, ids, targets, seg, ours


def check_outputs(d, params, logits, loss, ours, hvp):
    """bora's logits, summed loss, gradients (and H·v with hvp) against the reference's, loss
    not yet differentiated; prints each finding and returns whether all are within tolerance."""
    loss.backward(retain_graph=hvp)
    ok = check_hvp(d, params, loss) if hvp else True
    dl = (logits.detach() - ours["logits"].double()).abs().max().item()
    print(f"logits: largest difference {dl:.3g}")
    ok &= dl < LOGITS_TOLERANCE
    rel = abs(loss.item() - ours["loss_sum"].item()) / abs(loss.item())
    print(f"loss: torch {loss.item():.8f}, bora {ours['loss_sum'].item():.8f}, relative {rel:.3g}")
    ok &= rel < 1e-5
    worst = 0.0
    for name, t in params.items():
        if "grad." + name not in ours:
            print(f"gradient of {name}: missing from {d}/outputs.safetensors")
            ok = False
            continue
        g, mine = t.grad, ours["grad." + name].double()
        diff = (g - mine).abs().max().item() / max(g.abs().max().item(), 1e-12)
        worst = max(worst, diff)
        if diff > 2e-3:
            print(f"gradient of {name}: largest difference {diff:.3g} of its scale")
            ok = False
    print(f"gradients: {len(params)} tensors, worst relative difference {worst:.3g}")
    return ok


def compare(d, hvp=False):
    print(f"{d}:")
    c, params, ids, targets, seg, ours = read_case(d)
    logits = forward(params, c, ids, seg)
    ok = check_outputs(d, params, logits, loss_sum(logits, targets), ours, hvp)
    print("llama_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


# ---- checks of the reference itself --------------------------------------------------------------
# The seven configurations bora is compared on, tiny: Llama 2 (MHA, untied), Llama 3.2-like
# (GQA, llama3 rope, tied), a yarn Llama (decoupled head_dim, attention and MLP biases), Mistral
# (a window of 4 in 16 positions), Qwen2 (q/k/v biases, tied; its window check again with
# use_sliding_window, max_window_layers 0 and a window of 3), Qwen3 (q/k norms, head_dim 16 with
# hidden 32), and Qwen3 with a window of 3 on its second layer only (multi-query, head_dim 8).
# Two layers, batch 2, 16 positions, vocabulary 50, seeds fixed.
BASE = dict(vocab_size=50, num_hidden_layers=2, num_attention_heads=4, hidden_act="silu")
CONFIGS = {
    "llama2": dict(BASE, model_type="llama", hidden_size=48, intermediate_size=96,
                   num_key_value_heads=4, rms_norm_eps=1e-5, max_position_embeddings=4096),
    "llama3": dict(BASE, model_type="llama", hidden_size=64, intermediate_size=128,
                   num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500000.0,
                   tie_word_embeddings=True, max_position_embeddings=131072,
                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                     high_freq_factor=4.0,
                                     original_max_position_embeddings=8192)),
    "yarn": dict(BASE, model_type="llama", hidden_size=32, intermediate_size=64,
                 num_key_value_heads=2, head_dim=16,
                 attention_bias=True, mlp_bias=True, max_position_embeddings=16384,
                 rope_scaling=dict(rope_type="yarn", factor=4.0,
                                   original_max_position_embeddings=4096)),
    "mistral": dict(BASE, model_type="mistral", hidden_size=48, intermediate_size=96,
                    num_key_value_heads=2, sliding_window=4),
    "qwen2": dict(BASE, model_type="qwen2", hidden_size=48, intermediate_size=96,
                  num_key_value_heads=2, rope_theta=1e6, tie_word_embeddings=True),
    "qwen3": dict(BASE, model_type="qwen3", hidden_size=32, intermediate_size=64,
                  num_key_value_heads=2, head_dim=16, rope_theta=1e6, tie_word_embeddings=True),
    "qwen3_window": dict(BASE, model_type="qwen3", hidden_size=32, intermediate_size=64,
                         num_key_value_heads=1, head_dim=8, use_sliding_window=True,
                         sliding_window=3, max_window_layers=1),
}
B, T = 2, 16


def random_params(c, gen):
    p = {}
    for name, shape in param_shapes(c).items():
        r = torch.randn(shape, generator=gen)
        if name.endswith("norm.weight"):
            p[name] = 1 + 0.2 * r
        elif name.endswith("bias"):
            p[name] = 0.2 * r
        elif "embed" in name or "lm_head" in name:
            p[name] = 0.5 * r
        else:
            p[name] = r / math.sqrt(shape[1])
    return p


def diff(a, b):
    return (a - b).abs().max().item()


def check_cache(p, c, ids, fwd=forward):
    """(a) decoding position by position from a KV cache, and a prefill of 5 then decoding,
    give the full forward's logits."""
    T = ids.shape[1]
    full, worst = fwd(p, c, ids), 0.0
    for first in (1, 5):
        cache = {}
        parts = [fwd(p, c, ids[:, :first], cache=cache)]
        parts += [fwd(p, c, ids[:, t:t + 1], cache=cache, start=t) for t in range(first, T)]
        worst = max(worst, diff(torch.cat(parts, 1), full))
    return worst < 1e-10, f"largest difference {worst:.2g} (< 1e-10)"


def check_gqa(p, c, ids, fwd=forward):
    """(b) GQA through repeat_kv equals plain multi-head attention with each K/V head's rows
    copied to the query heads that read it."""
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    if KV == H:
        return True, "n/a (multi-head)"
    mha, q = dict(p), dict(c, num_key_value_heads=H)
    for name, t in p.items():
        if ".k_proj." in name or ".v_proj." in name:  # kv head g -> query heads g*n .. g*n+n-1
            mha[name] = t.reshape(KV, hd, *t.shape[1:]).repeat_interleave(H // KV, 0).reshape(
                H * hd, *t.shape[1:])
    d = diff(fwd(mha, q, ids), fwd(p, c, ids))
    return d < 1e-10, f"largest difference {d:.2g} (< 1e-10)"


def check_gradients(p, c, ids, targets, gen, fwd=forward):
    """(c) autograd against central differences (step 1e-5), two elements of every parameter:
    |fd - autograd| <= 1e-7 + 1e-6 |autograd| (rounding of the summed loss is ~1e-9 here)."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    loss_sum(fwd(leaves, c, ids), targets).backward()
    worst, h = 0.0, 1e-5
    with torch.no_grad():
        for name, t in p.items():
            for _ in range(2):
                i = torch.randint(t.numel(), (1,), generator=gen).item()
                x = t.view(-1)
                old = x[i].item()
                x[i] = old + h
                up = loss_sum(fwd(p, c, ids), targets).item()
                x[i] = old - h
                down = loss_sum(fwd(p, c, ids), targets).item()
                x[i] = old
                ag = leaves[name].grad.view(-1)[i].item()
                worst = max(worst, abs((up - down) / (2 * h) - ag) / (1e-7 + 1e-6 * abs(ag)))
    return worst < 1, f"{len(p)} tensors, worst difference {worst:.2g} of its tolerance"


def check_window(p, c, ids, required=False, fwd=forward):
    """(d) with a window on every layer, the logits at i change when token j changes exactly when
    i - L*(window - 1) <= j <= i."""
    if not all(c["window"]):
        return not required, "n/a (not every layer slides)"
    reach, T = sum(w - 1 for w in c["window"]), ids.shape[1]
    base, bad = fwd(p, c, ids), 0
    for j in range(T):
        other = ids.clone()
        other[0, j] = (other[0, j] + 1) % c["vocab_size"]
        moved = (fwd(p, c, other)[0] - base[0]).abs().amax(-1) > 1e-9
        bad += sum(bool(moved[i]) != (i - reach <= j <= i) for i in range(T))
    return bad == 0, f"reach {reach} positions back, {bad} of {T * T} (i, j) pairs wrong"


def reference_rope(c, seq_len):
    """tests/graph/rope_reference.py's formulas on this config (a numpy float64 copy of
    transformers' modeling_rope_utils, written separately)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graph"))
    import rope_reference
    rs = c["rope"]
    orig = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
    if c["rope_type"] == "dynamic":
        orig = c["max_position_embeddings"]
    spec = dict(rope_type=c["rope_type"], rope_theta=c["rope_theta"], head_dim=c["head_dim"],
                partial_rotary_factor=c["partial_rotary_factor"], factor=rs.get("factor", 1.0),
                original_max_position_embeddings=orig, seq_len=seq_len,
                low_freq_factor=rs.get("low_freq_factor"),
                high_freq_factor=rs.get("high_freq_factor"),
                attention_factor_given=rs.get("attention_factor"), mscale=rs.get("mscale"),
                mscale_all_dim=rs.get("mscale_all_dim"), beta_fast=rs.get("beta_fast"),
                beta_slow=rs.get("beta_slow"), truncate=rs.get("truncate", True))
    return rope_reference.compute(spec)


def check_rope(c):
    """(e) inv_freq and the attention factor equal rope_reference.py's, to 1e-12 relative."""
    inv, att = rope_inv_freq(c, T)
    want, want_att = reference_rope(c, T)
    rel = max(float(np.max(np.abs(inv.numpy() - want) / want)), abs(att - want_att) / want_att)
    return rel < 1e-12, (f"{c['rope_type']}, {inv.numel()} frequencies, attention factor "
                         f"{att:.6f}, relative difference {rel:.2g} (< 1e-12)")


def check_qk_norm(p, c, ids, fwd=forward):
    """(f) Qwen3's q/k norm is per head: scaling the q_proj rows of one query head, or the k_proj
    rows of one kv head, by a positive constant leaves the logits as they were (rms_norm_eps 0,
    so the norm is exactly scale-free); norm weights stay random."""
    if not c["qk_norm"]:
        return True, "n/a (no q/k norm)"
    c0, hd, worst = dict(c, rms_norm_eps=0.0), c["head_dim"], 0.0
    base = fwd(p, c0, ids)
    for name, head in (("q_proj", 1), ("k_proj", 0)):
        q = dict(p)
        w = p[f"model.layers.0.self_attn.{name}.weight"].clone()
        w[head * hd:(head + 1) * hd] *= 7.0
        q[f"model.layers.0.self_attn.{name}.weight"] = w
        worst = max(worst, diff(fwd(q, c0, ids), base))
    return worst < 1e-10, f"largest difference {worst:.2g} (< 1e-10)"


def check_segments(p, c, ids, fwd=forward):
    """(g) with segment_ids, a row's second document (positions 6..15) has the logits of that
    document run alone from position 0."""
    B, T = ids.shape
    seg = (torch.arange(T) >= 6).long().expand(B, T)
    d = diff(fwd(p, c, ids, seg)[:, 6:], fwd(p, c, ids[:, 6:]))
    return d < 1e-10, f"largest difference {d:.2g} (< 1e-10)"


def make_case(name, n):
    """One configuration's config, random weights (fixed seed), inputs and targets."""
    cfg = CONFIGS[name]
    c = load_config(cfg, f"self-check {name}")
    gen = torch.Generator().manual_seed(1234 + n)
    p = random_params(c, gen)
    ids = torch.randint(c["vocab_size"], (B, T), generator=gen)
    targets = torch.roll(ids, -1, 1)
    targets[:, -1] = -100  # nothing follows the last position
    targets[1, 3] = -100
    return cfg, c, p, ids, targets, gen


def write_case(name, d):
    if name == "all":
        return max(write_case(n, f"{d}/{n}") for n in CONFIGS)
    if name not in CONFIGS:
        raise InputError(f"--write-case: {name!r} is not one of {', '.join(CONFIGS)}")
    cfg, c, p, ids, targets, _ = make_case(name, list(CONFIGS).index(name))
    p = {k: v.float().double().requires_grad_(True) for k, v in p.items()}  # as stored
    seg = (torch.arange(T) >= 6).long().expand(B, T).clone() if name == "llama2" else None
    logits = forward(p, c, ids, seg)
    loss = loss_sum(logits, targets)
    loss.backward()
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(f"{d}/model.safetensors", p)
    inputs = dict(input_ids=ids, targets=targets)
    if seg is not None:
        inputs["segment_ids"] = seg
    write_safetensors(f"{d}/inputs.safetensors", inputs)
    outputs = dict(logits=logits, loss_sum=loss.reshape(()))
    outputs.update({"grad." + k: v.grad for k, v in p.items()})
    write_safetensors(f"{d}/outputs.safetensors", outputs)
    print(f"llama_torch: wrote {name} to {d}")
    return 0


def self_check():
    """Each configuration through (a)-(g): what can be checked of the reference without bora.
    Each check has been seen to fail on a one-line change to the code it guards."""
    ok = True
    for n, name in enumerate(CONFIGS):
        _, c, p, ids, targets, gen = make_case(name, n)
        check_params(p, c)
        results = [("(a) kv cache", check_cache(p, c, ids)), ("(b) gqa", check_gqa(p, c, ids)),
                   ("(c) gradients", check_gradients(p, c, ids, targets, gen)),
                   ("(d) window", check_window(p, c, ids)), ("(e) rope", check_rope(c)),
                   ("(f) q/k norm", check_qk_norm(p, c, ids)),
                   ("(g) documents", check_segments(p, c, ids))]
        if name == "qwen2":  # Qwen2Config's layer_types: layers >= max_window_layers slide
            slid = load_config(dict(CONFIGS[name], use_sliding_window=True, sliding_window=3,
                                    max_window_layers=0))
            results.append(("(d) use_sliding_window", check_window(p, slid, ids, required=True)))
        for what, (good, text) in results:
            print(f"{name:8s} {what:22s} {'ok  ' if good else 'FAIL'} {text}")
            ok &= good
    print("llama_torch --self-check: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


def main(prog, doc, write_case, self_check, compare):
    """The command line the reference scripts share: --write-case NAME DIR, --self-check,
    --hvp CASE..., or CASE... to compare; errors print as 'prog: message' and exit 1."""
    args = sys.argv[1:]
    if not args or (args[0] == "--write-case" and len(args) != 3) or (
            args[0] == "--self-check" and len(args) != 1) or args == ["--hvp"]:
        print("usage: " + doc.split("usage: ")[1])
        sys.exit(2)
    try:
        if args[0] == "--write-case":
            sys.exit(write_case(args[1], args[2]))
        if args[0] == "--self-check":
            sys.exit(self_check())
        if args[0] == "--hvp":
            sys.exit(max(compare(d, hvp=True) for d in args[1:]))
        sys.exit(max(compare(d) for d in args))
    except (InputError, OSError, KeyError, ValueError) as e:
        print(f"{prog}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main("llama_torch", __doc__, write_case, self_check, compare)
