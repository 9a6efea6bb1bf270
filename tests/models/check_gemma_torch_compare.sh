#!/bin/sh
# The Gemma reference's comparison mode, as bora's dumps will meet it: each configuration written
# as a DIR (config.json, weights, inputs, f32 outputs) must pass; a gradient or the logits moved
# must fail naming what moved; outputs computed with one feature switched off must fail the
# ablation naming the feature; bad weights or config must be refused naming the tensor or key.
# usage: check_gemma_torch_compare.sh SCRIPT
set -eu
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }

"$py" "$script" --write-case all "$tmp" > /dev/null
"$py" "$script" "$tmp"/gemma "$tmp"/gemma2 "$tmp"/gemma3 "$tmp"/gemma3_softcap > "$tmp/out" ||
    { cat "$tmp/out"; echo "FAIL: a configuration failed"; exit 1; }
test "$(grep -c "all checks passed" "$tmp/out")" = 4

# Broken copies, each with one change to the files bora would write, and outputs of a model
# lacking one feature (as a plugin that forgot it would write them).
"$py" - "$script" "$tmp" > /dev/null <<'PY'
import json, os, shutil, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
import gemma_torch
lt, tmp = gemma_torch.lt, sys.argv[2]
def broken(name, base, file, change):
    d = f"{tmp}/{name}"
    shutil.copytree(f"{tmp}/{base}", d)
    if file.endswith(".json"):
        cfg = json.load(open(f"{d}/{file}"))
        change(cfg)
        json.dump(cfg, open(f"{d}/{file}", "w"))
        return
    t = lt.read_safetensors(f"{d}/{file}")
    change(t)
    lt.write_safetensors(f"{d}/{file}", t)
def grad(t):
    g = t["grad.model.layers.1.post_feedforward_layernorm.weight"]
    g[0] += 0.01 * g.abs().max()
broken("grad", "gemma3", "outputs.safetensors", grad)
broken("logits", "gemma2", "outputs.safetensors", lambda t: t["logits"][1, 5].add_(1e-3))
broken("missing", "gemma3", "model.safetensors",
       lambda t: t.pop("model.layers.0.self_attn.q_norm.weight"))
broken("tied", "gemma2", "model.safetensors",
       lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"]}))
broken("heads", "gemma", "config.json", lambda c: c.update(num_key_value_heads=3))
broken("bidirectional", "gemma3", "config.json",
       lambda c: c.update(use_bidirectional_attention=True))
broken("activation", "gemma2", "config.json", lambda c: c.update(hidden_activation="silu"))
broken("types", "gemma2", "config.json",
       lambda c: c.update(layer_types=["sliding_attention", "full_attention"]))
broken("window", "gemma3", "config.json", lambda c: c.update(sliding_window=None))
broken("rope", "gemma3_softcap", "config.json",
       lambda c: c.update(rope_parameters=dict(full_attention=c.pop("rope_scaling"))))
shutil.copytree(f"{tmp}/gemma", f"{tmp}/json")
open(f"{tmp}/json/config.json", "a").write(",")
for name, feature in (("no_final_softcap", "final_softcap"), ("no_qk_norm", "qk_norm"),
                      ("no_local_rope", "local_rope_base"), ("no_post_norms", "post_norms")):
    base = "gemma2" if feature == "final_softcap" else "gemma3"
    gemma_torch.write_case(base, f"{tmp}/{name}", off=(feature,))
PY

# expect NAME TEXT: the comparison of broken copy NAME fails, says TEXT, and does not crash
expect() {
    if "$py" "$script" "$tmp/$1" > "$tmp/out" 2>&1; then
        cat "$tmp/out"; echo "FAIL: $1 passed, wanted: $2"; exit 1
    fi
    grep -qF "$2" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: $1, wanted: $2"; exit 1; }
    if grep -q Traceback "$tmp/out"; then cat "$tmp/out"; echo "FAIL: $1 crashed"; exit 1; fi
}
expect grad "gradient of model.layers.1.post_feedforward_layernorm.weight: largest difference"
expect logits "logits: largest difference 0.001"
expect missing "tensor model.layers.0.self_attn.q_norm.weight is missing"
expect tied "tensor lm_head.weight is not a parameter of this config (tie_word_embeddings is true"
expect heads "config.json: num_key_value_heads 3 must divide num_attention_heads 4"
expect bidirectional "config.json: use_bidirectional_attention true"
expect activation "config.json: hidden_activation 'silu' is not one of"
expect types "config.json: layer_types must list num_hidden_layers (3) entries"
expect window "config.json: sliding_window must be a positive integer: layers [0, 1, 3] slide"
expect rope "config.json: rope_parameters must hold full_attention and sliding_attention"
expect json "config.json: not JSON"
expect no_final_softcap "ablation: with final_softcap off the logits are within"
expect no_qk_norm "ablation: with qk_norm off the logits are within"
expect no_local_rope "ablation: with local_rope_base off the logits are within"
expect no_post_norms "ablation: with post_norms off the logits are within"
echo "gemma reference comparison: passes on four configurations, fails on each change"
