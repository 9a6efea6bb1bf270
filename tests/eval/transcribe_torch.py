"""tests/eval/transcribe_torch.py — an independent greedy transcription for bora transcribe.

Greedy decoding as Hugging Face's WhisperForConditionalGeneration.generate does it with no logits
processors: the decoder starts from the start sequence, and each step appends the argmax of the
last position's logits, recomputing the whole decoder over every token so far (no cache), until
<|endoftext|>, max_tokens new tokens or max_target_positions tokens in all. The model is
tests/models/whisper_torch.py's float64 Whisper (written from transformers' modeling_whisper.py),
the features tests/data_pipeline/whisper_mel_ref.py's float64 WhisperFeatureExtractor, and the
start sequence and <|endoftext|> are looked up in tokenizer.json here: nothing of bora's.

usage: transcribe_torch.py --write-model DIR TOKENIZER_JSON
           a small Whisper with random weights (seeded) as a Hugging Face folder: config.json,
           model.safetensors, tokenizer.json
       transcribe_torch.py --check DIR MEL_REF MAX_TOKENS BORA_OUTPUT CLIP...
           bora's ids (BORA_OUTPUT holds `bora transcribe --ids` stderr lines "CLIP: ids [...]")
           must equal the reference's for every clip; where they part, the reference's two best
           logits must be within 1e-4 of each other (a tie float32 may break either way), and
           the comparison of that clip stops there.
"""
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import whisper_torch as W  # noqa: E402  (exits 77 without torch)

import numpy as np  # noqa: E402
import torch  # noqa: E402

CONFIG = dict(model_type="whisper", vocab_size=51864, num_mel_bins=80, d_model=32,
              encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=96,
              max_source_positions=150, max_target_positions=24, activation_function="gelu",
              scale_embedding=False)
TIE = 1e-4


def write_model(d, tokenizer):
    c = W.load_config(CONFIG)
    gen = torch.Generator().manual_seed(20261127)
    p = {}
    for k, shape in W.param_shapes(c).items():
        r = torch.randn(shape, generator=gen, dtype=torch.float64)
        if k == W.FROZEN:
            p[k] = W.sinusoids(*shape).double()
        elif k.endswith("layer_norm.weight"):
            p[k] = 1 + 0.2 * r
        elif k.endswith("bias"):
            p[k] = 0.05 * r
        elif k == "model.decoder.embed_positions.weight":
            p[k] = 2 * r  # large enough that each position's token differs
        elif "embed" in k:
            p[k] = r
        else:
            fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
            p[k] = r / math.sqrt(fan_in)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    W.write_safetensors(os.path.join(d, "model.safetensors"), p)
    shutil.copy(tokenizer, os.path.join(d, "tokenizer.json"))


def special_ids(d):
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    # the English-only model's start sequence: <|startoftranscript|> <|notimestamps|>
    return [added["<|startoftranscript|>"], added["<|notimestamps|>"]], added["<|endoftext|>"]


def features(mel_ref, clip, c, work):
    """whisper_mel_ref.py's main() run in this process (one torch import, not one per clip)."""
    frames = 2 * c["max_source_positions"]
    out = os.path.join(work, "features.bin")
    spec = importlib.util.spec_from_file_location("whisper_mel_ref", mel_ref)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    argv, sys.argv = sys.argv, [mel_ref, clip, str(c["num_mel_bins"]), str(frames * 160), out]
    try:
        ref.main()
    finally:
        sys.argv = argv
    a = np.fromfile(out, dtype="<f4").reshape(c["num_mel_bins"], frames)
    return torch.from_numpy(a.astype(np.float64)).unsqueeze(0)


def greedy(p, c, feats, prefix, eot, max_tokens):
    """The new ids, and the margin between the two best logits at each step."""
    enc = W.encoder(p, c, feats)
    ids, new, margins = list(prefix), [], []
    while True:
        logits = W.decoder(p, c, torch.tensor([ids]), enc)[0, -1]
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        nxt = int(torch.argmax(logits))
        if nxt == eot:
            break
        ids.append(nxt)
        new.append(nxt)
        if len(new) >= max_tokens or len(ids) >= c["max_target_positions"]:
            break
    return new, margins


def check(d, mel_ref, max_tokens, bora_out, clips):
    with open(os.path.join(d, "config.json")) as f:
        c = W.load_config(json.load(f))
    p = W.read_safetensors(os.path.join(d, "model.safetensors"))
    p = {k: v.double() for k, v in p.items()}
    W.check_params(p, c)
    prefix, eot = special_ids(d)
    got = {}
    with open(bora_out, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(.*): ids \[(.*)\]$", line.rstrip("\n"))
            if m:
                got[m.group(1)] = [int(x) for x in m.group(2).split(",") if x.strip()]
    bad = 0
    with tempfile.TemporaryDirectory() as work:
        for clip in clips:
            want, margins = greedy(p, c, features(mel_ref, clip, c, work), prefix, eot, max_tokens)
            have = got.get(clip)
            if have is None:
                print(f"{clip}: bora printed no ids")
                bad += 1
                continue
            k = next((i for i in range(min(len(want), len(have))) if want[i] != have[i]),
                     None if len(want) == len(have) else min(len(want), len(have)))
            if k is None:
                print(f"{clip}: {len(want)} ids equal (smallest margin {min(margins):.3g})")
            elif margins[k] < TIE:
                print(f"{clip}: equal up to step {k}, where the reference's two best logits are "
                      f"{margins[k]:.2g} apart (a tie)")
            else:
                print(f"{clip}: bora {have}\n  reference {want}\n  differ at step {k} (margin "
                      f"{margins[k]:.3g})")
                bad += 1
    print(f"transcribe_torch: {len(clips)} clips, {bad} differ")
    return 1 if bad else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--write-model":
        write_model(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) >= 6 and sys.argv[1] == "--check":
        return check(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:])
    print(__doc__)
    return 2


sys.exit(main())
