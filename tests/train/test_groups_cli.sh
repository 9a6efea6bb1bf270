#!/bin/sh
# optimizer.groups as a user meets it through bora train: each mistake in a group named by its
# key (optimizer.groups[i].key) with the fix; Muon on a vector refused naming the parameter and
# pointing at optimizer.groups; the start line saying which group took how many parameters; a
# group that matches nothing warned of; trainer.json recording the groups; a checkpoint keeping
# each group's own slots (m/v for AdamW, momentum for Muon); a resume with changed groups
# refused, naming the changed key, going on with --force, and refused even so where a
# parameter's state slots changed (naming the missing tensor); one with the same groups going
# on; the same bits at another thread count; a checkpoint older than optimizer.groups resuming;
# Sophia with an AdamW group (its metrics, the memory line counting its estimate), and groups
# asking for different Hessian estimates refused, naming both.
# usage: test_groups_cli.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
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
optimizer:
  type: muon
  learning_rate: 2e-2
  warmup: 1
  groups:
    - {match: ["transformer.wte.*", "transformer.wpe.*"], type: adamw, learning_rate: 3e-3}
    - {ndim: 1, type: adamw, weight_decay: 0.0}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 4
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, save_interval: 0s}
YAML

# mistakes in a group, each named by its key
expect 1 "optimizer.groups[0].betaa: unknown key; a group of optimizer adamw takes match, ndim, no_decay, type, learning_rate, beta1" \
    run.yaml --optimizer.groups='[{ndim: 1, type: adamw, betaa: 0.9}]'
expect 1 "optimizer.groups[1].momentum: unknown key; a group of optimizer adamw" \
    run.yaml --optimizer.groups='[{ndim: 2, match: "x*"}, {ndim: 1, type: adamw, momentum: 0.9}]'
expect 1 "optimizer.groups[0].warmup: the learning-rate schedule and clipping are the run's" \
    run.yaml --optimizer.groups='[{ndim: 1, type: adamw, warmup: 3}]'
expect 1 "optimizer.groups[0].type: no optimizer named 'adamm'; did you mean 'adamw'?" \
    run.yaml --optimizer.groups='[{ndim: 1, type: adamm}]'
expect 1 "optimizer.groups[0]: no selector; say which parameters the group takes" \
    run.yaml --optimizer.groups='[{type: adamw}]'
expect 1 "optimizer.groups[0].match: expected a glob or a list of globs" \
    run.yaml --optimizer.groups='[{match: {a: 1}, type: adamw}]'
expect 1 "optimizer.groups[0].ndim: -1 is not a number of axes" \
    run.yaml --optimizer.groups='[{ndim: -1, type: adamw}]'
expect 1 "optimizer.groups: expected a list of groups" run.yaml --optimizer.groups=adamw
expect 1 "optimizer.groups[0]: adamw: optimizer.beta1: 1 is not in [0, 1)" \
    run.yaml --optimizer.groups='[{ndim: 1, type: adamw, beta1: 1}]'
# Muon on the vectors: refused, naming one and pointing at optimizer.groups
expect 1 "has 1 axes; Muon updates matrices only: give it another optimizer with optimizer.groups" \
    run.yaml --optimizer.groups='[]'
# a group that takes nothing: a warning, and the run goes on
expect 0 "optimizer.groups[2] matches no parameter" run.yaml --trainer.id=nothing \
    --optimizer.groups='[{match: ["transformer.wte.*", "transformer.wpe.*"], type: adamw}, {ndim: 1, type: adamw}, {match: "lm_head.*", type: adamw}]'

# a run with groups: the start line, the record, the checkpoint's slots
expect 0 "optimizer: muon for 4 parameters (3.1K), adamw (groups[0]) for 2 (4.4K), adamw (groups[1]) for 10 (240)" \
    run.yaml --trainer.id=g
