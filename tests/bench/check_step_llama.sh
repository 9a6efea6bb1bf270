#!/bin/sh
# The Llama side of bench/step: (a) bench_floor --llama times exactly the step's matmuls — q/k/v/o
# with k and v as wide as the key/value heads, gate/up/down, the untied LM head; forward, dx and
# dw — and refuses sizes that do not fit; (b) bench/step/run --check finds the PyTorch peer's
# parameter count equal to bora's (bora graph) on a small Llama; (c) the peer computes Hugging
# Face's Llama: its logits, summed loss and every gradient match the independent float64
# reference (tests/models/llama_torch.py) on its own weights, untied and tied.
# usage: check_step_llama.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# (a) T=32 tokens, 1 layer, embed 64, vocab 256, 4 heads of 16, 2 key/value heads, SwiGLU 96
"$build/bin/bench_floor" --llama 32 1 64 256 4 2 96 > "$tmp/floor"
awk '/ M=/ { print $1, $2, $3, $4, $5, $6, $7 }' "$tmp/floor" > "$tmp/shapes"
cat > "$tmp/want" <<'SHAPES'
q_proj forward NT M=32 N=64 K=64 x1
q_proj dx NN M=32 N=64 K=64 x1
q_proj dw TN M=64 N=64 K=32 x1
k_proj forward NT M=32 N=32 K=64 x1
k_proj dx NN M=32 N=64 K=32 x1
k_proj dw TN M=32 N=64 K=32 x1
v_proj forward NT M=32 N=32 K=64 x1
v_proj dx NN M=32 N=64 K=32 x1
v_proj dw TN M=32 N=64 K=32 x1
o_proj forward NT M=32 N=64 K=64 x1
o_proj dx NN M=32 N=64 K=64 x1
o_proj dw TN M=64 N=64 K=32 x1
gate_proj forward NT M=32 N=96 K=64 x1
gate_proj dx NN M=32 N=64 K=96 x1
gate_proj dw TN M=96 N=64 K=32 x1
up_proj forward NT M=32 N=96 K=64 x1
up_proj dx NN M=32 N=64 K=96 x1
up_proj dw TN M=96 N=64 K=32 x1
down_proj forward NT M=32 N=64 K=96 x1
down_proj dx NN M=32 N=96 K=64 x1
down_proj dw TN M=64 N=96 K=32 x1
lm_head forward NT M=32 N=256 K=64 x1
lm_head dx NN M=32 N=64 K=256 x1
lm_head dw TN M=256 N=64 K=32 x1
SHAPES
diff "$tmp/want" "$tmp/shapes" || { echo "FAIL: bench_floor --llama's products (above: want < > got)"; exit 1; }
grep -q '^floor_s=[0-9.]* gflop=[0-9.]* gflops=[0-9.]*$' "$tmp/floor" ||
    { echo "FAIL: bench_floor --llama printed no total"; cat "$tmp/floor"; exit 1; }
refused() { # bench_floor ARGS... must exit 2 and say $want
    if "$build/bin/bench_floor" "$@" > "$tmp/out" 2>&1; then
        echo "FAIL: bench_floor $* was accepted"; exit 1
    fi
    grep -q "$want" "$tmp/out" || { echo "FAIL: bench_floor $*:"; cat "$tmp/out"; exit 1; }
}
want="KV_HEADS (3) must divide HEADS" refused --llama 32 1 64 256 4 3 96
want="sizes must be positive integers" refused --llama 32x
want="past 2^31 floats" refused --llama 100000000 1 64 32000 4 2 96

"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }

# (b) the benchmark's own check, on a Llama small enough for a test (Llama 2's 32,000 ids)
keys='"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000, "tie_word_embeddings": false, "rope_theta": 10000.0'
BENCH_BUILD=$build BENCH_SIZES=2x16 BENCH_MODELS=llama BENCH_LLAMA_KEYS=$keys bash "$src/bench/step/run" --check > "$tmp/check" 2>&1 ||
    { echo "FAIL: bench/step/run --check:"; cat "$tmp/check"; exit 1; }
cat "$tmp/check"
# 32000 × 64 twice, per layer q, k, v, o, gate, up, down and two norms, and the final norm
grep -q '^llama 2 x 16: parameters: bora 4157760, PyTorch 4157760$' "$tmp/check" ||
    { echo "FAIL: the parameter counts are not both 4157760"; exit 1; }

# (c) the peer against the reference, untied (the benchmark's) and tied
small='"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rope_theta": 10000.0'
"$py" "$src/bench/step/torch_step.py" --llama "{$small}" --write-case 16 "$tmp/untied"
"$py" "$src/bench/step/torch_step.py" --llama "{$small, \"tie_word_embeddings\": true}" \
    --write-case 16 "$tmp/tied"
"$py" "$src/tests/models/llama_torch.py" "$tmp/untied" "$tmp/tied"
