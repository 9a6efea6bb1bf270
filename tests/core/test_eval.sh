#!/bin/sh
# Eval as a user meets it: a run with data.validation_urls evaluates every steps_per_eval steps
# and at the end (eval/loss, eval/bpb to the trackers and the summary); `bora eval` on the
# run's checkpoint gives bitwise the loss logged at that step, and the loss and bits per byte
# of an independent float64 PyTorch GPT-2 over the same windows (tests/models/eval_torch.py);
# max_eval_batches limits it; every step logs data/wait_s and throughput/mfu against a peak
# measured once and cached; a missing validation set or checkpoint is refused with the reason.
# usage: test_eval.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR REFERENCE_PY
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5 ref=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
export XDG_CACHE_HOME="$work/cache"
head -n 3000 "$text" > small.txt
# validation: 12 documents of Brown text after the training part, as JSON lines
sed -n '3001,3240p' "$text" | /usr/bin/python3 -c "
import json, sys
lines = [l.rstrip('\n') for l in sys.stdin if l.strip()]
for i in range(0, len(lines), 20):
    print(json.dumps({'text': ' '.join(lines[i:i + 20])}))" > val.jsonl
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 32, num_layers: 2, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 2}
data: {train_urls: [$work/small.txt], validation_urls: [$work/val.jsonl], tokenizer: $tok}
trainer:
  num_train_steps: 20
  train_batch_size: 8
  num_threads: 1
  steps_per_eval: 10
  id: ev
  checkpointer: {base_path: $work/ckpt, keep: [{every: 10}]}
  tracker: [{type: jsonl, path: $work/ev.jsonl}]
YAML
B() { "$bora" --plugin-dir "$plugins" "$@"; }
metric() { # metric STEP NAME: the value logged at STEP, as its exact text
    /usr/bin/python3 -c "
import json, sys
for l in open('ev.jsonl'):
    r = json.loads(l, parse_float=str)
    if r.get('step') == $1 and '$2' in r['metrics']:
        print(r['metrics']['$2'])"
}

# 1. training evaluates at steps 10 and 20
out=$(B train run.yaml 2>&1) || fail "train: $out"
has "$out" "step 20/20  loss" # not a terminal: a plain line per step
echo "$out" | grep -E "^(eval|peak)"
has "$out" "eval every 10 steps and at the end on"
has "$out" "eval at step 10: loss"
has "$out" "eval at step 20: loss"
has "$out" "peak: "
[ -s cache/bora/peak.tsv ] || fail "the measured peak was not cached in \$XDG_CACHE_HOME/bora"
l10=$(metric 10 eval/loss) l20=$(metric 20 eval/loss)
[ -n "$l10" ] && [ -n "$l20" ] || fail "eval/loss not logged at steps 10 and 20"
[ -n "$(metric 20 eval/bpb)" ] || fail "eval/bpb not logged"
grep -q '"summary".*"eval/loss"' ev.jsonl || fail "no eval/loss in the summary"
# every step: data/wait_s and an mfu between 0 and 1
/usr/bin/python3 -c "
import json, sys
steps = [json.loads(l)['metrics'] for l in open('ev.jsonl') if '\"train/loss\"' in l]
assert len(steps) == 20, len(steps)
for m in steps:
    assert 0 <= m['data/wait_s'] < 5, m
    assert 0 < m['throughput/mfu'] <= 1, m
print('20 steps with data/wait_s and throughput/mfu (last %.2g)' % steps[-1]['throughput/mfu'])
" || fail "per-step data/wait_s or throughput/mfu missing or out of range"

# 2. the second run uses the cached peak
out=$(B train run.yaml --trainer.id=ev2 --trainer.num_train_steps=2 --trainer.tracker=[] 2>&1) ||
    fail "second run: $out"
case $out in *"peak: "*) fail "the peak was measured again: $out" ;; esac

# 3. bora eval: bitwise the loss logged at step 20; against PyTorch
json=$(B eval run.yaml --checkpoint ckpt/ev --json 2>/dev/null) || fail "bora eval --json"
echo "$json"
got=$(echo "$json" | /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read(), parse_float=str)['eval/loss'])")
[ "$got" = "$l20" ] || fail "bora eval gives $got, the run logged $l20 at step 20"
has "$json" "ckpt/ev/step-20"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    PYTHONPATH=$(dirname "$ref") /usr/bin/python3 "$ref" ckpt/ev/step-20 val.jsonl 256 0 "$json" ||
        fail "eval differs from PyTorch's"
    json=$(B eval run.yaml --checkpoint ckpt/ev/step-10 --json --trainer.max_eval_batches=3 2>/dev/null)
    PYTHONPATH=$(dirname "$ref") /usr/bin/python3 "$ref" ckpt/ev/step-10 val.jsonl 256 24 "$json" ||
        fail "eval of 3 batches differs from PyTorch's"
else
    echo "skipped the PyTorch comparison: /usr/bin/python3 has no torch (install python3-torch)"
fi
out=$(B eval run.yaml --checkpoint ckpt/ev/step-10 --trainer.max_eval_batches=1 2>&1) ||
    fail "eval of one batch: $out"
has "$out" "(8 sequences, "

# 4. on a terminal, one progress line redrawn in place (step/total, loss, tokens/s, ETA)
if command -v script > /dev/null; then
    script -qec "'$bora' --plugin-dir '$plugins' train run.yaml --trainer.id=tty --trainer.tracker=[]" \
        /dev/null > tty.out 2>&1 || fail "train on a terminal: $(cat tty.out)"
    esc=$(printf '\033')
    grep -q "${esc}\[Kstep 20/20  loss .*tokens/s  ETA " tty.out ||
        fail "no live progress line on a terminal: $(head -c 2000 tty.out)"
    grep -q "grad_norm" tty.out && fail "plain step lines on a terminal"
    grep -q "^trained 20 steps" tty.out || fail "no final line after the progress line"
else
    echo "skipped the terminal check: no script(1)"
fi

# 5. refusals
out=$(B eval run.yaml --checkpoint ckpt/nope 2>&1) && fail "eval of a missing checkpoint succeeded"
has "$out" "ckpt/nope/model.safetensors"
out=$(B eval run.yaml --checkpoint ckpt/ev --data.validation_urls=[] 2>&1) &&
    fail "eval without a validation set succeeded"
has "$out" "no validation set"
out=$(B eval run.yaml 2>&1) && fail "eval without --checkpoint succeeded"
has "$out" "--checkpoint"

[ $fails -eq 0 ] && echo "test_eval: all checks passed" || echo "test_eval: $fails failures"
[ $fails -eq 0 ]
