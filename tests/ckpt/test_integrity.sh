#!/bin/sh
# Checkpoints prove their contents, as a user meets it: a tiny GPT-2 saves step-2 and step-4;
# then bytes flipped in model.safetensors or optimizer.safetensors, two tensors' data_offsets
# swapped, trainer.json's step edited, or a NaN written with its digest rewritten are each
# refused, naming the file and tensor, by resume (which names the newest earlier checkpoint that
# passes, and takes it with --force), `bora eval`, `bora generate` and trainer.load_checkpoint; a
# checkpoint without digests loads with a warning; eval --json writes a non-finite loss as valid
# JSON. One process per run id: a second `bora train` of a running id is refused naming the
# first's pid and host, eval leaves a live save's temporary directory alone, and a checkpoint
# directory that cannot be made is refused before the first step. A run that diverges saves no
# non-finite checkpoint and keeps its last good one; --force sets every failing checkpoint newer
# than the one it resumes from aside; a changed shape key is refused listing the differences,
# never taken for damage; a start that fails after taking the lock leaves no directory behind.
# usage: test_integrity.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR ST_EDIT_PY
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5 edit=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
sed -n '3001,3100p' "$text" | /usr/bin/python3 -c "
import json, sys
for l in sys.stdin:
    if l.strip(): print(json.dumps({'text': l.strip()}))" > val.jsonl
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
E() { /usr/bin/python3 "$edit" "$@" || fail "st_edit.py $*"; }
# expect STATUS NEEDLE... -- ARGS...: run bora ARGS, check the exit status and every NEEDLE
expect() {
    want=$1
    shift
    needles=""
    while [ "$1" != "--" ]; do
        needles="$needles
$1"
        shift
    done
    shift
    out=$(B "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "bora $*: exit $got, want $want; output:
$out"
    echo "$needles" | while IFS= read -r n; do
        [ -z "$n" ] && continue
        case $out in *"$n"*) ;; *) echo "FAIL: bora $*: no '$n' in:
$out" ;; esac
    done | grep FAIL && fails=$((fails + 1))
    return 0
}
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], validation_urls: [$work/val.jsonl], tokenizer: $tok}
trainer:
  num_train_steps: 4
  train_batch_size: 4
  num_threads: 1
  steps_per_eval: 100
  max_eval_batches: 1
  id: a
  checkpointer: {base_path: $work/ckpt, save_interval: 0s, keep: [{every: 2}]}
  tracker: []
YAML
expect 0 "trained 4 steps" -- train run.yaml
[ -d ckpt/a/step-2 ] && [ -d ckpt/a/step-4 ] || fail "no step-2 and step-4: $(ls ckpt/a)"
grep -q '"transformer.wte.weight": "xxh3-64:[0-9a-f]\{16\}"' ckpt/a/step-4/trainer.json ||
    fail "trainer.json records no digest of transformer.wte.weight"
grep -q '"m.transformer.wte.weight": "xxh3-64:' ckpt/a/step-4/trainer.json ||
    fail "trainer.json records no digest of the optimizer state"
# fresh COPY: a copy of the good run as c/a, for one damage
fresh() { rm -rf c && cp -r ckpt c; }
R="--trainer.checkpointer.base_path=$work/c"
# all_refuse NEEDLE...: resume, eval, generate and load_checkpoint each refuse step-4
all_refuse() {
    expect 1 "$@" "pass --force to resume from $work/c/a/step-2 instead" -- train run.yaml "$R"
    expect 1 "$@" -- eval run.yaml --checkpoint c/a
    expect 1 "$@" -- generate --checkpoint c/a/step-4 --prompt "The"
    expect 1 "$@" "trainer.load_checkpoint" -- train run.yaml --trainer.id=b "$R" \
        --trainer.load_checkpoint="$work/c/a/step-4"
}

# 1. flipped bytes in a weight: refused everywhere; --force resumes from step-2
fresh
E flip c/a/step-4 model.safetensors transformer.wte.weight 16
all_refuse "c/a/step-4/model.safetensors: tensor 'transformer.wte.weight' does not match the digest"
expect 0 "resuming from $work/c/a/step-2" "resuming run a from $work/c/a/step-2 (step 2 of 4)" \
    "trained 2 steps" -- train run.yaml "$R" --force
