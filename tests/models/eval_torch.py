"""tests/models/eval_torch.py — the validation loss and bits per byte of a checkpoint, computed
by an independent GPT-2 (gpt2_torch.py's, in float64) with the loader's rules written out
again: each document's bytes (the bytes tokenizer: id = byte) then the end-of-text id, all
joined; window w is tokens [wT, (w+1)T) with the next tokens as targets, nothing predicted
after an end-of-text, attention inside a document. Compares with `bora eval --json`.

usage: /usr/bin/python3 eval_torch.py CHECKPOINT_DIR VALIDATION.jsonl EOS_ID MAX_SEQUENCES BORA_JSON"""
import json
import math
import sys

from gpt2_torch import read_safetensors, gpt2, torch


def main(d, val, eos, max_seqs, bora):
    conf = json.load(open(f"{d}/trainer.json"))["config"]["model"]
    cfg = {"n_embd": conf["hidden_dim"], "n_head": conf["num_heads"], "n_layer": conf["num_layers"],
           "layer_norm_epsilon": conf["layer_norm_epsilon"]}
    T = conf["seq_len"]
    params = {k: v.double() for k, v in read_safetensors(f"{d}/model.safetensors").items()}
    stream = []
    for line in open(val, encoding="utf-8"):
        if line.strip():
            stream += list(json.loads(line)["text"].encode("utf-8")) + [eos]
    windows = (len(stream) - 1) // T
    if max_seqs > 0:
        windows = min(windows, max_seqs)
    total, tokens, nbytes = 0.0, 0, 0
    with torch.no_grad():
        for w0 in range(0, windows, 64):
            rows = range(w0, min(w0 + 64, windows))
            ids = torch.tensor([stream[w * T:(w + 1) * T] for w in rows], dtype=torch.long)
            nxt = torch.tensor([stream[w * T + 1:(w + 1) * T + 1] for w in rows], dtype=torch.long)
            ends = ids == eos
            seg = torch.cumsum(ends.long(), dim=1) - ends.long()  # a document's id inside a row
            logp = torch.log_softmax(gpt2(params, cfg, ids, seg), dim=-1)
            ce = -logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
            keep = ~ends
            total += float(ce[keep].sum())
            tokens += int(keep.sum())
            nbytes += int((keep & (nxt != eos)).sum())  # a byte token is one byte, eos none
    loss, bpb = total / tokens, total / math.log(2) / nbytes
    got = json.loads(bora)
    print(f"torch: loss {loss:.7f} bpb {bpb:.7f} over {windows} sequences, {tokens} tokens, "
          f"{nbytes} bytes; bora: loss {got['eval/loss']:.7f} bpb {got['eval/bpb']:.7f}, "
          f"{got['sequences']} sequences, {got['tokens']} tokens, {got['bytes']} bytes")
    ok = (got["sequences"], got["tokens"], got["bytes"]) == (windows, tokens, nbytes)
    # f32 against f64 over a few thousand tokens: the means agree to about 1e-6
    for name, ref in (("eval/loss", loss), ("eval/bpb", bpb)):
        if abs(got[name] - ref) > 2e-5 * abs(ref):
            print(f"{name}: bora {got[name]!r}, torch {ref!r}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    a = sys.argv
    sys.exit(main(a[1], a[2], int(a[3]), int(a[4]), a[5]))
