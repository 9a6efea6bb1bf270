"""tests/models/whisper_torch.py — an independent Whisper, written with PyTorch the way Hugging
Face's WhisperForConditionalGeneration computes it (modeling_whisper.py), run in float64 on the
weights of a case (model.safetensors, Hugging Face's names and layouts: nn.Linear (out, in),
nn.Conv1d (out, in, kernel)) and compared with bora's logits, loss and every gradient
(outputs.safetensors, written by tests/models/whisper_dump.c).

What Hugging Face's code does, and this reference with it:
- Encoder: gelu(conv1(x)) with kernel 3 and padding 1, gelu(conv2(.)) with kernel 3, stride 2 and
  padding 1 (nn.functional.gelu, the exact erf form, whatever activation_function says), then
  (batch, source, d_model) plus model.encoder.embed_positions.weight, a frozen table
  (requires_grad False) that transformers fills with sinusoids(max_source_positions, d_model).
  The input must have 2 * max_source_positions frames.
- Blocks are pre-LayerNorm (eps 1e-5): x + attn(LN(x)), then x + fc2(act(fc1(LN(x)))); the
  decoder's add cross-attention between the two, over the encoder's final LayerNorm output.
- Attention: q_proj, v_proj and out_proj have biases, k_proj none; q is scaled by
  head_dim ** -0.5; the encoder's self-attention and the cross-attention are not masked, the
  decoder's self-attention is causal.
- Decoder: embed_tokens(ids) (times sqrt(d_model) with scale_embedding) plus
  embed_positions.weight[:T]; the logits are proj_out, tied to embed_tokens.
- Loss: the cross-entropy summed over the targets that are not -100 (targets already shifted:
  HF's mean times the number counted).
- embed_tokens has padding_idx = pad_token_id in transformers, which only zeroes that row's
  gradient from the lookup; the cases never feed that token where a counted target depends on
  it, so the gradient is the same either way.

Tolerances against bora (float32): logits 2e-4 absolute; the summed loss 1e-5 relative; each
gradient tensor's largest difference within 2e-3 of its largest magnitude; the frozen table's
gradient exactly zero (bora gives it none).

usage: /usr/bin/python3 whisper_torch.py DIR...   each DIR holds config.json, model.safetensors,
                                                  inputs.safetensors (input_features, input_ids,
                                                  targets) and outputs.safetensors
       /usr/bin/python3 whisper_torch.py --write-case NAME DIR
                                                  writes a case (tiny, tiny_tanh,
                                                  tiny_recompute; all: each as DIR/NAME),
                                                  outputs computed here in f32
       /usr/bin/python3 whisper_torch.py --sinusoids FILE
                                                  FILE (safetensors) holds bora's initial
                                                  "sinusoids" (length, channels): compared with
                                                  transformers' sinusoids() in float32
       /usr/bin/python3 whisper_torch.py --self-check
                                                  checks of the reference itself"""
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the test harness turns 77 into "skipped"
    print(f"skipped: {e} (install python3-torch and python3-numpy)")
    sys.exit(77)

torch.set_default_dtype(torch.float64)
LOGITS_TOLERANCE = 2e-4
DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
FROZEN = "model.encoder.embed_positions.weight"


class InputError(Exception):
    pass


def write_safetensors(path, tensors):
    """F32 for floating tensors, I32 for integer ones."""
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
            raise InputError(f"{path}: tensor {name} has dtype {info['dtype']}")
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


# ---- configuration: WhisperConfig's keys and defaults (openai/whisper-tiny) ----------------------
DEFAULTS = dict(vocab_size=51865, num_mel_bins=80, d_model=384, encoder_layers=4,
                decoder_layers=4, encoder_attention_heads=6, decoder_attention_heads=6,
                encoder_ffn_dim=1536, decoder_ffn_dim=1536, max_source_positions=1500,
                max_target_positions=448, activation_function="gelu", scale_embedding=False)
ACTIVATIONS = {"gelu": lambda x: F.gelu(x), "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
               "relu": F.relu, "silu": F.silu}


def load_config(cfg, where="config.json"):
    if cfg.get("model_type") != "whisper":
        raise InputError(f"{where}: model_type must be whisper")
    c = dict(DEFAULTS)
    c.update({k: v for k, v in cfg.items() if k in DEFAULTS})
    if c["activation_function"] not in ACTIVATIONS:
        raise InputError(f"{where}: activation_function {c['activation_function']!r} is not one "
                         f"of {', '.join(ACTIVATIONS)}")
    return c


