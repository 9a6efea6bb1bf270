"""tests/models/gemma_torch.py — an independent Gemma family (model_type gemma, gemma2,
gemma3_text), written with PyTorch the way Hugging Face's GemmaForCausalLM, Gemma2ForCausalLM and
Gemma3ForCausalLM compute it, run in float64 on the weights bora wrote (model.safetensors, Hugging
Face's names and (out, in) layouts) and compared with bora's logits, loss and every parameter's
gradient (outputs.safetensors). The safetensors files, the case layout, the rope frequencies, the
loss and the tolerances are llama_torch.py's.

What the three add to a Llama, as transformers' modeling code has it:
- Embedding scale: the embeddings times sqrt(hidden_size). Gemma and Gemma 2 round it to the
  activations' dtype (torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype)); Gemma 3's
  Gemma3TextScaledWordEmbedding keeps it as a buffer made in float32 and casts that to the
  weight's dtype, so here it is sqrt(hidden_size) rounded to float32 (Gemma, Gemma 2: float64).
- GemmaRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), the weight an offset from 1 (initialised
  to zero); the product is taken before any cast (Llama casts first, then multiplies by w).
- GeGLU: down(act(gate(x)) * up(x)). Gemma's act is ACT2FN[hidden_act], Gemma 2's and 3's
  ACT2FN[hidden_activation]; gelu_pytorch_tanh and gelu_new are the tanh form, gelu is the exact
  erf form. head_dim is its own key (256 by default), not hidden_size / num_attention_heads.
- Gemma 2 and 3: sandwich norms (post_attention_layernorm on the attention's output and
  post_feedforward_layernorm on the MLP's, before each residual add; pre_feedforward_layernorm
  before the MLP); attention scores scaled by query_pre_attn_scalar^-0.5, not head_dim^-0.5.
- Gemma 2: attention soft-cap tanh(s / c) * c on the scaled scores, before the mask
  (attn_logit_softcapping); final soft-cap of the logits (final_logit_softcapping); layers slide
  or not as layer_types says, by default i = 0, 2, 4, ... slide ("sliding_attention" if
  (i + 1) % 2 else "full_attention").
- Gemma 3: q_norm / k_norm (GemmaRMSNorm over head_dim, per head, before RoPE); layer i slides
  unless (i + 1) % sliding_window_pattern == 0 (default 6) when layer_types is not given; sliding
  layers rotate with the default rope of base rope_local_base_freq, full ones with rope_theta and
  rope_scaling (transformers 5: rope_parameters.sliding_attention / .full_attention). The final
  soft-cap applies when set. attn_logit_softcapping is read but never applied:
  Gemma3Attention.forward does not pass softcap to the attention function (transformers 4.50
  to 5), so a Gemma 3 with it set computes as one without.
- Sliding window: query i sees keys i - sliding_window < j <= i (masking_utils'
  sliding_window_overlay); the KV cache of a sliding layer keeps its last sliding_window keys.
- Documents (segment_ids) as llama_torch.py: a query sees only keys of its own segment.

Refused by name: use_bidirectional_attention true, an activation other than the three above,
num_key_value_heads not dividing num_attention_heads, a sliding layer without a positive
sliding_window, layer_types of the wrong length or with unknown entries.

The comparison also ablates: for every feature the case uses (the embedding scale, the 1 + w
offset, the tanh GELU, the sandwich post-norms, each soft-cap, query_pre_attn_scalar, the sliding
window, the local rope base, the global rope scaling, the q/k norms) the reference is run again
with that feature off, and its logits must then differ from bora's by more than ABLATION_MARGIN,
25 times the logits' tolerance: bora's match is owed to each feature, not to its absence.

usage: /usr/bin/python3 gemma_torch.py DIR...   each DIR as llama_torch.py's (config.json,
                                                model.safetensors, inputs.safetensors,
                                                outputs.safetensors)
       /usr/bin/python3 gemma_torch.py --hvp DIR...   the same, and hvp.safetensors in each DIR
       /usr/bin/python3 gemma_torch.py --write-case NAME DIR
                                                writes one of the self-check's configurations
                                                (gemma, gemma2, gemma3, gemma3_softcap; all:
                                                each as DIR/NAME) as such a DIR, outputs computed
                                                here and stored in f32
       /usr/bin/python3 gemma_torch.py --self-check
                                                checks of the reference itself on the four
                                                configurations (see self_check)"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402  (exits 77 without torch and numpy)
from llama_torch import InputError, apply_rope, linear, loss_sum, repeat_kv  # noqa: E402

torch = lt.torch
ABLATION_MARGIN = 25 * lt.LOGITS_TOLERANCE

# ---- configuration: each model_type's config.json keys and transformers' defaults ----------------
# GemmaConfig, Gemma2Config, Gemma3TextConfig; "gemma3" is bora's name for gemma3_text.
COMMON = dict(rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256, attention_bias=False,
              tie_word_embeddings=True, rope_scaling=None, use_bidirectional_attention=False)
DEFAULTS = {
    "gemma": dict(COMMON, num_key_value_heads=16, hidden_act="gelu_pytorch_tanh",
                  max_position_embeddings=8192),
    "gemma2": dict(COMMON, num_key_value_heads=4, hidden_activation="gelu_pytorch_tanh",
                   max_position_embeddings=8192, query_pre_attn_scalar=256, sliding_window=4096,
                   final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
    "gemma3_text": dict(COMMON, num_key_value_heads=4, hidden_activation="gelu_pytorch_tanh",
                        max_position_embeddings=131072, query_pre_attn_scalar=256,
                        sliding_window=4096, final_logit_softcapping=None,
                        attn_logit_softcapping=None, rope_theta=1e6, rope_local_base_freq=1e4,
                        sliding_window_pattern=6),
}
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads")
TANH_GELU, EXACT_GELU = ("gelu_pytorch_tanh", "gelu_new"), ("gelu",)
FEATURES = ("embed_scale", "norm_offset", "gelu_tanh", "post_norms", "attn_softcap",
            "final_softcap", "query_pre_attn_scalar", "sliding_window", "local_rope_base",
            "global_rope_scaling", "qk_norm")


def rope_spec(c, rs, theta, where, key):
    """The fields rope_inv_freq reads, for one kind of layer: rs is a rope_scaling or
    rope_parameters dict (or None), theta its base unless rs says rope_theta."""
    rs = dict(rs or {})
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind not in ("default", "linear", "dynamic", "llama3", "yarn"):
        raise InputError(f"{where}: {key}.rope_type {kind!r} is not one of default, linear, "
                         "dynamic, llama3, yarn")
    if kind in ("linear", "dynamic", "llama3") and (
            not isinstance(rs.get("factor"), (int, float)) or rs["factor"] <= 0):
        raise InputError(f"{where}: {key}.factor must be a positive number for rope_type {kind} "
                         f"(got {rs.get('factor')!r})")
    return dict(rope=rs, rope_type=kind, rope_theta=float(rs.get("rope_theta", theta)),
                rotary_dims=c["head_dim"], partial_rotary_factor=1.0,
                head_dim=c["head_dim"], max_position_embeddings=c["max_position_embeddings"])


def load_config(cfg, where="config.json"):
    """A flat dict of what the forward needs, from a config.json dict; errors name the key."""
    kind = cfg.get("model_type")
    kind = "gemma3_text" if kind == "gemma3" else kind
    if kind not in DEFAULTS:
        raise InputError(f"{where}: model_type {kind!r} is not one of gemma, gemma2, gemma3_text "
                         "(a multimodal gemma3 config.json's text_config is the text model)")
    c = dict(DEFAULTS[kind])
    c.update(cfg)
    c["model_type"] = kind
    for k in REQUIRED:
        if not isinstance(c.get(k), int) or isinstance(c[k], bool) or c[k] <= 0:
            raise InputError(f"{where}: {k} must be a positive integer (got {c.get(k)!r})")
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    for k in ("num_key_value_heads", "head_dim"):
        if not isinstance(c[k], int) or c[k] <= 0:
            raise InputError(f"{where}: {k} must be a positive integer (got {c[k]!r})")
    if H % KV:
        raise InputError(f"{where}: num_key_value_heads {KV} must divide num_attention_heads {H}")
    if hd % 2:
        raise InputError(f"{where}: head_dim {hd} must be even (rotate-half pairs its halves)")
    if c["use_bidirectional_attention"]:
        raise InputError(f"{where}: use_bidirectional_attention true (Gemma 3 as an encoder) is "
                         "not modelled; causal attention only")
    act_key = "hidden_act" if kind == "gemma" else "hidden_activation"
    act = c[act_key]
    if act not in TANH_GELU + EXACT_GELU:
        raise InputError(f"{where}: {act_key} {act!r} is not one of "
                         f"{', '.join(TANH_GELU + EXACT_GELU)}")
    c["gelu_tanh"] = act in TANH_GELU
    c["sandwich"] = c["qk_norm"] = False
    c["scale"] = hd ** -0.5
    c["attn_cap"] = c["final_cap"] = None
    L = c["num_hidden_layers"]
    slide = [False] * L
    if kind != "gemma":
        c["sandwich"] = True
        q = c["query_pre_attn_scalar"]
        if not isinstance(q, (int, float)) or q <= 0:
            raise InputError(f"{where}: query_pre_attn_scalar must be a positive number "
                             f"(got {q!r})")
        c["scale"] = q ** -0.5
        for k, into in (("attn_logit_softcapping", "attn_cap"),
                        ("final_logit_softcapping", "final_cap")):
            if c[k] is not None and (not isinstance(c[k], (int, float)) or c[k] <= 0):
                raise InputError(f"{where}: {k} must be a positive number or null (got {c[k]!r})")
            c[into] = c[k]
        if kind == "gemma3_text":
            c["qk_norm"] = True
            c["attn_cap"] = None  # Gemma3Attention never passes softcap on (see the docstring)
            n = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern",
                                                          c["sliding_window_pattern"]))
            if not isinstance(n, int) or n <= 0:
                raise InputError(f"{where}: sliding_window_pattern must be a positive integer "
                                 f"(got {n!r})")
            slide = [bool((i + 1) % n) for i in range(L)]
        else:
            slide = [bool((i + 1) % 2) for i in range(L)]
        if cfg.get("layer_types") is not None:
            types = cfg["layer_types"]
            if not isinstance(types, list) or len(types) != L or any(
                    t not in ("sliding_attention", "full_attention") for t in types):
                raise InputError(f"{where}: layer_types must list num_hidden_layers ({L}) entries "
                                 "each sliding_attention or full_attention")
            slide = [t == "sliding_attention" for t in types]
        w = c["sliding_window"]
        if any(slide) and (not isinstance(w, int) or w <= 0):
            raise InputError(f"{where}: sliding_window must be a positive integer: layers "
                             f"{[i for i in range(L) if slide[i]]} slide (got {w!r})")
    c["window"] = [c["sliding_window"] if s else None for s in slide]
    # Rotary embeddings: one spec for every layer, or Gemma 3's pair (full and sliding layers).
    rp = cfg.get("rope_parameters")
    if kind == "gemma3_text":
        if rp is not None:
            if not isinstance(rp, dict) or not {"full_attention", "sliding_attention"} <= set(rp):
                raise InputError(f"{where}: rope_parameters must hold full_attention and "
                                 "sliding_attention (transformers 5's per-layer-type form)")
            full = rope_spec(c, rp["full_attention"], c["rope_theta"], where,
                             "rope_parameters.full_attention")
            local = rope_spec(c, rp["sliding_attention"], c["rope_local_base_freq"], where,
                              "rope_parameters.sliding_attention")
        else:
            full = rope_spec(c, c["rope_scaling"], c["rope_theta"], where, "rope_scaling")
            local = rope_spec(c, None, c["rope_local_base_freq"], where, "rope_local_base_freq")
    else:
        full = local = rope_spec(c, rp if rp is not None else c["rope_scaling"], c["rope_theta"],
                                 where, "rope_parameters" if rp is not None else "rope_scaling")
    c["rope_full"], c["rope_local"] = full, local
    return c


def param_shapes(c):
    """Hugging Face's parameter names and shapes (Linear weights are (out, in))."""
    E, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    s = {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,)}
    norms = ["input_layernorm", "post_attention_layernorm"]
    if c["sandwich"]:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    for l in range(c["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        for n in norms:
            s[pre + n + ".weight"] = (E,)
        for n, out, inp in (("q", H * hd, E), ("k", KV * hd, E), ("v", KV * hd, E),
                            ("o", E, H * hd)):
            s[pre + f"self_attn.{n}_proj.weight"] = (out, inp)
            if c["attention_bias"]:
                s[pre + f"self_attn.{n}_proj.bias"] = (out,)
        if c["qk_norm"]:
            s[pre + "self_attn.q_norm.weight"] = (hd,)
            s[pre + "self_attn.k_norm.weight"] = (hd,)
        for n, shape in (("gate", (F, E)), ("up", (F, E)), ("down", (E, F))):
            s[pre + f"mlp.{n}_proj.weight"] = shape
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


# ---- the model: GemmaModel's forward, with what Gemma 2 and 3 add --------------------------------
def gemma_rms_norm(x, w, eps, offset=True):
    # GemmaRMSNorm: normalise, then times (1 + w), in that order (float64 throughout here)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * ((1.0 + w) if offset else w)


def gelu(x, tanh):
    return torch.nn.functional.gelu(x, approximate="tanh" if tanh else "none")


def softcap(x, cap):  # tanh(x / c) * c, as transformers writes it
    return torch.tanh(x / cap) * cap


def rope_tables(spec, pos, seq_len):
    inv_freq, scale = lt.rope_inv_freq(spec, seq_len)
    freqs = pos[:, None].double() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * scale, emb.sin() * scale


def attention(p, c, l, h, pos, rope, segments, cache, off):
    pre, eps = f"model.layers.{l}.self_attn.", c["rms_norm_eps"]
    B, T, _ = h.shape
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    q = linear(p, pre + "q_proj", h).view(B, T, H, hd)
    k = linear(p, pre + "k_proj", h).view(B, T, KV, hd)
    v = linear(p, pre + "v_proj", h).view(B, T, KV, hd)
    if c["qk_norm"] and "qk_norm" not in off:  # Gemma 3: per head, over head_dim, before RoPE
        q = gemma_rms_norm(q, p[pre + "q_norm.weight"], eps, "norm_offset" not in off)
        k = gemma_rms_norm(k, p[pre + "k_norm.weight"], eps, "norm_offset" not in off)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    cos, sin = rope
    q, k = apply_rope(q, cos, sin, hd), apply_rope(k, cos, sin, hd)
    window = None if "sliding_window" in off else c["window"][l]
    kpos = pos
    if cache is not None:  # keys and values after RoPE; a sliding layer keeps its last window
        if l in cache:
            k0, v0, kpos0 = cache[l]
            k, v, kpos = torch.cat((k0, k), 2), torch.cat((v0, v), 2), torch.cat((kpos0, pos))
        keep = slice(-window, None) if window else slice(None)
        cache[l] = (k[:, :, keep], v[:, :, keep], kpos[keep])
    k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
    scale = hd ** -0.5 if "query_pre_attn_scalar" in off else c["scale"]
    w = q @ k.transpose(-1, -2) * scale
    if c["attn_cap"] and "attn_softcap" not in off:  # after scaling, before the mask
        w = softcap(w, c["attn_cap"])
    mask = kpos[None, :] <= pos[:, None]
    if window:  # sliding_window_overlay: i - W < j
        mask = mask & (kpos[None, :] > pos[:, None] - window)
    if segments is not None:
        mask = mask & (segments[:, None, :, None] == segments[:, None, None, :])
    w = w.masked_fill(~mask, torch.finfo(w.dtype).min)
    a = (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
    return linear(p, pre + "o_proj", a)


def forward(p, c, ids, segments=None, cache=None, start=0, off=()):
    """Logits (B, T, vocab) of ids (B, T) at positions start.. ; cache: {} to fill / reuse;
    off: names from FEATURES computed as if the model lacked them (the ablation)."""
    eps, T, E = c["rms_norm_eps"], ids.shape[1], c["hidden_size"]
    offset = "norm_offset" not in off

    def norm(x, name):
        return gemma_rms_norm(x, p[name + ".weight"], eps, offset)

    pos = torch.arange(start, start + T)
    full = c["rope_full"]
    if "global_rope_scaling" in off:
        full = dict(full, rope={}, rope_type="default")
    local = full if "local_rope_base" in off else c["rope_local"]
    x = p["model.embed_tokens.weight"][ids]
    ropes = {s: tuple(t.to(x.dtype) for t in rope_tables(local if s else full, pos, start + T))
             for s in (False, True)}
    if "embed_scale" not in off:
        scale = E ** 0.5
        if c["model_type"] == "gemma3_text":  # a float32 buffer cast to the weight's dtype
            scale = float(torch.tensor(scale, dtype=torch.float32))
        x = x * scale
    post = c["sandwich"] and "post_norms" not in off
    for l in range(c["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = attention(p, c, l, norm(x, pre + "input_layernorm"), pos,
                      ropes[c["window"][l] is not None], segments, cache, off)
        if post:
            h = norm(h, pre + "post_attention_layernorm")
        x = x + h
        # Gemma: post_attention_layernorm is the MLP's input norm; Gemma 2/3: pre_feedforward
        h = norm(x, pre + ("pre_feedforward_layernorm" if c["sandwich"]
                           else "post_attention_layernorm"))
        gate, up = linear(p, pre + "mlp.gate_proj", h), linear(p, pre + "mlp.up_proj", h)
        h = linear(p, pre + "mlp.down_proj",
                   gelu(gate, c["gelu_tanh"] and "gelu_tanh" not in off) * up)
        if post:
            h = norm(h, pre + "post_feedforward_layernorm")
        x = x + h
    x = norm(x, "model.norm")
    head = p["model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight"]
    logits = x @ head.T
    if c["final_cap"] and "final_softcap" not in off:
        logits = softcap(logits, c["final_cap"])
    return logits


def features(c, T):
    """The FEATURES this config uses, whose absence the logits must show."""
    local = [w is not None for w in c["window"]]
    full, loc = c["rope_full"], c["rope_local"]
    used = {
        "embed_scale": True,
        "norm_offset": True,
        "gelu_tanh": c["gelu_tanh"],
        "post_norms": c["sandwich"],
        "attn_softcap": bool(c["attn_cap"]),
        "final_softcap": bool(c["final_cap"]),
        "query_pre_attn_scalar": c["scale"] != c["head_dim"] ** -0.5,
        "sliding_window": any(w is not None and w < T for w in c["window"]),
        "local_rope_base": any(local) and (loc["rope_theta"], loc["rope_type"]) != (
            full["rope_theta"], full["rope_type"]),
        "global_rope_scaling": not all(local) and full["rope_type"] != "default",
        "qk_norm": c["qk_norm"],
    }
    return [f for f in FEATURES if used[f]]


# ---- against bora --------------------------------------------------------------------------------
def check_ablation(c, params, ids, seg, ours):
    """Each feature off in turn must move the reference's logits far from bora's."""
    ok, want = True, ours["logits"].double()
    with torch.no_grad():
        for f in features(c, ids.shape[1]):
            d = (forward(params, c, ids, seg, off=(f,)) - want).abs().max().item()
            if d > ABLATION_MARGIN:
                print(f"ablation: {f} off moves the logits {d:.3g} from bora's "
                      f"(> {ABLATION_MARGIN:.3g})")
            else:
                print(f"ablation: with {f} off the logits are within {d:.3g} of bora's "
                      f"(want > {ABLATION_MARGIN:.3g}): the comparison does not show that bora "
                      f"applies {f}")
                ok = False
    return ok


def compare(d, hvp=False):
    print(f"{d}:")
    c, params, ids, targets, seg, ours = lt.read_case(d, load_config, check_params)
    logits = forward(params, c, ids, seg)
    ok = lt.check_outputs(d, params, logits, loss_sum(logits, targets), ours, hvp)
    ok &= check_ablation(c, params, ids, seg, ours)
    if c["model_type"] == "gemma3_text" and c["attn_logit_softcapping"]:
        with torch.no_grad():  # a diagnosis for a model that applies the cap Gemma 3 ignores
            d = (forward(params, dict(c, attn_cap=c["attn_logit_softcapping"]), ids, seg)
                 - ours["logits"].double()).abs().max().item()
        print(f"note: transformers' Gemma 3 ignores attn_logit_softcapping; with it applied the "
              f"logits would be {d:.3g} from bora's")
    print("gemma_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


# ---- checks of the reference itself --------------------------------------------------------------
# The four configurations bora is compared on, tiny, 24 positions, batch 2, vocabulary 97:
# gemma: multi-query (one kv head), head_dim 16 with hidden 32 and 4 heads, untied head.
# gemma2: three layers (sliding, full, sliding), a window of 4, both soft-caps binding,
#   query_pre_attn_scalar 24 with head_dim 16, documents (segment_ids) in the written case.
# gemma3: four layers, sliding_window_pattern 3 (sliding, sliding, full, sliding), a window of
#   5, linear rope scaling (factor 4) on the full layer, local base 100 against global 10000.
# gemma3_softcap: two layers from layer_types, linear rope scaling (factor 2), both soft-caps
#   set (the attention one, as in transformers, without effect), untied head.
BASE = dict(vocab_size=97, rms_norm_eps=1e-6)
CONFIGS = {
    "gemma": dict(BASE, model_type="gemma", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                  head_dim=16, hidden_act="gelu_pytorch_tanh", tie_word_embeddings=False),
    "gemma2": dict(BASE, model_type="gemma2", hidden_size=48, intermediate_size=96,
                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
                   attn_logit_softcapping=2.0, final_logit_softcapping=10.0),
    "gemma3": dict(BASE, model_type="gemma3_text", hidden_size=64, intermediate_size=128,
                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, query_pre_attn_scalar=32, sliding_window=5,
                   sliding_window_pattern=3, rope_theta=10000.0, rope_local_base_freq=100.0,
                   rope_scaling=dict(rope_type="linear", factor=4.0)),
    "gemma3_softcap": dict(BASE, model_type="gemma3_text", hidden_size=32,
                           intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                           sliding_window=5, layer_types=["sliding_attention", "full_attention"],
                           rope_theta=10000.0, rope_local_base_freq=100.0,
                           rope_scaling=dict(rope_type="linear", factor=2.0),
                           attn_logit_softcapping=1.0, final_logit_softcapping=3.0,
                           tie_word_embeddings=False),
}
B, T = 2, 24
DOC = 9  # the written gemma2 case's second document starts here


def random_params(c, gen):
    """Random weights; gate_proj's rows are moved by -1.5 along the all-ones direction (GELU
    inputs then fall often below -1, where the tanh and erf forms differ most relative to the
    value) and down_proj is 10 times larger, so the GELU's form shows in the logits (check (i));
    -2 made some positions too ill-conditioned for float32 (check (j))."""
    p = {}
    for name, shape in param_shapes(c).items():
        r = torch.randn(shape, generator=gen)
        if name.endswith("norm.weight"):  # Gemma's offsets from 1
            p[name] = 0.3 * r
        elif name.endswith("bias"):
            p[name] = 0.2 * r
        elif "embed" in name or "lm_head" in name:
            p[name] = 0.5 * r
        else:
            p[name] = r / math.sqrt(shape[1])
        if name.endswith("gate_proj.weight"):
            p[name] -= 1.5 / math.sqrt(shape[1])
        elif name.endswith("down_proj.weight"):
            p[name] *= 10
    return p


def make_case(name, n):
    cfg = CONFIGS[name]
    c = load_config(cfg, f"self-check {name}")
    gen = torch.Generator().manual_seed(4321 + n)
    p = random_params(c, gen)
    ids = torch.randint(c["vocab_size"], (B, T), generator=gen)
    targets = torch.roll(ids, -1, 1)
    targets[:, -1] = -100
    targets[1, 3] = -100
    return cfg, c, p, ids, targets, gen


def write_case(name, d, off=()):
    if name == "all":
        return max(write_case(n, f"{d}/{n}", off) for n in CONFIGS)
    if name not in CONFIGS:
        raise InputError(f"--write-case: {name!r} is not one of {', '.join(CONFIGS)}")
    cfg, c, p, ids, targets, _ = make_case(name, list(CONFIGS).index(name))
    p = {k: v.float().double().requires_grad_(True) for k, v in p.items()}  # as stored
    seg = (torch.arange(T) >= DOC).long().expand(B, T).clone() if name == "gemma2" else None
    logits = forward(p, c, ids, seg, off=off)
    loss = loss_sum(logits, targets)
    loss.backward()
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    lt.write_safetensors(f"{d}/model.safetensors", p)
    inputs = dict(input_ids=ids, targets=targets)
    if seg is not None:
        inputs["segment_ids"] = seg
    lt.write_safetensors(f"{d}/inputs.safetensors", inputs)
    outputs = dict(logits=logits, loss_sum=loss.reshape(()))
    outputs.update({"grad." + k: torch.zeros_like(v) if v.grad is None else v.grad
                    for k, v in p.items()})  # a feature off (off=) leaves its weights unused
    lt.write_safetensors(f"{d}/outputs.safetensors", outputs)
    print(f"gemma_torch: wrote {name} to {d}")
    return 0


def check_window_reach(p, c, ids):
    """(d) every layer made sliding (layer_types all sliding_attention): the logits at i change
    when token j changes exactly when i - L*(window - 1) <= j <= i."""
    if c["model_type"] == "gemma":
        return True, "n/a (no sliding layers)"
    slid = dict(c, window=[c["sliding_window"]] * c["num_hidden_layers"])
    return lt.check_window(p, slid, ids, required=True, fwd=forward)


def check_rope_pair(cfg, c):
    """(e) both rope specs' inv_freq against tests/graph/rope_reference.py; for Gemma 3, the
    same config written with transformers 5's rope_parameters loads to the same specs."""
    (g_ok, g_text), (l_ok, l_text) = lt.check_rope(c["rope_full"]), lt.check_rope(c["rope_local"])
    same = "n/a"
    if c["model_type"] == "gemma3_text":
        new = {k: v for k, v in cfg.items()
               if k not in ("rope_theta", "rope_local_base_freq", "rope_scaling")}
        new["rope_parameters"] = dict(
            full_attention=dict(cfg.get("rope_scaling") or dict(rope_type="default"),
                                rope_theta=c["rope_full"]["rope_theta"]),
            sliding_attention=dict(rope_type="default", rope_theta=c["rope_local"]["rope_theta"]))
        c5 = load_config(new)
        keys = ("rope_type", "rope_theta")
        same = all(c5[s][k] == c[s][k] for s in ("rope_full", "rope_local") for k in keys) and (
            c5["rope_full"]["rope"].get("factor") == c["rope_full"]["rope"].get("factor"))
        g_ok &= same
    return g_ok and l_ok, f"full: {g_text}; sliding: {l_text}; rope_parameters alike: {same}"


def check_softcap(p, c, ids):
    """(h) the final soft-cap bounds the logits by the cap, and a cap of 1e9 (tanh linear there)
    equals no cap to 1e-10; likewise an attention cap of 1e9 equals none."""
    if not c["final_cap"] and not c["attn_cap"]:
        return True, "n/a (no soft-cap)"
    base, bound = forward(p, c, ids), c["final_cap"] or math.inf
    loose = dict(c, final_cap=c["final_cap"] and 1e9, attn_cap=c["attn_cap"] and 1e9)
    d = lt.diff(forward(p, loose, ids), forward(p, c, ids, off=("final_softcap", "attn_softcap")))
    top = base.abs().max().item()
    return top < bound and d < 1e-10, (f"largest |logit| {top:.6g} (< {bound}), a cap of 1e9 "
                                       f"against none {d:.2g} (< 1e-10)")


def check_features(p, c, ids):
    """(i) each feature the case uses, switched off, moves the reference's own logits by more
    than ABLATION_MARGIN (else the comparison's ablation could not show it in bora)."""
    base, least, worst = forward(p, c, ids), math.inf, ""
    for f in features(c, ids.shape[1]):
        d = lt.diff(forward(p, c, ids, off=(f,)), base)
        if d < least:
            least, worst = d, f
    return least > ABLATION_MARGIN, (f"{len(features(c, ids.shape[1]))} features, the least "
                                     f"({worst}) moves the logits {least:.3g}")


def check_conditioning(p, c, ids):
    """(j) the same model run in float32 stays within a tenth of the logits' tolerance of the
    float64 run (with documents): bora, in float32, can meet the tolerance on this case."""
    seg = (torch.arange(T) >= DOC).long().expand(B, T)
    with torch.no_grad():
        d = lt.diff(forward({k: v.float() for k, v in p.items()}, c, ids, seg).double(),
                    forward(p, c, ids, seg))
    return d < lt.LOGITS_TOLERANCE / 10, (f"float32 against float64: largest logit difference "
                                          f"{d:.2g} (< {lt.LOGITS_TOLERANCE / 10:.2g})")


def self_check():
    """Each configuration through (a)-(j): what can be checked of the reference without bora."""
    ok = True
    for n, name in enumerate(CONFIGS):
        _, c, p, ids, targets, gen = make_case(name, n)
        check_params(p, c)
        results = [("(a) kv cache", lt.check_cache(p, c, ids, fwd=forward)),
                   ("(b) gqa", lt.check_gqa(p, c, ids, fwd=forward)),
                   ("(c) gradients", lt.check_gradients(p, c, ids, targets, gen, fwd=forward)),
                   ("(d) window", check_window_reach(p, c, ids)),
                   ("(e) rope", check_rope_pair(CONFIGS[name], c)),
                   ("(f) q/k norm", lt.check_qk_norm(p, c, ids, fwd=forward)),
                   ("(g) documents", lt.check_segments(p, c, ids, fwd=forward)),
                   ("(h) soft-caps", check_softcap(p, c, ids)),
                   ("(i) features", check_features(p, c, ids)),
                   ("(j) float32", check_conditioning(p, c, ids))]
        for what, (good, text) in results:
            print(f"{name:14s} {what:16s} {'ok  ' if good else 'FAIL'} {text}")
            ok &= good
    print("gemma_torch --self-check: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    lt.main("gemma_torch", __doc__, write_case, self_check, compare)
