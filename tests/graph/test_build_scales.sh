#!/bin/sh
# Building a graph takes time linear in the number of layers: bora graph on a narrow GPT-2 of
# 1,600 layers must finish within 32 times its time for 200 layers (8 times the layers; a
# quadratic step makes it 64 times, and the cubic arena placement this replaced, minutes). Both
# runs include the same start-up, which only makes the ratio easier. Under r=bf16 too, whose
# rewrite of the widened residual stream once scanned every later node per layer.
# usage: test_build_scales.sh BORA PLUGIN_DIR WORK_DIR
set -u
bora=$1 plugins=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
cat > narrow.yaml <<YAML
model: {type: gpt2, hidden_dim: 16, num_heads: 2, seq_len: 8, vocab_size: 64}
trainer: {train_batch_size: 2, num_threads: 1}
YAML
now_ms() { echo $(($(date +%s%N) / 1000000)); }
fails=0
for mp in p=f32,c=f32 p=f32,c=bf16,r=bf16; do
    t0=$(now_ms)
    "$bora" --plugin-dir "$plugins" graph narrow.yaml --model.num_layers 200 --trainer.mp "$mp" \
        > small.txt 2>&1 || { echo "FAIL: 200 layers ($mp): $(cat small.txt)"; exit 1; }
    small=$(($(now_ms) - t0))
    limit=$(((32 * small + 999) / 1000))
    t0=$(now_ms)
    timeout "$limit" "$bora" --plugin-dir "$plugins" graph narrow.yaml --model.num_layers 1600 \
        --trainer.mp "$mp" > big.txt 2>&1
    rc=$?
    big=$(($(now_ms) - t0))
    echo "$mp: 200 layers ${small} ms, 1600 layers ${big} ms (limit ${limit} s)"
    if [ "$rc" -eq 124 ]; then
        echo "FAIL: 1600 layers ($mp) took over 32 times as long as 200"
        fails=$((fails + 1))
    elif [ "$rc" -ne 0 ] || ! grep -q "train  graph" big.txt; then
        echo "FAIL: 1600 layers ($mp): exit $rc: $(cat big.txt)"
        fails=$((fails + 1))
    fi
done
[ "$fails" -eq 0 ]