cmp -s ckpt/a/step-4/model.safetensors c/a/step-4/model.safetensors ||
    fail "the run resumed from step-2 does not reach the uninterrupted run's bits"
ls c/a | grep -q '^step-4.damaged' || fail "the damaged step-4 was not kept aside: $(ls c/a)"

# 2. flipped bytes in the optimizer state
fresh
E flip c/a/step-4 optimizer.safetensors v.transformer.h.0.mlp.c_fc.weight 16
expect 1 "c/a/step-4/optimizer.safetensors: tensor 'v.transformer.h.0.mlp.c_fc.weight' does not match the digest" \
    "pass --force to resume from $work/c/a/step-2 instead" -- train run.yaml "$R"

# 3. two same-sized tensors' data_offsets swapped: the header is well-formed, the digests not
fresh
E swap c/a/step-4 model.safetensors transformer.h.0.ln_1.weight transformer.h.0.ln_1.bias
all_refuse "tensor 'transformer.h.0.ln_1." "does not match the digest"

# 4. trainer.json's step is not its directory's
fresh
E step c/a/step-4 3
all_refuse "c/a/step-4/trainer.json records step 3, but its directory is step-4"

# 5. a NaN, its digest rewritten to match: the finiteness check still refuses it
fresh
E set c/a/step-4 model.safetensors transformer.ln_f.weight nan
all_refuse "model.safetensors: tensor 'transformer.ln_f.weight' holds NaN at element 0"
fresh
E set c/a/step-4 optimizer.safetensors m.transformer.wpe.weight inf
expect 1 "optimizer.safetensors: tensor 'm.transformer.wpe.weight' holds an infinity at element 0" \
    -- train run.yaml "$R"

# 6. a checkpoint saved before digests: loads, with one warning
fresh
E nodigests c/a/step-4
expect 0 "c/a/step-4/trainer.json records no digests" "eval of c/a/step-4: loss" \
    -- eval run.yaml --checkpoint c/a
[ "$(echo "$out" | grep -c 'records no digests')" -eq 1 ] || fail "not one warning: $out"

# 7. a finite but huge weight makes the loss non-finite: eval --json is still JSON
fresh
E set c/a/step-4 model.safetensors transformer.ln_f.bias 3e38
json=$(B eval run.yaml --checkpoint c/a --json 2>/dev/null) || fail "eval --json: $json"
echo "$json" | /usr/bin/python3 -c "
import json, sys
def bad(c): raise ValueError('not JSON: ' + c)
r = json.loads(sys.stdin.read(), parse_constant=bad)
assert r['eval/loss'] is None, r
" || fail "eval --json with a non-finite loss is not JSON (or the loss is finite): $json"

# 8. one process per run id: the second is refused, naming the first's pid and host
"$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=L --trainer.num_train_steps=100000 --trainer.checkpointer.save_interval=1h \
    --trainer.checkpointer.keep=[] > first.log 2>&1 &
pid=$!
# wait for its first step: then the lock is taken and a SIGTERM meets the training loop
i=0
until grep -q "^step 1/" first.log 2>/dev/null || [ $i -ge 600 ]; do
    sleep 0.05
    i=$((i + 1))
done
if ! grep -q "^step 1/" first.log; then
    kill -KILL $pid
    wait $pid
    echo "FAIL: the first run did not reach step 1 in 30 s: $(cat first.log)"
    exit 1
fi
kill -STOP $pid # held still while the second tries, so the first is surely running
expect 1 "run directory $work/ckpt/L is in use by another bora train (pid $pid on host $(hostname))" \
    -- train run.yaml --trainer.id=L
kill -CONT $pid
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "the first run: exit $rc, want 130: $(cat first.log)"
grep -q "in use" first.log && fail "the first run was disturbed: $(cat first.log)"

