"""tests/models/generate_torch.py — greedy decoding by an independent GPT-2 (gpt2_torch.py's, in
float64) from a checkpoint's weights and configuration, compared token by token with what
`bora generate --temperature 0` produced. Each step feeds the last seq_len tokens, as bora does;
decoding stops at the end-of-text id.

usage: /usr/bin/python3 generate_torch.py CHECKPOINT_DIR PROMPT_LEN EOS_ID MAX_TOKENS IDS..."""
import json
import sys

from gpt2_torch import read_safetensors, gpt2, torch


def main(d, prompt_len, eos, max_tokens, bora_ids):
    conf = json.load(open(f"{d}/trainer.json"))["config"]["model"]
    cfg = {"n_embd": conf["hidden_dim"], "n_head": conf["num_heads"], "n_layer": conf["num_layers"],
           "layer_norm_epsilon": conf["layer_norm_epsilon"]}
    T = conf["seq_len"]
    params = {k: v.double() for k, v in read_safetensors(f"{d}/model.safetensors").items()}
    ids = list(bora_ids[:prompt_len])
    with torch.no_grad():
        for _ in range(max_tokens):
            window = torch.tensor([ids[-T:]], dtype=torch.long)
            logits = gpt2(params, cfg, window)[0, -1]
            top2 = torch.topk(logits, 2).values
            nxt = int(torch.argmax(logits))
            if nxt == eos:
                break
            ids.append(nxt)
            if top2[0] - top2[1] < 1e-4:
                print(f"note: a near tie at token {len(ids)} ({(top2[0] - top2[1]).item():.2g})")
    same = ids == list(bora_ids)
    print(f"torch: {len(ids) - prompt_len} tokens; bora: {len(bora_ids) - prompt_len}; "
          f"{'the same ids' if same else 'DIFFERENT ids'}")
    if not same:
        print(f"torch {ids}\nbora  {list(bora_ids)}")
    return 0 if same else 1


if __name__ == "__main__":
    a = sys.argv
    sys.exit(main(a[1], int(a[2]), int(a[3]), int(a[4]), [int(x) for x in a[5:]]))
