#!/bin/sh
# The Mixtral side of bench/step: (a) bench/step/run --check finds the PyTorch peer's parameter
# count equal to bora's (bora graph) on a small Mixtral; (b) the peer computes Hugging Face's
# Mixtral (MixtralSparseMoeBlock's routing and expert loop): its logits, summed loss and every
# gradient, routers and experts included, match the independent float64 reference
# (tests/models/mixtral_torch.py) on its own weights, untied and tied.
# usage: check_step_mixtral.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# (a) the benchmark's own check, on a Mixtral small enough for a test (Llama 2's 32,000 ids)
keys='"hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 32000, "tie_word_embeddings": false, "rope_theta": 10000.0'
BENCH_BUILD=$build BENCH_SIZES=2x16 BENCH_MODELS=mixtral BENCH_MIXTRAL_KEYS=$keys \
    bash "$src/bench/step/run" --check > "$tmp/check" 2>&1 ||
    { echo "FAIL: bench/step/run --check:"; cat "$tmp/check"; exit 1; }
cat "$tmp/check"
# 32000 × 64 twice; per layer q and o (64 × 64), k and v (32 × 64), two norms, the router
# (4 × 64) and 4 experts of w1, w3 (48 × 64) and w2 (64 × 48); the final norm
grep -q '^mixtral 2 x 16: parameters: bora 4195136, PyTorch 4195136$' "$tmp/check" ||
    { echo "FAIL: the parameter counts are not both 4195136"; exit 1; }

# (b) the peer against the reference: 4 experts, top 2, untied; 3 experts, top 2, tied. (Top 1
# without the load-balancing loss would leave the routers no gradient to compare.)
small='"hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rope_theta": 10000.0, "num_experts_per_tok": 2'
"$py" "$src/bench/step/torch_step.py" --mixtral "{$small, \"num_local_experts\": 4}" \
    --write-case 16 "$tmp/untied"
"$py" "$src/bench/step/torch_step.py" --mixtral \
    "{$small, \"num_local_experts\": 3, \"tie_word_embeddings\": true}" --write-case 16 "$tmp/tied"
"$py" "$src/tests/models/mixtral_torch.py" "$tmp/untied" "$tmp/tied"