# 9. eval reads only: a save's temporary directory stays (only the lock holder removes them)
fresh
mkdir -p c/a/.tmp-step-9-999
expect 0 "eval of c/a/step-4" -- eval run.yaml --checkpoint c/a
[ -d c/a/.tmp-step-9-999 ] || fail "eval removed another process's temporary directory"
expect 0 "removing $work/c/a/.tmp-step-9-999, left by a save that did not finish" \
    -- train run.yaml "$R"

# 10. a checkpoint directory that cannot be made is refused before the first step (a path
# under a regular file fails for root too, who passes permission checks)
: > notadir
expect 1 "checkpoints cannot go to $work/notadir/a" "give trainer.checkpointer.base_path a directory you can write" \
    -- train run.yaml --trainer.checkpointer.base_path="$work/notadir"
case $out in *"step 1/"*) fail "trained before finding the checkpoint directory unusable: $out" ;; esac

# 11. a run that diverges (crash_on_nan off) saves no checkpoint holding a NaN or an infinity:
# the save is refused naming the tensor, the run stops, and the last good checkpoint stays
D="--trainer.id=div --trainer.crash_on_nan=false --optimizer.learning_rate=1e30 --optimizer.warmup=0 --optimizer.lr_schedule=constant --optimizer.max_grad_norm=0 --trainer.checkpointer.keep=[]"
# shellcheck disable=SC2086
expect 1 "checkpoint: step 2 not saved: tensor '" "holds NaN at element" \
    "the last checkpoint, $work/ckpt/div/step-1, is kept" -- train run.yaml $D --trainer.num_train_steps=2
[ "$(ls ckpt/div)" = "step-1" ] || fail "a diverged run left $(ls ckpt/div), want step-1 alone"
expect 0 "eval of ckpt/div/step-1: loss" -- eval run.yaml --checkpoint ckpt/div

# 12. --force sets every failing checkpoint newer than the good one aside, not only the latest
fresh
cp -r c/a/step-2 c/a/step-3 # records step 2: fails its checks
E flip c/a/step-4 model.safetensors transformer.wte.weight 16
expect 1 "pass --force to resume from $work/c/a/step-2 instead (it sets the 2 newer checkpoints" \
    -- train run.yaml "$R"
expect 0 "$work/c/a/step-3 fails its checks too; --force: kept as $work/c/a/step-3.damaged" \
    "resuming run a from $work/c/a/step-2 (step 2 of 4)" -- train run.yaml "$R" --force
[ -d c/a/step-3.damaged ] && [ -d c/a/step-4.damaged ] ||
    fail "not both failing checkpoints set aside: $(ls c/a)"

# 13. a shape key changed: the differences are listed, from trainer.json alone (no tensor is
# read, no earlier checkpoint is offered); with --force, the shapes still must fit
fresh
expect 1 "config.model.num_layers: 1 then, 2 now" "pass --force to resume anyway, despite these differences" \
    -- train run.yaml "$R" --model.num_layers=2
case $out in *"earlier checkpoint"* | *"the model has"*) fail "a shape change was taken for damage: $out" ;; esac
expect 1 "the checkpoint does not fit this configuration's model (--force resumes despite" \
    -- train run.yaml "$R" --model.num_layers=2 --force
case $out in *"earlier checkpoint"*) fail "--force offered an earlier checkpoint for a shape change: $out" ;; esac
[ "$(ls c/a)" = "$(ls ckpt/a)" ] || fail "a shape change renamed checkpoints: $(ls c/a)"

# 14. a start that fails after taking the lock leaves no run directory behind, and a directory
# that was there before stays
expect 1 "does not divide into 3 heads" -- train run.yaml --trainer.id=nohead --model.num_heads=3
[ -e ckpt/nohead ] && fail "a failed start left ckpt/nohead: $(ls -A ckpt/nohead)"
mkdir -p ckpt/there
expect 1 "does not divide into 3 heads" -- train run.yaml --trainer.id=there --model.num_heads=3
[ -d ckpt/there ] || fail "a failed start removed a directory that was there before"

if [ $fails -ne 0 ]; then
    echo "test_integrity: $fails failures"
    exit 1
fi
echo "test_integrity: all passed"