def param_shapes(c):
    d, M = c["d_model"], c["num_mel_bins"]
    s = {"model.encoder.conv1.weight": (d, M, 3), "model.encoder.conv1.bias": (d,),
         "model.encoder.conv2.weight": (d, d, 3), "model.encoder.conv2.bias": (d,),
         FROZEN: (c["max_source_positions"], d),
         "model.decoder.embed_tokens.weight": (c["vocab_size"], d),
         "model.decoder.embed_positions.weight": (c["max_target_positions"], d)}

    def ln(name):
        s[name + ".weight"] = (d,)
        s[name + ".bias"] = (d,)

    def attn(prefix):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[f"{prefix}.{proj}.weight"] = (d, d)
            if proj != "k_proj":
                s[f"{prefix}.{proj}.bias"] = (d,)

    def mlp(prefix, ffn):
        s[prefix + ".fc1.weight"], s[prefix + ".fc1.bias"] = (ffn, d), (ffn,)
        s[prefix + ".fc2.weight"], s[prefix + ".fc2.bias"] = (d, ffn), (d,)

    for side in ("encoder", "decoder"):
        for l in range(c[side + "_layers"]):
            p = f"model.{side}.layers.{l}"
            ln(p + ".self_attn_layer_norm")
            attn(p + ".self_attn")
            if side == "decoder":
                ln(p + ".encoder_attn_layer_norm")
                attn(p + ".encoder_attn")
            ln(p + ".final_layer_norm")
            mlp(p, c[side + "_ffn_dim"])
        ln(f"model.{side}.layer_norm")
    return s


def check_params(p, c, where="model.safetensors"):
    want = param_shapes(c)
    missing, extra = sorted(set(want) - set(p)), sorted(set(p) - set(want))
    if missing or extra:
        raise InputError(f"{where}: tensors missing {missing[:4]}, unexpected {extra[:4]}")
    for k, shape in want.items():
        if tuple(p[k].shape) != shape:
            raise InputError(f"{where}: {k} is {tuple(p[k].shape)}, want {shape}")


def sinusoids(length, channels, max_timescale=10000):
    """transformers' sinusoids(), float32 as there."""
    inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2, dtype=torch.int64).float())
    scaled = torch.arange(length, dtype=torch.int64).float().view(-1, 1) * inv.view(1, -1)
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


# ---- the model --------------------------------------------------------------------------------------
def linear(p, name, x, bias=True):
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if bias else y


def layer_norm(p, name, x):
    return F.layer_norm(x, x.shape[-1:], p[name + ".weight"], p[name + ".bias"], 1e-5)