ckpt=$work/ckpt/g/step-4
grep -q '"groups\[1\]: adamw for 10 parameters (adamw ' "$ckpt/trainer.json" ||
    fail "trainer.json does not record the groups: $(cat "$ckpt/trainer.json")"
for t in momentum.transformer.h.0.attn.c_attn.weight m.transformer.wte.weight \
    v.transformer.h.0.ln_1.bias; do
    grep -q "\"$t\"" "$ckpt/trainer.json" || fail "the checkpoint has no $t"
done
grep -q '"m.transformer.h.0.attn.c_attn.weight"' "$ckpt/trainer.json" &&
    fail "the checkpoint keeps AdamW's m for a matrix Muon updates"
# a resume with another group's key is refused, naming it; --force goes on (same slots)
expect 1 "config.optimizer.groups[1].weight_decay: 0 then, 0.01 now" run.yaml --trainer.id=g \
    --trainer.num_train_steps=6 \
    --optimizer.groups='[{match: ["transformer.wte.*", "transformer.wpe.*"], type: adamw, learning_rate: 3e-3}, {ndim: 1, type: adamw, weight_decay: 0.01}]'
# ... and with --force it goes on (the same slots), from a copy of the run
cp -R "$work/ckpt/g" "$work/ckpt/gforce" || exit 2
expect 0 "resuming run gforce from $work/ckpt/gforce/step-4" run.yaml --trainer.id=gforce \
    --trainer.num_train_steps=6 --force \
    --optimizer.groups='[{match: ["transformer.wte.*", "transformer.wpe.*"], type: adamw, learning_rate: 3e-3}, {ndim: 1, type: adamw, weight_decay: 0.01}]'
[ -d "$work/ckpt/gforce/step-6" ] || fail "the --force resume saved no step-6: $(ls "$work/ckpt/gforce")"
# groups that give parameters other slots do not fit the checkpoint, even with --force: a
# missing tensor is named, or the count of tensors given
expect 1 "optimizer.safetensors: no tensor 'm.transformer.h.0.attn.c_attn.weight': the optimizer state does not fit optimizer.groups" \
    run.yaml --trainer.id=g --trainer.num_train_steps=6 --force \
    --optimizer.groups='[{match: ["transformer.wte.*", "transformer.wpe.*"], type: adamw, learning_rate: 3e-3}, {ndim: 1, type: adamw, weight_decay: 0.0}, {match: "transformer.h.0.attn.c_attn.weight", type: adamw}]'
expect 1 "the optimizer state does not fit optimizer.groups" run.yaml --trainer.id=g \
    --trainer.num_train_steps=6 --force \
    --optimizer.groups='[{match: ["transformer.wte.*", "transformer.wpe.*"], type: adamw}, {ndim: 1, type: lion}]'
# the same groups: it goes on
expect 0 "resuming run g from $work/ckpt/g/step-4" run.yaml --trainer.id=g \
    --trainer.num_train_steps=6 --force

# the same bits at another thread count (Muon's products are f32)
expect 0 "optimizer: muon for 4 parameters" run.yaml --trainer.id=g2 --trainer.num_threads=2
for f in model.safetensors optimizer.safetensors; do
    cmp -s "$work/ckpt/g/step-4/$f" "$work/ckpt/g2/step-4/$f" ||
        fail "$f differs between 1 and 2 threads"
done

# a checkpoint from before optimizer.groups existed (no groups key in its configuration)
# resumes: an empty list of groups changes nothing
expect 0 "trained 2 steps" run.yaml --trainer.id=old --trainer.num_train_steps=2 \
    --optimizer.type=adamw --optimizer.groups='[]'
/usr/bin/python3 - "$work/ckpt/old/step-2/trainer.json" <<'PY' || fail "cannot edit trainer.json"
import json, sys
d = json.load(open(sys.argv[1]))
del d["config"]["optimizer"]["groups"]
json.dump(d, open(sys.argv[1], "w"))
PY
expect 0 "resuming run old from $work/ckpt/old/step-2" run.yaml --trainer.id=old \
    --trainer.num_train_steps=2 --optimizer.type=adamw --optimizer.groups='[]'
