#!/bin/sh
# A tiny model (--model gpt2, the default: 2 layers, 64 wide; llama: 2 layers, 64 wide, 2 KV
# heads; mixtral: the same with 4 experts, top 2) trained 20 steps on byte tokens on the CUDA
# backend, its loss curve compared with the CPU backend's: step 1 (the same weights and batch;
# only the rounding of f32 sums differs) within 1e-5 relative, steps 2-10 within 1e-4, the later
# ones within 1e-3 (AdamW amplifies the rounding differences each step, most where the loss
# rises: on an H200 GPT-2's curve stayed within 2e-7 of the CPU's over 20 steps of one text, and
# within 0 to step 10 and 2.6e-4 at step 20 of another; a layernorm gradient missing a quarter of
# its rows moved it by 1.4e-3), the loss falling by a nat; then the CUDA run again, which must
# give the same bits at every step (no atomics in float sums, a fixed algorithm per matmul shape).
# Two other checks of the GPU run:
#   --resume  10 steps with a checkpoint after each, the run killed (SIGKILL) when it logs step
#             6 and started again: it must resume, and its final model.safetensors and every
#             step's loss must be the bits of a run never interrupted;
#   --bf16    under trainer.mp p=f32,c=bf16: the loss finite and falling by a nat over 20
#             steps, and a second run the same bits.
# Exits 77 (skipped) where the CUDA backend cannot run (no GPU). GPU_SMOKE_BACKEND (default cuda)
# names another backend, to try the script's plumbing without a GPU.
#
# usage: gpu_smoke.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK (TEXT: any text file; copied as .txt)
#         [--model gpt2|llama|mixtral]
#         [--reference CURVE | --write-reference CURVE | --resume | --bf16]
#   --reference CURVE        the CPU curve from a file (a machine without the CPU backend)
#   --write-reference CURVE  run only the CPU backend and write its curve to CURVE
set -u
[ $# -ge 5 ] || { sed -n '2,26p' "$0"; exit 2; }
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
shift 5
model_name=gpt2 mode= curve=
while [ $# -gt 0 ]; do
    case $1 in
    --model) model_name=${2:-}; shift 2 || exit 2 ;;
    --reference | --write-reference) mode=$1 curve=${2:-}; shift 2 || exit 2 ;;
    --resume | --bf16) mode=$1; shift ;;
    *) echo "gpu_smoke: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
case $model_name in
gpt2) model="{type: gpt2, seq_len: 32, hidden_dim: 64, num_layers: 2, num_heads: 4}" ;;
llama) model="{type: llama, seq_len: 32, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}" ;;
mixtral) model="{type: mixtral, seq_len: 32, hidden_size: 64, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, num_local_experts: 4, num_experts_per_tok: 2}" ;;
*) echo "gpu_smoke: --model '$model_name' is not gpt2, llama or mixtral" >&2; exit 2 ;;
esac
gpu=${GPU_SMOKE_BACKEND:-cuda}
rm -rf "$work" && mkdir -p "$work" && cp "$text" "$work/text.txt" || exit 2

# config BACKEND NAME STEPS [MP]: $work/NAME.yaml
config() {
    cat > "$work/$2.yaml" <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 2}
data: {train_urls: [$work/text.txt], tokenizer: $tok}
trainer:
  backend: $1
  num_train_steps: $3
  train_batch_size: 8
  seed: 3
  mp: ${4:-p=f32,c=f32}
  checkpointer: {base_path: $work/ckpt, save_interval: ${5:-1000h}, keep: [{every: 10}]}
YAML
}

