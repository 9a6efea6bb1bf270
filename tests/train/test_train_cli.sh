#!/bin/sh
# bora train as a user meets it: configuration mistakes named with file, line and the fix;
# bad data refused with file and line; crash_on_nan; the checkpoint policy (which step
# directories stay); a partial save left by a kill removed; a resume whose configuration differs
# refused unless --force; SIGTERM saves and exits 130; load_checkpoint; trainer.json's record.
# usage: test_train_cli.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect STATUS NEEDLE ARGS...: run bora train, check the exit status and that the output has NEEDLE
expect() {
    want=$1 needle=$2
    shift 2
    out=$("$bora" --plugin-dir "$plugins" train "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "bora train $*: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "bora train $*: no '$needle' in:
$out" ;; esac
}
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 6
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, save_interval: 0s, keep: [{every: 2, until: 4}]}
  tracker: {type: jsonl, path: $work/metrics.jsonl}
YAML

expect 2 "give a configuration file"
expect 1 "unknown key 'num_train_step' in trainer; did you mean 'num_train_steps'?" run.yaml \
    --trainer.num_train_step=5
expect 1 "trainer.per_device_parallelism: 3 does not divide train_batch_size (4)" run.yaml \
    --trainer.per_device_parallelism=3
expect 1 "optimizer.lr_schedule: unknown schedule 'cosin'" run.yaml --optimizer.lr_schedule=cosin
expect 1 "optimizer.warmup: 10 steps of warmup exceed num_train_steps (6)" run.yaml \
    --optimizer.warmup=10
expect 1 "data.tokenizer: give the tokenizer to train with" run.yaml --data.tokenizer='""'
expect 1 "data.train_urls: $work/none.txt: no such file" run.yaml \
    --data.train_urls="[$work/none.txt]"
printf 'a,b\n' > table.csv
expect 1 "table.csv: unsupported file type (want .jsonl or .txt, optionally compressed" run.yaml \
    --data.train_urls="[$work/table.csv]"
printf '{"text": "fine"}\n{"text": broken}\n' > bad.jsonl
expect 1 "bad.jsonl:2: invalid JSON" run.yaml --data.train_urls="[$work/bad.jsonl]"
printf '{"text": "fine"}\n\n{"body": "x"}\n' > nofield.jsonl
expect 1 "nofield.jsonl:3: no \"text\" field (data.text_key)" run.yaml \
    --data.train_urls="[$work/nofield.jsonl]"
expect 1 "model.vocab_size: 100 is smaller than the tokenizer's vocabulary (257)" run.yaml \
    --model.vocab_size=100
expect 1 "trainer.id: 'a/b' is not a valid run id" run.yaml --trainer.id=a/b
expect 1 "trainer.mp: c=fp16: the dtype is f32 or bf16" run.yaml --trainer.mp=p=f32,c=fp16
expect 1 "trainer.mp: p=bf16: parameters, their gradients and the optimizer's state are kept in f32" \
    run.yaml --trainer.mp=p=bf16,c=bf16
# a bf16 residual stream: the run says how much of it the model marked, and trains
expect 0 "trainer.mp r=bf16: the residual stream kept in bf16 (3 values of it per micro-batch)" \
    run.yaml --trainer.id=r16 --trainer.mp=p=f32,c=bf16,r=bf16 --trainer.num_train_steps=2
expect 1 "trainer.mp: 'compute=bf16' is not key=dtype with key p (parameters), c (compute)" \
    run.yaml --trainer.mp=compute=bf16
# bf16 compute on a CPU says what it does and how the backend multiplies; the run trains, on
# either of the backend's bf16 paths (the widened one says so as a warning).
expect 0 "trainer.mp c=bf16: matmul operands rounded to bf16, products summed in f32 (cpu: " \
    run.yaml --trainer.id=bf16 --trainer.mp=p=f32,c=bf16 --trainer.num_train_steps=2
export BORA_CPU_BF16_MATMUL=widen
expect 0 "bf16 matmuls: operands widened to f32 for sgemm" run.yaml --trainer.id=bf16w \
    --trainer.mp=p=f32,c=bf16 --trainer.num_train_steps=2
# oneDNN's bf16 primitives are made while the graphs are built, none on a product's first run
export BORA_CPU_BF16_MATMUL=onednn
out=$("$bora" -v --plugin-dir "$plugins" train run.yaml --trainer.id=bf16o \
    --trainer.mp=p=f32,c=bf16 --trainer.num_train_steps=2 2>&1)