def heads(x, H):  # (B, L, d) -> (B, H, L, hd)
    B, L, d = x.shape
    return x.view(B, L, H, d // H).transpose(1, 2)


def attention(p, prefix, h, kv, H, causal, cache=None, start=0):
    """WhisperAttention: q from h, k and v from kv (h itself for self-attention); cache, a dict,
    keeps the keys and values (self: appended per step; cross: computed once)."""
    hd = h.shape[-1] // H
    q = heads(linear(p, prefix + ".q_proj", h) * hd ** -0.5, H)
    if not causal and cache is not None and "k" in cache and kv is None:  # cross: cached
        k, v = cache["k"], cache["v"]
    else:
        src = h if kv is None or kv is h else kv
        k = heads(linear(p, prefix + ".k_proj", src, bias=False), H)
        v = heads(linear(p, prefix + ".v_proj", src), H)
        if cache is not None and causal:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        elif cache is not None:
            cache["k"], cache["v"] = k, v
    s = q @ k.transpose(-1, -2)
    if causal:
        T, S = q.shape[2], k.shape[2]
        qpos = torch.arange(T).view(-1, 1) + start
        s = s.masked_fill(torch.arange(S).view(1, -1) > qpos, float("-inf"))
    o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(h.shape)
    return linear(p, prefix + ".out_proj", o)


def encoder(p, c, feats):
    x = F.gelu(F.conv1d(feats, p["model.encoder.conv1.weight"], p["model.encoder.conv1.bias"],
                        padding=1))
    x = F.gelu(F.conv1d(x, p["model.encoder.conv2.weight"], p["model.encoder.conv2.bias"],
                        stride=2, padding=1))
    x = x.permute(0, 2, 1) + p[FROZEN]
    act, H = ACTIVATIONS[c["activation_function"]], c["encoder_attention_heads"]
    for l in range(c["encoder_layers"]):
        pre = f"model.encoder.layers.{l}"
        x = x + attention(p, pre + ".self_attn", layer_norm(p, pre + ".self_attn_layer_norm", x),
                          None, H, causal=False)
        h = layer_norm(p, pre + ".final_layer_norm", x)
        x = x + linear(p, pre + ".fc2", act(linear(p, pre + ".fc1", h)))
    return layer_norm(p, "model.encoder.layer_norm", x)


def decoder(p, c, ids, enc, caches=None, start=0):
    emb = p["model.decoder.embed_tokens.weight"]
    x = emb[ids] * (math.sqrt(c["d_model"]) if c["scale_embedding"] else 1.0)
    x = x + p["model.decoder.embed_positions.weight"][start:start + ids.shape[1]]
    act, H = ACTIVATIONS[c["activation_function"]], c["decoder_attention_heads"]
    for l in range(c["decoder_layers"]):
        pre = f"model.decoder.layers.{l}"
        cs = caches[l] if caches is not None else (None, None)
        x = x + attention(p, pre + ".self_attn", layer_norm(p, pre + ".self_attn_layer_norm", x),
                          None, H, causal=True, cache=cs[0], start=start)
        x = x + attention(p, pre + ".encoder_attn",
                          layer_norm(p, pre + ".encoder_attn_layer_norm", x), enc, H,
                          causal=False, cache=cs[1])
        h = layer_norm(p, pre + ".final_layer_norm", x)
        x = x + linear(p, pre + ".fc2", act(linear(p, pre + ".fc1", h)))
    return layer_norm(p, "model.decoder.layer_norm", x) @ emb.T


def forward(p, c, feats, ids):
    frames = 2 * c["max_source_positions"]
    if feats.shape[1:] != (c["num_mel_bins"], frames):
        raise InputError(f"input_features are {tuple(feats.shape)}, want (batch, "
                         f"{c['num_mel_bins']}, {frames})")
    return decoder(p, c, ids, encoder(p, c, feats))


def loss_sum(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-100, reduction="sum")


# ---- against bora -----------------------------------------------------------------------------------
def compare(d):
    print(f"{d}:")
    with open(f"{d}/config.json") as f:
        c = load_config(json.load(f), f"{d}/config.json")
    params = read_safetensors(f"{d}/model.safetensors")
    check_params(params, c, f"{d}/model.safetensors")
    params = {k: v.double().requires_grad_(k != FROZEN) for k, v in params.items()}
    inputs = read_safetensors(f"{d}/inputs.safetensors")
    ours = read_safetensors(f"{d}/outputs.safetensors")
    for name in ("input_features", "input_ids", "targets"):
        if name not in inputs:
            raise InputError(f"{d}/inputs.safetensors: tensor {name} is missing")
    feats = inputs["input_features"].double()
    ids, targets = inputs["input_ids"].long(), inputs["targets"].long()
    logits = forward(params, c, feats, ids)
    loss = loss_sum(logits, targets)
    loss.backward()
    if ours["logits"].shape != logits.shape:
        raise InputError(f"{d}/outputs.safetensors: logits are {tuple(ours['logits'].shape)}, "
                         f"want {tuple(logits.shape)}")
    dl = (logits.detach() - ours["logits"].double()).abs().max().item()
    print(f"logits: largest difference {dl:.3g}")
    ok = dl < LOGITS_TOLERANCE
    rel = abs(loss.item() - ours["loss_sum"].item()) / abs(loss.item())
    print(f"loss: torch {loss.item():.8f}, bora {ours['loss_sum'].item():.8f}, relative {rel:.3g}")
    ok &= rel < 1e-5
    worst = 0.0
    for name, t in params.items():
        if "grad." + name not in ours:
            print(f"gradient of {name}: missing from {d}/outputs.safetensors")
            ok = False
            continue
        mine = ours["grad." + name].double()
        if name == FROZEN:
            frozen_ok = mine.abs().max().item() == 0
            print(f"gradient of the frozen {name}: {'zero' if frozen_ok else 'NOT zero'}")
            ok &= frozen_ok
            continue
        diff = (t.grad - mine).abs().max().item() / max(t.grad.abs().max().item(), 1e-12)
        worst = max(worst, diff)
        if diff > 2e-3:
            print(f"gradient of {name}: largest difference {diff:.3g} of its scale")
            ok = False
    print(f"gradients: {len(params) - 1} tensors, worst relative difference {worst:.3g}")
    print("whisper_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


def compare_sinusoids(path):
    """bora's table against transformers' float32 sinusoids() and against the same float32 steps
    with each rounded once from the exact value (numpy, in double). torch's float32 exp is not
    correctly rounded (1 ulp off for some channels), and at position 1499 one ulp of a frequency
    near 1 moves the angle by 1.8e-4: so transformers' own table is matched within 2.5e-4, the
    correctly rounded steps within one float32 ulp."""
    got = read_safetensors(path)["sinusoids"].float()
    length, channels = got.shape
    want = sinusoids(length, channels)
    inc = np.log(10000) / (channels // 2 - 1)
    expo = np.float32(-inc) * np.arange(channels // 2).astype(np.float32)
    freq = np.exp(expo.astype(np.float64)).astype(np.float32)
    angle = (np.arange(length).astype(np.float32)[:, None] * freq[None, :]).astype(np.float32)
    steps = np.concatenate([np.sin(angle.astype(np.float64)), np.cos(angle.astype(np.float64))],
                           1).astype(np.float32)
    d = (got - want).abs().max().item()
    d_steps = np.abs(got.numpy() - steps).max()
    d_exact = (got.double() - sinusoids_exact(length, channels)).abs().max().item()
    print(f"sinusoids {tuple(got.shape)}: largest difference from transformers' float32 "
          f"{d:.3g}, from its steps correctly rounded {d_steps:.3g}, from the exact values "
          f"{d_exact:.3g}")
    ok = d <= 2.5e-4 and d_steps <= 1.2e-7
    print("whisper_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


def sinusoids_exact(length, channels):
    inc = math.log(10000) / (channels // 2 - 1)
    t = torch.arange(length).double().view(-1, 1) * torch.exp(-inc * torch.arange(channels // 2))
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


# ---- cases and checks of the reference itself -----------------------------------------------------
BASE = dict(model_type="whisper", vocab_size=60, num_mel_bins=80, d_model=64, encoder_layers=2,
            decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=96, max_source_positions=50,
            max_target_positions=16)
# tiny_recompute: bora's gradient_checkpointing (a bora key the reference ignores: the same
# function, recomputed in bora's backward pass)
CONFIGS = {"tiny": dict(BASE, activation_function="gelu"),
           "tiny_tanh": dict(BASE, activation_function="gelu_new", scale_embedding=True,
                             decoder_attention_heads=2),
           "tiny_recompute": dict(BASE, gradient_checkpointing=True, encoder_layers=3)}
B = 2


def make_case(name, n):
    cfg = CONFIGS[name]
    c = load_config(cfg, f"case {name}")
    gen = torch.Generator().manual_seed(4321 + n)
    p = {}
    for k, shape in param_shapes(c).items():
        r = torch.randn(shape, generator=gen)
        if k == FROZEN:
            p[k] = sinusoids(*shape).double()
        elif k.endswith("layer_norm.weight"):
            p[k] = 1 + 0.2 * r
        elif k.endswith("bias"):
            p[k] = 0.2 * r
        elif "embed" in k:
            p[k] = 0.5 * r
        else:
            fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
            p[k] = r / math.sqrt(fan_in)
    feats = torch.randn(B, c["num_mel_bins"], 2 * c["max_source_positions"], generator=gen)
    T, V = c["max_target_positions"], c["vocab_size"]
    # a start sequence, text, <|endoftext|> (V - 2), then padding (V - 1): -100 where the start
    # sequence would be predicted and on the padding
    ids = torch.randint(V - 4, (B, T), generator=gen)
    ids[:, 0] = V - 3
    ids[0, 11], ids[0, 12:] = V - 2, V - 1
    targets = torch.roll(ids, -1, 1)
    targets[:, -1] = -100
    targets[0, 11:] = -100
    targets[1, 0] = -100
    return cfg, c, p, feats, ids, targets


def write_case(name, d):
    if name == "all":
        return max(write_case(n, f"{d}/{n}") for n in CONFIGS)
    if name not in CONFIGS:
        raise InputError(f"--write-case: {name!r} is not one of {', '.join(CONFIGS)}")
    cfg, c, p, feats, ids, targets = make_case(name, list(CONFIGS).index(name))
    p = {k: v.float().double().requires_grad_(k != FROZEN) for k, v in p.items()}
    feats = feats.float().double()
    logits = forward(p, c, feats, ids)
    loss = loss_sum(logits, targets)
    loss.backward()
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(f"{d}/model.safetensors", p)
    write_safetensors(f"{d}/inputs.safetensors",
                      dict(input_features=feats, input_ids=ids, targets=targets))
    outputs = dict(logits=logits, loss_sum=loss.reshape(()))
    outputs.update({"grad." + k: (v.grad if v.grad is not None else torch.zeros_like(v))
                    for k, v in p.items()})
    write_safetensors(f"{d}/outputs.safetensors", outputs)
    print(f"whisper_torch: wrote {name} to {d}")
    return 0


def self_check():
    """What can be checked of the reference without bora; each check fails on a one-line change
    to the code it guards."""
    ok = True
    for n, name in enumerate(CONFIGS):
        _, c, p, feats, ids, targets = make_case(name, n)
        enc = encoder(p, c, feats)
        full = decoder(p, c, ids, enc)
        # (a) the KV cache: a prefill of 5 then one token at a time equals the whole window
        caches = [({}, {}) for _ in range(c["decoder_layers"])]
        steps = [decoder(p, c, ids[:, :5], enc, caches)]
        for t in range(5, ids.shape[1]):
            steps.append(decoder(p, c, ids[:, t:t + 1], None, caches, start=t))
        da = (torch.cat(steps, 1) - full).abs().max().item()
        # (b) causal: changing the last token moves no earlier logit, and does move its own
        ids2 = ids.clone()
        ids2[:, -1] = (ids2[:, -1] + 1) % c["vocab_size"]
        moved = decoder(p, c, ids2, enc)
        db_before = (moved[:, :-1] - full[:, :-1]).abs().max().item()
        db_last = (moved[:, -1] - full[:, -1]).abs().max().item()
        # (c) the encoder is bidirectional: the last frames move the first source position
        f2 = feats.clone()
        f2[:, :, -4:] += 1
        dc = (encoder(p, c, f2)[:, 0] - enc[:, 0]).abs().max().item()
        # (d) sinusoids as transformers' (float32) against the exact values: within f32 rounding
        dd = (sinusoids(1500, 384).double() - sinusoids_exact(1500, 384)).abs().max().item()
        # (e) gradients against central differences on a few entries
        q = {k: v.clone().requires_grad_(k != FROZEN) for k, v in p.items()}
        loss_sum(forward(q, c, feats, ids), targets).backward()
        worst = 0.0
        for k in ("model.encoder.conv1.weight", "model.decoder.layers.1.encoder_attn.k_proj.weight",
                  "model.encoder.layers.0.self_attn.q_proj.bias"):
            for i in range(3):
                idx = tuple(int(torch.randint(s, (1,), generator=torch.Generator().manual_seed(i)))
                            for s in p[k].shape)
                h = 1e-5
                plus = {kk: vv.detach().clone() for kk, vv in p.items()}
                minus = {kk: vv.detach().clone() for kk, vv in p.items()}
                plus[k][idx] += h
                minus[k][idx] -= h
                fd = (loss_sum(forward(plus, c, feats, ids), targets)
                      - loss_sum(forward(minus, c, feats, ids), targets)).item() / (2 * h)
                worst = max(worst, abs(fd - q[k].grad[idx].item()) / max(abs(fd), 1e-3))
        results = [("(a) kv cache", da < 1e-10, f"{da:.3g}"),
                   ("(b) causal", db_before == 0 and db_last > 1e-3,
                    f"before {db_before:.3g}, last {db_last:.3g}"),
                   ("(c) bidirectional encoder", dc > 1e-6, f"{dc:.3g}"),
                   ("(d) sinusoids f32", 1e-6 < dd < 1e-3, f"{dd:.3g}"),
                   ("(e) gradients", worst < 1e-6, f"{worst:.3g}")]
        for what, good, text in results:
            print(f"{name:10s} {what:26s} {'ok  ' if good else 'FAIL'} {text}")
            ok &= good
    print("whisper_torch --self-check: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    args = sys.argv[1:]
    if not args or (args[0] == "--write-case" and len(args) != 3) or (
            args[0] == "--self-check" and len(args) != 1) or (
            args[0] == "--sinusoids" and len(args) != 2):
        print("usage: " + __doc__.split("usage: ")[1])
        sys.exit(2)
    try:
        if args[0] == "--write-case":
            sys.exit(write_case(args[1], args[2]))
        if args[0] == "--self-check":
            sys.exit(self_check())
        if args[0] == "--sinusoids":
            sys.exit(compare_sinusoids(args[1]))
        sys.exit(max(compare(d) for d in args))
    except (InputError, OSError, KeyError, ValueError) as e:
        print(f"whisper_torch: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
