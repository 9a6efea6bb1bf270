#!/bin/sh
# Sizes as a user meets them: an impossible size (a vocabulary or a batch of 2^62) is refused by
# bora train and bora graph, naming the tensor and the key, before a run directory is made;
# bora train states the memory a run needs (parameters, gradients, optimizer state, arena)
# before allocating, and refuses a run needing more than the memory available, naming the keys
# that drive it, fast (nothing of it allocated); BORA_MEMORY_AVAILABLE states the memory.
# usage: test_sizes.sh BORA PLUGIN_DIR TOKENIZER WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect STATUS NEEDLE COMMAND ARGS...: run bora, check the exit status and that the output has
# NEEDLE (and, on a refusal, that no run directory was made)
expect() {
    want=$1 needle=$2
    shift 2
    out=$("$bora" --plugin-dir "$plugins" "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "bora $*: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "bora $*: no '$needle' in:
$out" ;; esac
    if [ "$want" -ne 0 ] && [ -e ckpt ]; then
        fail "bora $*: refused, but made $(ls ckpt)"
        rm -rf ckpt
    fi
}
i=0
while [ $i -lt 200 ]; do
    echo "The quick brown fox $i jumps over the lazy dog, and the dog sleeps on." >> text.txt
    i=$((i + 1))
done
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/text.txt], tokenizer: $tok}
trainer:
  num_train_steps: 1
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, save_interval: 1h}
YAML
huge=4611686018427387904 # 2^62

# impossible sizes: refused naming the tensor and the key
expect 1 "parameter 'transformer.wte.weight' (vocab=$huge, embed=16) would take more than 2^62 bytes; model.vocab_size ($huge): make it smaller" \
    train run.yaml --model.vocab_size $huge
expect 1 "input 'input_ids' (batch=$huge, position=16) would take more than 2^62 bytes; trainer.train_batch_size ($huge): make it smaller" \
    train run.yaml --trainer.train_batch_size $huge
expect 1 "model.vocab_size (1099511627776), model.hidden_dim (1073741824): make them smaller" \
    train run.yaml --model.vocab_size 1099511627776 --model.hidden_dim 1073741824 \
    --model.num_heads 1
expect 1 "gpt2: hidden_dim $huge with mlp_scale 4 is too large" train run.yaml \
    --model.hidden_dim $huge --model.num_heads 1
expect 1 "trainer.max_eval_batches: $huge batches of 4 sequences is past any count" train \
    run.yaml --trainer.max_eval_batches $huge
expect 1 "model.vocab_size ($huge): make it smaller" graph run.yaml --model.vocab_size $huge
expect 1 "trainer.train_batch_size ($huge): make it smaller" graph run.yaml \
    --trainer.train_batch_size $huge
out=$("$bora" --plugin-dir "$plugins" graph run.yaml --model.vocab_size $huge 2>&1)
case $out in *"shared arena"*) fail "bora graph reported a size for a vocabulary of 2^62: $out" ;; esac

# a normal run states its memory before allocating
expect 0 "memory: 30.0 KiB parameters, 30.0 KiB gradients, 60.0 KiB optimizer state, " \
    train run.yaml --trainer.id=fits
rm -rf ckpt

# about 150 GiB of arena (a micro-batch of 65,536 sequences of 1,024 tokens' logits) against
# 16 GiB: refused, naming the keys, before the arena, the inputs or the rows are allocated
# (the refusal is fast: allocating and zeroing that much would take minutes)
t0=$(date +%s)
export BORA_MEMORY_AVAILABLE=16GiB
expect 1 "than the 16.0 GiB available (BORA_MEMORY_AVAILABLE): the arena grows with trainer.per_device_parallelism (the micro-batch, 65536 sequences; train_batch_size 65536), model.seq_len (1024)" \
    train run.yaml --trainer.train_batch_size 65536 --model.seq_len 1024
elapsed=$(($(date +%s) - t0))
[ "$elapsed" -lt 60 ] || fail "the refusal took ${elapsed} s"
case $out in *"arena"*GiB*) ;; *) fail "no arena in GiB in: $out" ;; esac
unset BORA_MEMORY_AVAILABLE
# without the variable, against the machine's MemAvailable: a petabyte of arena
expect 1 "(MemAvailable): the arena grows with trainer.per_device_parallelism" \
    train run.yaml --trainer.train_batch_size 67108864 --model.seq_len 1024 \
    --model.vocab_size 65536
# the variable states the memory for the whole run: the small run refused under 64 KiB
export BORA_MEMORY_AVAILABLE=64KiB
expect 1 "more than the 64.0 KiB available (BORA_MEMORY_AVAILABLE)" train run.yaml
# a value that is not a size is refused, not dropped for MemAvailable
export BORA_MEMORY_AVAILABLE="64 gigs"
expect 1 "BORA_MEMORY_AVAILABLE: '64 gigs' is not a size" train run.yaml
unset BORA_MEMORY_AVAILABLE
[ "$fails" -eq 0 ]
