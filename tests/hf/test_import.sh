#!/bin/sh
# Hugging Face folders as a user meets them: folders written by PyTorch in transformers' layout
# (config.json with its metadata and dropouts, bf16 weights in three shards with
# model.safetensors.index.json, or one f16 model.safetensors; tests/hf/hf_torch.py) for GPT-2,
# Llama and Qwen3 are imported by `bora import`; `bora eval --hf` on them gives the loss of the
# float64 PyTorch references on the folder's own weights, and the same as `bora eval
# --checkpoint` of the import; `bora generate --hf` the same tokens as the import; a run with
# trainer.initialize_from_hf has the eval's loss at its first step (the same batch). Bad
# folders are refused naming the file, key or tensor, with nothing left at --out.
# usage: test_import.sh BORA PLUGIN_DIR TOKENIZER WORK_DIR HF_TORCH_PY MODELS_DIR OLD_ABI_PLUGINS
set -u
bora=$1 plugins=$2 tok=$3 work=$4 ref=$5 models=$6 old_abi=$7
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
export XDG_CACHE_HOME="$work/cache" BORA_NO_PROGRESS=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
hf() { PYTHONPATH="$models" "$py" "$ref" "$@"; }
# validation = training data: 24 short documents of plain ASCII
"$py" -c "
import json, random
r = random.Random(3)
words = 'the of and to in a is that for it as was with be by on not he this are or his'.split()
for i in range(24):
    print(json.dumps({'text': ' '.join(r.choice(words) for _ in range(12 + i % 7))}))" > val.jsonl

hf write-tests . "$tok" || fail "hf_torch.py write-tests"
refs=""
for kind in gpt2 llama qwen3; do
    case $kind in gpt2) T=32 model="" ;; *) T=16 model="model: {seq_len: 16}" ;; esac
    cat > $kind.yaml <<YAML
$model
optimizer: {type: adamw, learning_rate: 1e-3, warmup: 0}
data: {train_urls: [$work/val.jsonl], validation_urls: [$work/val.jsonl]}
trainer:
  num_train_steps: 2
  train_batch_size: 4
  max_eval_batches: 1
  steps_per_eval: 100
  num_threads: 1
  id: $kind
  initialize_from_hf: $work/$kind
  checkpointer: {base_path: $work/runs}
  tracker: [{type: jsonl, path: $work/$kind.jsonl}]
