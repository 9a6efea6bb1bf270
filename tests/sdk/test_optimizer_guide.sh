#!/bin/sh
# docs/optimizers.md's example optimizer as a researcher uses it: the first ```c block of the
# guide, exactly as printed, compiled against the SDK with the project's warnings as errors,
# linked with -z defs, listed by `bora plugins` with its keys, refusing a bad key by name, and
# training a small GPT-2 for 30 steps (SGD with Nesterov momentum and decoupled decay): the loss
# falls by more than a nat, and the checkpoint holds the momentum buffer of every parameter.
# usage: test_optimizer_guide.sh GUIDE SDK_DIR BORA PLUGIN_DIR C_COMPILER TOKENIZER WORK_DIR
set -u
guide=$1 sdk=$2 bora=$3 plugins=$4 cc=$5 tok=$6 work=$7
rm -rf "$work" && mkdir -p "$work/mine" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

awk '/^```c$/ { if (!done) on = 1; next } /^```/ { if (on) { on = 0; done = 1 } next } on' \
    "$guide" > sgdm.c
grep -q BORA_PLUGIN_DEFINE sgdm.c || { echo "FAIL: no \`\`\`c block with a plugin in $guide"; exit 1; }
# shellcheck disable=SC2086
if ! out=$("$cc" -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Woverride-init -Werror -I"$sdk" -fPIC -shared \
           -Wl,-z,defs -o mine/bora-optimizer-sgdm.so sgdm.c -lm 2>&1); then
    echo "FAIL: the guide's example does not build:"
    echo "$out"
    exit 1
fi
b() { "$bora" --plugin-dir "$work/mine" --plugin-dir "$plugins" "$@"; }

out=$(b plugins 2>&1)
printf '%s\n' "$out" | grep -Eq "^optimizer +sgdm +1\.0\.0 .*$work/mine/bora-optimizer-sgdm.so" ||
    fail "bora plugins does not list the guide's sgdm:
$out"
out=$(b config keys optimizer sgdm 2>&1)
for key in momentum nesterov weight_decay; do
    printf '%s\n' "$out" | grep -q "$key" || fail "bora config keys optimizer sgdm lacks $key:
$out"
done

i=0
: > text.txt
while [ $i -lt 400 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times, and the dog sleeps." >> text.txt
    i=$((i + 1))
done
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 32, hidden_dim: 32, num_layers: 1, num_heads: 2}
optimizer: {type: sgdm, learning_rate: 0.3, momentum: 0.9, nesterov: true, weight_decay: 1e-4,
            warmup: 3, lr_schedule: cosine}
data: {train_urls: [$work/text.txt], tokenizer: $tok}
trainer:
  num_train_steps: 30
  train_batch_size: 8
  num_threads: 1
  seed: 1
  id: guide
  checkpointer: {base_path: $work/ckpt}
  tracker: {type: jsonl, path: $work/metrics.jsonl}
YAML

out=$(b train run.yaml --optimizer.momentum=1.5 2>&1) &&
    fail "momentum 1.5 was accepted"
case $out in *"optimizer.momentum: 1.5 is not in [0, 1)"*) ;; *) fail "no message naming optimizer.momentum:
$out" ;; esac

if ! out=$(BORA_NO_PROGRESS=1 b train run.yaml 2>&1); then
    fail "training with the guide's sgdm failed:
$out"
else
    losses=$(sed -n 's/.*"train\/loss":\([-0-9.e+]*\).*/\1/p' metrics.jsonl)
    n=$(printf '%s\n' "$losses" | grep -c .)
    first=$(printf '%s\n' "$losses" | head -n 1) last=$(printf '%s\n' "$losses" | tail -n 1)
    echo "sgdm: $n steps, loss $first -> $last"
    [ "$n" -eq 30 ] || fail "$n losses logged, want 30"
    awk "BEGIN { exit !($last < $first - 1.0) }" || fail "the loss fell from $first to $last only"
    st=$(find ckpt -name optimizer.safetensors | head -n 1)
    if [ -z "$st" ]; then
        fail "no optimizer.safetensors under $work/ckpt"
    else
        # every parameter in model.safetensors has its momentum_buffer.<name> beside it
        params=$(head -c 65536 "$(dirname "$st")/model.safetensors" | grep -ao '"[a-z_0-9.]*weight"\|"[a-z_0-9.]*bias"' | sort -u | wc -l)
        buffers=$(head -c 65536 "$st" | grep -ao '"momentum_buffer\.[a-z_0-9.]*"' | sort -u | wc -l)
        [ "$params" -gt 0 ] && [ "$buffers" -eq "$params" ] ||
            fail "$buffers momentum buffers in $st for $params parameters"
    fi
fi
[ "$fails" -eq 0 ] && echo "test_optimizer_guide: ok"
exit $((fails > 0))