# run NAME [ID]: train $work/NAME.yaml as run ID (default NAME); the log in $work/ID.log, the
# losses (step and loss per line, every record) in $work/ID.steps, the losses alone in ID.loss
run() {
    id=${2:-$1}
    BORA_NO_PROGRESS=1 "$bora" --plugin-dir "$plugins" train "$work/$1.yaml" --trainer.id="$id" \
        "--trainer.tracker={type: jsonl, path: $work/$id.jsonl}" >> "$work/$id.log" 2>&1
    status=$?
    losses "$id"
    return $status
}
losses() {
    sed -n 's/.*"step":\([0-9]*\).*"train\/loss":\([-0-9.eE+naif]*\).*/\1 \2/p' \
        "$work/$1.jsonl" > "$work/$1.steps" 2>/dev/null
    cut -d' ' -f2 "$work/$1.steps" > "$work/$1.loss"
}
# train BACKEND NAME: 20 steps of the plain configuration on BACKEND
train() {
    config "$1" "$2" 20 && run "$2"
}
# skip_or_fail LOG: exit 77 when LOG says the GPU cannot run here, else 1 with the log
skip_or_fail() {
    if grep -q "no usable GPU\|cannot run here" "$1"; then
        echo "SKIP: $(grep -m1 "no usable GPU\|cannot run here" "$1")"
        exit 77
    fi
    echo "FAIL: bora train on $gpu ($model_name):"
    cat "$1"
    exit 1
}

if [ "$mode" = --write-reference ]; then
    train cpu cpu || { cat "$work/cpu.log"; exit 1; }
    cp "$work/cpu.loss" "$curve" && echo "gpu_smoke: CPU curve of $model_name ($(wc -l < "$curve") steps) in $curve"
    exit 0
fi

# falls NAME: NAME's 20 losses finite and the last a nat below the first
falls() {
    n=$(wc -l < "$work/$1.loss")
    [ "$n" -eq 20 ] || { echo "FAIL: $n losses from the $1 run, want 20"; return 1; }
    awk 'NR == 1 { first = $1 } { if ($1 != $1 + 0 || $1 ~ /nan|inf/) bad = 1; last = $1 }
         END { exit bad || !(last < first - 1) }' "$work/$1.loss" ||
        { echo "FAIL: the $1 run's loss is not finite or did not fall by a nat:";
          paste -sd' ' "$work/$1.loss"; return 1; }
}

if [ "$mode" = --bf16 ]; then
    config "$gpu" bf16 20 p=f32,c=bf16 && run bf16 || skip_or_fail "$work/bf16.log"
    grep -m1 "^backend\|cuda:" "$work/bf16.log"
    fails=0
    falls bf16 || fails=$((fails + 1))
    run bf16 bf16-again || { echo "FAIL: the second bf16 run:"; cat "$work/bf16-again.log"; exit 1; }
    cmp -s "$work/bf16.loss" "$work/bf16-again.loss" ||
        { echo "FAIL: a second bf16 run gave other losses:"; paste "$work/bf16.loss" "$work/bf16-again.loss";
          fails=$((fails + 1)); }
    echo "step  loss under c=bf16"
    awk '{ printf "%4d  %s\n", NR, $1 }' "$work/bf16.loss"
    [ $fails -eq 0 ] && echo "gpu_smoke --bf16 ($model_name): passed" || echo "gpu_smoke --bf16: $fails failures"
    [ $fails -eq 0 ]
    exit
fi