YAML
    # 1. import
    out=$(B import $kind --out $kind.ckpt 2>&1) || fail "import $kind: $out"
    case $kind in
    qwen3) has "$out" "reading model.safetensors (1 of 1)" ;;
    *) has "$out" "reading model-00003-of-00003.safetensors (3 of 3)" ;;
    esac
    [ -f $kind.ckpt/model.safetensors ] && [ -f $kind.ckpt/trainer.json ] &&
        [ ! -e $kind.ckpt/optimizer.safetensors ] || fail "$kind.ckpt: $(ls $kind.ckpt)"
    [ "$kind" = gpt2 ] && has "$out" "note: gpt2/config.json: attn_pdrop is 0.1: bora trains GPT-2 without dropout"
    # 2. eval --hf against the float64 reference over every window, and against the import
    B eval $kind.yaml --hf $kind --json --trainer.max_eval_batches=-1 > $kind.all.json 2> err.txt ||
        fail "eval --hf $kind: $(cat err.txt)"
    refs="$refs $kind val.jsonl $T $kind.all.json"
    B eval $kind.yaml --hf $kind --json > a.json 2> err.txt || fail "eval --hf: $(cat err.txt)"
    B eval $kind.yaml --checkpoint $kind.ckpt --json > b.json 2> err.txt ||
        fail "eval --checkpoint: $(cat err.txt)"
    a=$(cat a.json) b=$(cat b.json)
    [ "${a#*eval/loss}" = "${b#*eval/loss}" ] || fail "$kind: eval --hf $a, of the import $b"
    # 3. generate: the folder and its import give the same tokens
    g1=$(B generate --hf $kind --prompt "the of" --max-tokens 8 --temperature 0 --ids 2>&1) ||
        fail "generate --hf $kind: $g1"
    g2=$(B generate --checkpoint $kind.ckpt --prompt "the of" --max-tokens 8 --temperature 0 \
        --ids 2>&1) || fail "generate --checkpoint $kind.ckpt: $g2"
    [ "$(echo "$g1" | grep '^ids')" = "$(echo "$g2" | grep '^ids')" ] && has "$g1" "ids: [" ||
        fail "$kind: generate --hf and of the import differ: $g1 / $g2"
    # 4. fine-tune from the folder: step 1's loss is the eval's on the same 4 windows
    out=$(B train $kind.yaml 2>&1) || fail "train $kind: $out"
    has "$out" "starting run $kind from the Hugging Face weights in $work/$kind"
    first=$("$py" -c "
import json
for l in open('$kind.jsonl'):
    r = json.loads(l)
    if r.get('step') == 1 and 'train/loss' in r.get('metrics', {}):
        print(repr(r['metrics']['train/loss']))")
    want=$("$py" -c "import json; print(repr(json.load(open('a.json'))['eval/loss']))")
    "$py" -c "import sys; a, b = float('$first'), float('$want'); sys.exit(abs(a - b) > 1e-6 * abs(b))" ||
        fail "$kind: step 1 loss $first, eval --hf $want"
done

# shellcheck disable=SC2086
hf eval $refs || fail "bora eval --hf differs from PyTorch"

# the same GPT-2 saved from the base model alone, as openai-community/gpt2 is (no "transformer."
# prefix, causal-mask buffers): the same weights, so the same loss
mkdir gpt2-base && hf write gpt2-base gpt2-base "$tok" --shards 2 || fail "hf_torch.py write gpt2-base"
B eval gpt2.yaml --hf gpt2-base --json > c.json 2> err.txt || fail "eval --hf gpt2-base: $(cat err.txt)"
B eval gpt2.yaml --hf gpt2 --json > d.json 2> err.txt || fail "eval --hf gpt2: $(cat err.txt)"
a=$(cat c.json) b=$(cat d.json)
[ -n "$a" ] && [ "${a#*eval/loss}" = "${b#*eval/loss}" ] || fail "gpt2-base: eval $a, gpt2's $b"

# 5. a model: key that disagrees with config.json is refused by name
out=$(B eval llama.yaml --hf llama --json --model.hidden_size=64 2>&1) && fail "hidden_size 64 accepted"
has "$out" "model.hidden_size: the configuration says 64, but llama/config.json makes it 32"

# 6. bad folders: each refused naming what is wrong, nothing at --out
bad() { # bad NAME EXPECTED: import copy NAME must fail saying EXPECTED
    out=$(B import $1 --out $1.ckpt 2>&1) && fail "$1 imported"
    has "$out" "$2"
    [ -e $1.ckpt ] && fail "$1: --out was made"
    ls -a | grep -q "tmp-import" && fail "$1: a temporary directory was left: $(ls -a)"
}
edit() { # edit SRC NAME PYTHON: a copy of SRC as NAME, with PYTHON run in it (c: config.json)
    cp -r $1 $2 && (cd $2 && "$py" -c "
import json
c = json.load(open('config.json'))
$3
json.dump(c, open('config.json', 'w'))") || fail "edit $2"
}
edit llama missing "import os; os.remove('model-00002-of-00003.safetensors')"
bad missing "lists shard model-00002-of-00003.safetensors, which is missing"
edit llama twice "
t = open('model.safetensors.index.json').read()
open('model.safetensors.index.json', 'w').write(t.replace('\"weight_map\": {', '\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00003.safetensors\", ', 1))"
bad twice "weight_map names tensor 'model.norm.weight' twice"
edit llama shape "c['intermediate_size'] = 48"
bad shape "tensor 'model.layers.0.mlp.gate_proj.weight' is [64, 32], model llama (from config.json) has [48, 32]"
edit llama bert "c['model_type'] = 'bert'"
bad bert "model_type 'bert' is not a model bora has"
edit llama quant "c['quantization_config'] = {'quant_method': 'gptq', 'bits': 4}"
bad quant "quant/config.json: key 'quantization_config' is not one bora's llama reads"
edit llama rope "c['rope_scaling'] = {'rope_type': 'longrope', 'factor': 2.0}"
bad rope "rope/config.json: model llama: "
has "$out" "model.rope_scaling.rope_type: 'longrope' is not one of"
edit llama mistral "c['model_type'] = 'mistral'"
bad mistral "key 'attention_bias' is not one bora's mistral reads"
edit llama tp "c['pretraining_tp'] = 2"
bad tp "pretraining_tp is 2; bora's llama takes only 1"
edit llama short "
f = 'model-00003-of-00003.safetensors'
b = open(f, 'rb').read()
open(f, 'wb').write(b[:-100])"
bad short "short/model-00003-of-00003.safetensors"
edit llama extra "
t = json.load(open('model.safetensors.index.json'))
t['weight_map']['lm_head.bias'] = 'model-00001-of-00003.safetensors'
json.dump(t, open('model.safetensors.index.json', 'w'))"
bad extra "lists tensor 'lm_head.bias', which is no parameter of model llama"
edit gpt2 inner "c['n_inner'] = 128"
out=$(B import inner --out inner.ckpt 2>&1) || fail "n_inner 128 (4 x n_embd) refused: $out"
grep -q '"mlp_scale":4' inner.ckpt/trainer.json || fail "n_inner 128 is not mlp_scale 4"
edit gpt2 inner100 "c['n_inner'] = 100"
bad inner100 "inner100/config.json: n_inner is 100, not a whole multiple of n_embd (32)"
# a model plugin built for ABI 1.9 loads, and import refuses it for having no table
edit llama old "c['model_type'] = 'oldabi'"
out=$("$bora" --plugin-dir "$old_abi" --plugin-dir "$plugins" plugins model oldabi 2>&1) ||
    fail "the ABI 1.9 model plugin does not load: $out"
has "$out" "1.9"
out=$("$bora" --plugin-dir "$old_abi" --plugin-dir "$plugins" import old --out old.ckpt 2>&1) &&
    fail "a model without hf_keys imported"
has "$out" "model oldabi (plugin"
has "$out" "declares no config.json keys (bora_model_ops.hf_keys, plugin ABI 1.10)"
[ -e old.ckpt ] && fail "old: --out was made"
out=$(B import llama --out llama.ckpt 2>&1) && fail "import over an existing directory"
has "$out" "llama.ckpt exists"

[ $fails -eq 0 ] && echo "test_import: all passed"
exit $((fails > 0))
