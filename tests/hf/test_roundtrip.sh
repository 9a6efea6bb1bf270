#!/bin/sh
# Export then import gives back the parameters bit for bit, for every model type bora ships
# (gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3), single-file and sharded: an f32 export imports to the
# checkpoint's own bits, and the model its config.json describes gives the run's eval loss to
# the bit; a bf16 export imports to the checkpoint rounded to bf16, and exporting
# that import in bf16 again gives the same files, byte for byte.
# usage: test_roundtrip.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 1000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
# same A B [bf16]: the tensors of safetensors files A and B (B's may be sharded: a folder) are
# bitwise equal, A's rounded to bf16 (nearest, ties to even) first with bf16
same() {
    "$py" - "$@" <<'PY'
import json, os, struct, sys
import numpy as np
def read(path):
    files = [path]
    if os.path.isdir(path):
        idx = os.path.join(path, "model.safetensors.index.json")
        files = ([os.path.join(path, f) for f in sorted(set(json.load(open(idx))["weight_map"].values()))]
                 if os.path.exists(idx) else [os.path.join(path, "model.safetensors")])
    out = {}
    for f in files:
        data = open(f, "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        head = json.loads(data[8:8 + n])
        for k, v in head.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            dt = {"F32": np.uint32, "BF16": np.uint16}[v["dtype"]]
            arr = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt)
            if dt == np.uint16:  # widen bf16 to f32's bits
                arr = arr.astype(np.uint32) << 16
            out[k] = arr
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
if len(sys.argv) > 3:  # round a to bf16, nearest even, as bits
    a = {k: ((v + 0x7FFF + ((v >> 16) & 1)) >> 16 << 16).astype(np.uint32) for k, v in a.items()}
assert a.keys() == b.keys(), (sorted(a.keys() ^ b.keys()))
bad = [k for k in a if not np.array_equal(a[k], b[k])]
assert not bad, f"{len(bad)} tensors differ, first {bad[0]}"
print(f"{len(a)} tensors bitwise equal")
PY
}
size="hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2"
for type in gpt2 llama mistral qwen2 qwen3 gemma gemma2 gemma3; do
    case $type in
    gpt2) model="{type: gpt2, seq_len: 16, hidden_dim: 32, num_layers: 2, num_heads: 2}" ;;
    llama) model="{type: llama, seq_len: 16, $size, rope_scaling: {rope_type: llama3, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16}}" ;;
    mistral) model="{type: mistral, seq_len: 16, $size, sliding_window: 8}" ;;
    qwen2) model="{type: qwen2, seq_len: 16, $size, tie_word_embeddings: true}" ;;
    qwen3) model="{type: qwen3, seq_len: 16, $size, head_dim: 16, use_sliding_window: true, sliding_window: 4, max_window_layers: 1}" ;;
    gemma) model="{type: gemma, seq_len: 16, $size, head_dim: 8, tie_word_embeddings: false, attention_bias: true}" ;;
    gemma2) model="{type: gemma2, seq_len: 16, $size, head_dim: 8, sliding_window: 4, query_pre_attn_scalar: 12, final_logit_softcapping: 5.0, attn_logit_softcapping: 6.0}" ;;
    gemma3) model="{type: gemma3, seq_len: 16, $size, head_dim: 8, sliding_window: 4, layer_types: [full_attention, sliding_attention], rope_local_base_freq: 500.0, rope_scaling: {rope_type: linear, factor: 2.0}, final_logit_softcapping: 7.0}" ;;
    esac
    cat > $type.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer: {num_train_steps: 3, train_batch_size: 4, num_threads: 1, id: $type, tracker: [], checkpointer: {base_path: $work/ckpt}}
YAML
    out=$(B train $type.yaml 2>&1) || { fail "$type: train: $out"; continue; }
    eval="data: {train_urls: [$work/small.txt], validation_urls: [$work/small.txt], tokenizer: $tok}
trainer: {max_eval_batches: 4, train_batch_size: 4, num_threads: 1}"
    printf 'model: %s\n%s\n' "$model" "$eval" > $type.eval.yaml
    printf 'model: {seq_len: 16}\n%s\n' "$eval" > hf.eval.yaml
    ck=ckpt/$type/step-3
    for shard in "" "--max-shard-size 20KB"; do
        tag=$type${shard:+-sharded}
        # shellcheck disable=SC2086
        out=$(B export --checkpoint $ck --out $tag.hf $shard 2>&1) || { fail "$tag: export: $out"; continue; }
        if [ -n "$shard" ]; then
            [ -f $tag.hf/model.safetensors.index.json ] || fail "$tag: not sharded: $(ls $tag.hf)"
        fi
        out=$(B import $tag.hf --out $tag.ckpt 2>&1) || { fail "$tag: import: $out"; continue; }
        same $ck/model.safetensors $tag.ckpt/model.safetensors > /dev/null ||
            fail "$tag: f32 export then import changed the parameters"
        # the model config.json describes is the run's: the same loss on the same data, to the bit
        a=$(B eval $type.eval.yaml --checkpoint $ck --json 2> err.txt) || fail "$tag: eval: $(cat err.txt)"
        b=$(B eval hf.eval.yaml --hf $tag.hf --json 2> err.txt) || fail "$tag: eval --hf: $(cat err.txt)"
        a=$(echo "$a" | sed -n 's/.*"eval\/loss": \([^,]*\),.*/\1/p') b=$(echo "$b" | sed -n 's/.*"eval\/loss": \([^,]*\),.*/\1/p')
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "$tag: eval loss $a from the checkpoint, '$b' from the export's config.json"
        # shellcheck disable=SC2086
        out=$(B export --checkpoint $ck --out $tag.bf16 --dtype bf16 $shard 2>&1) ||
            { fail "$tag: export bf16: $out"; continue; }
        out=$(B import $tag.bf16 --out $tag.bf16.ckpt 2>&1) || { fail "$tag: import bf16: $out"; continue; }
        same $ck/model.safetensors $tag.bf16.ckpt/model.safetensors bf16 > /dev/null ||
            fail "$tag: a bf16 export imports to other values than the checkpoint's rounded to bf16"
        # shellcheck disable=SC2086
        out=$(B export --checkpoint $tag.bf16.ckpt --out $tag.bf16.again --dtype bf16 $shard 2>&1) ||
            { fail "$tag: export of the bf16 import: $out"; continue; }
        for f in $tag.bf16/*.safetensors; do
            cmp -s "$f" "$tag.bf16.again/${f##*/}" || fail "$tag: ${f##*/} differs after a bf16 round trip"
        done
    done
    echo "$type: f32 and bf16, single and sharded: export then import is bitwise"
done
[ $fails = 0 ] && echo "hf round trip: bitwise for every model type"
exit $((fails > 0))
