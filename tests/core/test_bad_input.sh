#!/bin/sh
# Mistakes on the command line and in a configuration as a user meets them, each refused before
# any training with a message that names the option, key or file: options a command does not
# take (with the closest one suggested), an empty --model.type=, integers out of range or not
# whole (and whole ones in exponent form accepted), values outside a key's range (gradient
# clipping, GPT-2's initialisation and LayerNorm epsilon, AdamW's betas, epsilon and weight
# decay), bora runs --db given a directory, and a tokenizer.json.gz cut short or corrupted.
# usage: test_bad_input.sh BORA PLUGIN_DIR TOKENIZER WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
lacks() { case $1 in *"$2"*) fail "did not expect '$2' in:
$1" ;; esac; }
i=0
while [ $i -lt 40 ]; do
    echo "the quick brown fox jumps over the lazy dog, line $i" >> text.txt
    i=$((i + 1))
done
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 8, hidden_dim: 8, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, warmup: 1}
data: {train_urls: [$work/text.txt], tokenizer: $tok}
trainer:
  num_train_steps: 1
  train_batch_size: 2
  num_threads: 1
  tracker: []
  checkpointer: {base_path: $work/ckpt}
YAML
b() { "$bora" --plugin-dir "$plugins" "$@" 2>&1; }
# Refused: exit status 1 or 2, never a checkpoint.
refused() {
    out=$(b "$@") && fail "accepted: bora $*
$out"
    ! ls -d ckpt/*/step-* > /dev/null 2>&1 || fail "bora $* trained (a checkpoint exists)"
    rm -rf ckpt
}

# 1. options a command does not take: "unknown option", not "needs a value"
refused train run.yaml --frobnicate
has "$out" "unknown option '--frobnicate'"
lacks "$out" "needs a value"
refused train --forse run.yaml
has "$out" "unknown option '--forse'; did you mean '--force'?"
lacks "$out" "unexpected argument 'run.yaml'" # the file is not taken as --forse's value
refused train run.yaml --force=yes
has "$out" "--force takes no value (give it as --force alone)"
refused eval run.yaml --checkpoint ckpt --jsn
has "$out" "unknown option '--jsn'; did you mean '--json'?"
refused cache run.yaml --rebiuld
has "$out" "did you mean '--rebuild'?"
refused cache run.yaml --workers=0 # an option's value given with '=' is its value
has "$out" "--workers: '0' is not a number in 1..256"
lacks "$out" "takes no value"
out=$(b cache run.yaml --workers=1) || fail "bora cache --workers=1 refused:
$out"
rm -rf ckpt
refused config show run.yaml --jsonn
has "$out" "did you mean '--json'?"
refused graph run.yaml --plugin-dri x
has "$out" "did you mean '--plugin-dir'?"
refused runs --bd x.db
has "$out" "runs: unknown option '--bd'; did you mean '--db'?"
out=$("$bora" --verison 2>&1) && fail "bora --verison accepted"
has "$out" "did you mean '--version'?"
refused train run.yaml --trainer=3 # a section: still explained as one
has "$out" "'trainer' is a whole section; override one key"

# 2. an empty --model.type= is blamed on the override, not on the file
refused train run.yaml --model.type=
has "$out" "command-line override --model.type: model.type: is empty; name the model to use"
lacks "$out" "run.yaml:1:1"

# 3. integers: whole values in exponent form are integers; beyond int64 or fractional are not
out=$(b config show run.yaml --json --trainer.seed=1e16 --trainer.max_eval_batches=4e18 \
    --trainer.steps_per_eval=1.5e3) || fail "exponent integers refused: $out"
has "$out" '"seed":10000000000000000'
has "$out" '"max_eval_batches":4000000000000000000'
has "$out" '"steps_per_eval":1500'
sed 's/num_train_steps: 1$/num_train_steps: 1e19/' run.yaml > range.yaml
refused train range.yaml
has "$out" "range.yaml:5:20: trainer.num_train_steps: expected an integer, got '1e19' (out of range"
refused train run.yaml --trainer.seed=99999999999999999999
has "$out" "--trainer.seed: trainer.seed: expected an integer, got '99999999999999999999' (out of range"
refused train run.yaml --trainer.seed=1.5
has "$out" "trainer.seed: expected an integer, got '1.5' (not a whole number)"

# 4. values outside a key's range
refused train run.yaml --optimizer.max_grad_norm=-1
has "$out" "--optimizer.max_grad_norm: optimizer.max_grad_norm: -1 is not allowed"
refused train run.yaml --model.initializer_range=-0.02
has "$out" "model.initializer_range: -0.02 is not a standard deviation"
refused train run.yaml --model.layer_norm_epsilon=0
has "$out" "model.layer_norm_epsilon: 0 would let LayerNorm divide by zero"
refused train run.yaml --optimizer.beta1=1
has "$out" "optimizer.beta1: 1 is not in [0, 1)"
refused train run.yaml --optimizer.beta2=-0.5
has "$out" "optimizer.beta2: -0.5 is not in [0, 1)"
refused train run.yaml --optimizer.epsilon=0
has "$out" "optimizer.epsilon: 0 is not a number above 0"
refused train run.yaml --optimizer.weight_decay=-0.1
has "$out" "optimizer.weight_decay: -0.1 is not 0 or more"
# the edges stay allowed: no clipping, zero initialisation, beta 0
out=$(b train run.yaml --optimizer.max_grad_norm=0 --optimizer.beta1=0 \
    --model.initializer_range=0 --trainer.id=edges) || fail "edge values refused: $out"
rm -rf ckpt

# 5. bora runs --db takes the database file
mkdir -p runs
refused runs --db runs
has "$out" "runs: runs is a directory; --db takes the database file, e.g. runs/bora.db"
lacks "$out" "disk I/O error"
refused runs --db
has "$out" "--db needs the database file"

# 6. a tokenizer.json.gz cut short, or with a wrong checksum
gzip -c "$tok" > whole.json.gz
size=$(wc -c < whole.json.gz)
head -c $((size / 2)) whole.json.gz > tokenizer.json.gz
out=$(echo hi | b tokenize --tokenizer tokenizer.json.gz) && fail "truncated gzip accepted: $out"
has "$out" "tokenizer.json.gz: truncated gzip stream"
lacks "$out" "JSON"
cp whole.json.gz crc.json.gz
printf '\377\377\377\377' | dd of=crc.json.gz bs=1 seek=$((size - 8)) conv=notrunc 2>/dev/null
out=$(echo hi | b tokenize --tokenizer crc.json.gz) && fail "bad CRC accepted: $out"
has "$out" "crc.json.gz: corrupt gzip stream (incorrect data check)"
out=$(echo hi | b tokenize --tokenizer whole.json.gz) || fail "whole gzip refused: $out"
has "$out" "[104,105]"

[ $fails -eq 0 ] && echo "bad input: all refused as expected" && rm -rf "$work"
exit $((fails > 0))