# nor does one from before trainer.eval_wer_clips (how many clips an evaluation transcribes)
/usr/bin/python3 - "$work/ckpt/old/step-2/trainer.json" <<'PY' || fail "cannot edit trainer.json"
import json, sys
d = json.load(open(sys.argv[1]))
del d["config"]["trainer"]["eval_wer_clips"]
json.dump(d, open(sys.argv[1], "w"))
PY
expect 0 "resuming run old from $work/ckpt/old/step-2" run.yaml --trainer.id=old \
    --trainer.num_train_steps=2 --optimizer.type=adamw --optimizer.groups='[]'

# Sophia-H on the matrices with an AdamW group for the vectors: the estimate on steps 1 and 3
# for the base's parameters only, its metrics logged (the estimate's norm on estimate steps)
expect 0 "hessian: the Hutchinson (z⊙Hz) estimate every 2 steps" run.yaml --trainer.id=sophia \
    --optimizer.type=sophia_h --optimizer.learning_rate=1e-3 --optimizer.update_interval=2 \
    --optimizer.groups='[{ndim: 1, type: adamw}]' \
    --trainer.tracker="{type: jsonl, path: $work/sophia.jsonl}"
/usr/bin/python3 - "$work/sophia.jsonl" <<'PY' || fail "sophia's metrics: see above"
import json, sys
rows = {}
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if "step" in rec:
        rows.setdefault(rec["step"], {"step": rec["step"]}).update(rec["metrics"])
assert sorted(rows) == [1, 2, 3, 4], rows
for r in rows.values():
    for k in ("optim/hessian_norm", "optim/unclipped_fraction"):
        assert k in r, (r["step"], k)
    assert 0 <= r["optim/unclipped_fraction"] <= 1, r
    assert ("optim/hessian_estimate_norm" in r) == (r["step"] in (1, 3)), r
    assert r["optim/hessian_norm"] > 0, r
PY
# the memory line counts the estimate's tangent and hvp blocks: Sophia's rest (its state is as
# large as AdamW's) is at least two parameter blocks more than AdamW's
rest() { # KiB of "inputs and the rest" on the memory line of a 1-step run
    "$bora" --plugin-dir "$plugins" train run.yaml --trainer.num_train_steps=1 "$@" 2>&1 |
        sed -n 's/^memory: \([0-9.]*\) KiB parameters.* \([0-9.]*\) KiB inputs and the rest.*/\1 \2/p'
}
set -- $(rest --trainer.id=mem_a --optimizer.type=adamw --optimizer.groups='[]') \
    $(rest --trainer.id=mem_s --optimizer.type=sophia_h --optimizer.groups='[]')
if [ $# -ne 4 ] || ! awk -v p="$1" -v a="$2" -v s="$4" 'BEGIN { exit !(s >= a + 2 * p) }'; then
    fail "memory: sophia_h's rest ($4 KiB) is not AdamW's ($2 KiB) plus two parameter blocks ($1 KiB each)"
fi
# groups asking for different estimates: refused, naming both sides
expect 1 "the base optimizer and optimizer.groups[0] ask for different Hessian estimates" \
    run.yaml --optimizer.type=sophia_h --optimizer.groups='[{ndim: 1, type: sophia_g}]'
expect 1 "optimizer.groups[0] and optimizer.groups[1] ask for different Hessian estimates" \
    run.yaml --optimizer.type=adamw --optimizer.groups='[{ndim: 1, type: sophia_h}, {match: "transformer.wte.*", type: sophia_h, update_interval: 3}]'

[ "$fails" -eq 0 ] && echo "groups cli: all passed"
[ "$fails" -eq 0 ]