got=$?
case $out in
*"oneDNN has no bf16 matmul on this CPU"*) echo "skip: the onednn bf16 path: not on this CPU" ;;
*)
    built=$(printf '%s\n' "$out" | grep -c "oneDNN bf16 matmul .*, made while building the graph")
    late=$(printf '%s\n' "$out" | grep -c "oneDNN bf16 matmul .*, made on its first run")
    echo "onednn: $built primitives made while building the graphs, $late on a first run"
    [ "$got" -eq 0 ] && [ "$built" -ge 7 ] && [ "$late" -eq 0 ] ||
        fail "oneDNN's primitives not all made at build time (exit $got):
$out"
    ;;
esac
export BORA_CPU_BF16_MATMUL=fast
expect 1 "BORA_CPU_BF16_MATMUL=fast: say onednn or widen" run.yaml --trainer.id=bf16f
unset BORA_CPU_BF16_MATMUL

# A learning rate far too large: the loss overflows and the run stops, naming the step.
expect 1 "stopping (trainer.crash_on_nan)" run.yaml --trainer.id=nan \
    --optimizer.learning_rate=1e30 --optimizer.max_grad_norm=0 --trainer.num_train_steps=40 \
    --optimizer.warmup=0

# The policy: every step saved (save_interval 0s) but only keep's steps 2 and 4 and the final
# step 6 stay.
expect 0 "trained 6 steps" run.yaml --trainer.id=p
[ "$(ls ckpt/p | tr '\n' ' ')" = "step-2 step-4 step-6 " ] || fail "kept: $(ls ckpt/p)"
grep -q '"step": 6' ckpt/p/step-6/trainer.json || fail "trainer.json has no step"
grep -Eq '"backend": "cpu: 1 thread, (avx512|avx2|generic) loops, oneDNN' ckpt/p/step-6/trainer.json ||
    fail "trainer.json does not record the backend: $(cat ckpt/p/step-6/trainer.json)"
grep -q '"learning_rate":0.01' ckpt/p/step-6/trainer.json || fail "trainer.json lacks the config"
expect 0 "run p already finished (6 steps)" run.yaml --trainer.id=p

# A save cut short leaves a temporary directory; the next start removes it and resumes from the
# last complete checkpoint.
mkdir -p ckpt/p/.tmp-step-7-999 && : > ckpt/p/.tmp-step-7-999/model.safetensors
expect 1 "removing $work/ckpt/p/.tmp-step-7-999, left by a save that did not finish" run.yaml \
    --trainer.id=p --trainer.num_train_steps=8
[ -e ckpt/p/.tmp-step-7-999 ] && fail "the partial checkpoint is still there"

# Resuming with a different configuration is refused, naming what changed; --force goes on.
expect 1 "config.trainer.num_train_steps: 6 then, 8 now" run.yaml --trainer.id=p \
    --trainer.num_train_steps=8
expect 1 "not resuming; pass --force to resume anyway" run.yaml --trainer.id=p \
    --trainer.num_train_steps=8
expect 0 "resuming run p from $work/ckpt/p/step-6 (step 6 of 8)" run.yaml --trainer.id=p \
    --trainer.num_train_steps=8 --force
[ -d ckpt/p/step-8 ] || fail "no step-8 after the forced resume"
# Where checkpoints go and who logs may change.
expect 0 "run p already finished" run.yaml --trainer.id=p --trainer.num_train_steps=8 \
    --trainer.tracker="{type: jsonl, path: $work/other.jsonl}"

# SIGTERM: the step finishes, a checkpoint is saved, exit 130; the next start goes on.
"$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=t --trainer.num_train_steps=300 \
    > term.log 2>&1 &
pid=$!
i=0
until grep -q '^step 3/' term.log 2>/dev/null || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "SIGTERM: exit $rc, want 130: $(cat term.log)"
grep -q "interrupted at step" term.log || fail "SIGTERM: no message: $(cat term.log)"
expect 0 "resuming run t from" run.yaml --trainer.id=t --trainer.num_train_steps=300

# load_checkpoint starts a new run from another's weights.
expect 0 "starting run q from the weights in $work/ckpt/p/step-6" run.yaml --trainer.id=q \
    --trainer.load_checkpoint="$work/ckpt/p/step-6"
expect 1 "model.safetensors: tensor 'transformer.wte.weight' is F32 [257, 16], the model has F32 [257, 32]" \
    run.yaml --trainer.id=q2 --trainer.load_checkpoint="$work/ckpt/p/step-6" --model.hidden_dim=32

if [ $fails -ne 0 ]; then
    echo "test_train_cli: $fails failures"
    exit 1
fi
echo "test_train_cli: all checks passed"