if [ "$mode" = --resume ]; then
    steps=10
    config "$gpu" resume $steps p=f32,c=f32 0s
    run resume reference || skip_or_fail "$work/reference.log"
    grep -m1 "^backend\|cuda:" "$work/reference.log"
    # the run killed when it logs step 6 (it may get a step or two further first)
    mkfifo "$work/lines" || exit 2
    BORA_NO_PROGRESS=1 "$bora" --plugin-dir "$plugins" train "$work/resume.yaml" --trainer.id=killed \
        "--trainer.tracker={type: jsonl, path: $work/killed.jsonl}" > "$work/lines" 2>&1 &
    pid=$!
    killed=0
    while IFS= read -r line; do
        echo "$line" >> "$work/killed.log"
        case $line in "step 6/$steps "*) kill -9 $pid; killed=1; break ;; esac
    done < "$work/lines"
    wait $pid 2>/dev/null
    [ $killed -eq 1 ] || { echo "FAIL: the run ended before it logged step 6:"; cat "$work/killed.log"; exit 1; }
    echo "killed at step 6; complete checkpoints: $(ls "$work/ckpt/killed" | grep '^step-' | paste -sd' ')"
    echo "--- resumed" >> "$work/killed.log"
    run resume killed || { echo "FAIL: the resumed run:"; cat "$work/killed.log"; exit 1; }
    fails=0
    grep -q "resuming run killed from" "$work/killed.log" ||
        { echo "FAIL: the second start did not resume:"; cat "$work/killed.log"; fails=$((fails + 1)); }
    cmp -s "$work/ckpt/reference/step-$steps/model.safetensors" "$work/ckpt/killed/step-$steps/model.safetensors" ||
        { echo "FAIL: the final model.safetensors differs from the uninterrupted run's"; fails=$((fails + 1)); }
    # every step's last logged loss (a step logged before the kill and again after) the reference's
    awk '{ last[$1] = $2 } END { for (s = 1; s in last; s++) print last[s] }' "$work/killed.steps" > "$work/killed.last"
    cmp -s "$work/reference.loss" "$work/killed.last" ||
        { echo "FAIL: the losses after the kill differ from the uninterrupted run's:";
          paste "$work/reference.loss" "$work/killed.last"; fails=$((fails + 1)); }
    [ "$(wc -l < "$work/reference.loss")" -eq $steps ] ||
        { echo "FAIL: $(wc -l < "$work/reference.loss") losses from the reference run, want $steps"; fails=$((fails + 1)); }
    [ $fails -eq 0 ] && echo "gpu_smoke --resume ($model_name): final weights and $steps losses bitwise equal after a kill at step 6"
    [ $fails -eq 0 ]
    exit
fi

train "$gpu" cuda || skip_or_fail "$work/cuda.log"
grep -m1 "^backend\|cuda:" "$work/cuda.log"

if [ "$mode" = --reference ]; then
    cp "$curve" "$work/cpu.loss" || exit 2
else
    train cpu cpu || { echo "FAIL: bora train on cpu:"; cat "$work/cpu.log"; exit 1; }
fi

fails=0
n=$(wc -l < "$work/cuda.loss")
[ "$n" -eq 20 ] || { echo "FAIL: $n losses from the CUDA run, want 20"; fails=$((fails + 1)); }
paste "$work/cpu.loss" "$work/cuda.loss" > "$work/both"
echo "step  cpu loss      cuda loss     relative difference ($model_name)"
awk '{ d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
       tol = NR == 1 ? 1e-5 : NR <= 10 ? 1e-4 : 1e-3;
       printf "%4d  %.8f  %.8f  %.2e%s\n", NR, $1, $2, r, r <= tol ? "" : "  > " tol;
       if (!(r <= tol)) bad++; if (r > worst) worst = r }
     END { printf "largest relative difference %.2e\n", worst; exit bad > 0 }' "$work/both" ||
    { echo "FAIL: the CUDA curve leaves the CPU curve's tolerance"; fails=$((fails + 1)); }
falls cuda || fails=$((fails + 1))

# the same configuration again: the same bits at every step
run cuda cuda2 || { echo "FAIL: the second CUDA run:"; cat "$work/cuda2.log"; exit 1; }
cmp -s "$work/cuda.loss" "$work/cuda2.loss" ||
    { echo "FAIL: a second CUDA run gave other losses:"; paste "$work/cuda.loss" "$work/cuda2.loss";
      fails=$((fails + 1)); }

[ $fails -eq 0 ] && echo "gpu_smoke ($model_name): passed" || echo "gpu_smoke ($model_name): $fails failures"
[ $fails -eq 0 ]
