#!/bin/sh
# The Llama reference's comparison mode, as bora's dumps will meet it: each self-check
# configuration written as a DIR (config.json, weights, inputs, f32 outputs) must pass; a
# gradient, the logits or the loss moved must fail naming what moved; bad weights or config
# must be refused naming the tensor or key.
# usage: check_llama_torch_compare.sh SCRIPT
set -eu
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }

"$py" "$script" --write-case all "$tmp" > /dev/null
"$py" "$script" "$tmp"/llama2 "$tmp"/llama3 "$tmp"/yarn "$tmp"/mistral "$tmp"/qwen2 \
    "$tmp"/qwen3 > "$tmp/out" || { cat "$tmp/out"; echo "FAIL: a configuration failed"; exit 1; }
test "$(grep -c "all checks passed" "$tmp/out")" = 6

# Broken copies of the qwen3 and llama3 DIRs, each with one change to the files bora would write.
"$py" - "$script" "$tmp" <<'PY'
import os, shutil, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
import llama_torch
tmp = sys.argv[2]
def broken(name, file, change):
    d = f"{tmp}/{name}"
    shutil.copytree(f"{tmp}/qwen3", d)
    t = llama_torch.read_safetensors(f"{d}/{file}")
    change(t)
    llama_torch.write_safetensors(f"{d}/{file}", t)
def grad(t):
    g = t["grad.model.layers.1.mlp.up_proj.weight"]
    g[0, 0] += 0.01 * g.abs().max()
broken("grad", "outputs.safetensors", grad)
broken("logits", "outputs.safetensors", lambda t: t["logits"][1, 5].add_(1e-3))
broken("loss", "outputs.safetensors", lambda t: t["loss_sum"].mul_(1.0001))
broken("missing", "model.safetensors", lambda t: t.pop("model.layers.0.self_attn.k_norm.weight"))
broken("tied", "model.safetensors", lambda t: t.update({"lm_head.weight": t["model.norm.weight"]}))
broken("heads", "model.safetensors", lambda t: None)
cfg = open(f"{tmp}/heads/config.json").read()
cfg = cfg.replace('"num_key_value_heads": 2', '"num_key_value_heads": 3')
open(f"{tmp}/heads/config.json", "w").write(cfg)
shutil.copytree(f"{tmp}/llama3", f"{tmp}/rope")
cfg = open(f"{tmp}/rope/config.json").read().replace('"low_freq_factor"', '"low_frequency"')
open(f"{tmp}/rope/config.json", "w").write(cfg)
shutil.copytree(f"{tmp}/llama3", f"{tmp}/json")
open(f"{tmp}/json/config.json", "a").write(",")
PY

# expect NAME TEXT: the comparison of broken copy NAME fails, says TEXT, and does not crash
expect() {
    if "$py" "$script" "$tmp/$1" > "$tmp/out" 2>&1; then
        cat "$tmp/out"; echo "FAIL: $1 passed, wanted: $2"; exit 1
    fi
    grep -qF "$2" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: $1, wanted: $2"; exit 1; }
    if grep -q Traceback "$tmp/out"; then cat "$tmp/out"; echo "FAIL: $1 crashed"; exit 1; fi
}
expect grad "gradient of model.layers.1.mlp.up_proj.weight: largest difference"
expect logits "logits: largest difference 0.001"
expect loss "relative 0.0001"
expect missing "tensor model.layers.0.self_attn.k_norm.weight is missing"
expect tied "tensor lm_head.weight is not a parameter of this config (tie_word_embeddings is true"
expect heads "config.json: num_key_value_heads 3 must divide num_attention_heads 4"
expect rope "config.json: rope_scaling.low_freq_factor must be a positive number for rope_type"
expect json "config.json: not JSON"
echo "llama reference comparison: passes on six configurations, fails on each change"
