#!/bin/sh
# The audio dataset (data.type: audio) end to end on clips made here by espeak-ng and sox (WAV
# at 22.05 kHz, FLAC at 16 kHz, 44.1 kHz stereo WAV) and bad ones (missing, too long, empty,
# NaN, cut short, not audio, no text, text too long, invalid JSON):
#   test_audio_cache   the cache and the loader against bora_mel_of_bytes, transformers' golden
#                      features and Hugging Face's own token ids (whisper_ids.js)
#   bora               the bad clips named by manifest file and line; bora cache; training a
#                      toy audio model (audio_probe) with validation; the refusals of an audio
#                      dataset for a text model and a text dataset for an audio model
# usage: test_audio_cache.sh TEST_BIN BORA PLUGIN_DIR AUDIO_PLUGIN_DIR NODE NPM TESTS_DIR WORK
set -u
test_bin=$1 bora=$2 plugins=$3 audio_plugins=$4 node=$5 npm=$6 tests=$7 work=$8
for tool in espeak-ng sox; do
    command -v $tool >/dev/null || { echo "$tool is missing: run scripts/setup" >&2; exit 1; }
done
[ -x "$node" ] && [ -d "$npm/tokenizers" ] || { echo "node or npm tokenizers missing" >&2; exit 1; }
tok=$tests/data/whisper-tokenizer/tokenizer.json
rm -rf "$work" && mkdir -p "$work/clips" "$work/sub" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# ---- the clips ----
espeak-ng -w clips/a.wav "hello world" || exit 2
espeak-ng -w fox.wav "the quick brown fox" && sox fox.wav -r 16000 clips/b.flac || exit 2
espeak-ng -w dog.wav "jumps over the lazy dog" && sox dog.wav -r 44100 -c 2 clips/c.wav || exit 2
espeak-ng -w six.wav "five six" && sox six.wav -r 44100 -c 2 -b 24 clips/d.wav || exit 2
cp "$tests/data/whisper-mel/hello16k.wav" clips/
sox -n -r 16000 -c 1 -b 16 clips/long.wav synth 31 sine 440 || exit 2
head -c 3000 clips/a.wav > clips/cut.wav
echo "these bytes are not audio" > clips/notaudio.wav
/usr/bin/python3 - <<'PY' || exit 2
import struct
def wav(path, fmt, bits, samples, packed):
    data = b"".join(struct.pack(packed, s) for s in samples)
    hdr = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(data), b"WAVE", b"fmt ", 16, fmt, 1,
                      16000, 16000 * bits // 8, bits // 8, bits, b"data", len(data))
    open(path, "wb").write(hdr + data)
wav("clips/nan.wav", 3, 32, [0.1, float("nan"), 0.2] * 1000, "<f")
wav("clips/empty.wav", 1, 16, [], "<h")
PY
long_text=$(printf 'word %.0s' $(seq 1 40))
cat > train.jsonl <<JSONL
{"audio": "clips/a.wav", "text": "Hello world."}
{"audio": "clips/b.flac", "text": "The quick brown fox"}

{"audio": "clips/missing.wav", "text": "nothing"}
{"audio": "clips/c.wav", "text": " jumps over the lazy dog, naïvely"}
{"audio": "clips/long.wav", "text": "too long"}
{"audio": "clips/a.wav"}
{"audio": "clips/empty.wav", "text": "empty"}
{"audio": "clips/nan.wav", "text": "not a number"}
{"audio": "clips/cut.wav", "text": "cut short"}
{"audio": "clips/a.wav", "text": "$long_text"}
{"audio": "clips/a.wav", "text":
{"audio": "clips/notaudio.wav", "text": "bytes"}
JSONL
printf '%s\n' '{"audio": "clips/hello16k.wav", "text": "The quick brown fox jumps over the lazy dog."}' \
    '{"audio": "clips/a.wav", "text": "Again: hello, world!"}' | gzip -n > more.jsonl.gz
printf '%s\n' "{\"audio\": \"$work/clips/b.flac\", \"text\": \"four\"}" \
    '{"audio": "../clips/d.wav", "text": "five six"}' > sub/abs.jsonl
# The good clips in cache order (manifests in order, lines in order), and their ids.
cat > good.jsonl <<JSONL
{"audio": "clips/a.wav", "text": "Hello world."}
{"audio": "clips/b.flac", "text": "The quick brown fox"}
{"audio": "clips/c.wav", "text": " jumps over the lazy dog, naïvely"}
{"audio": "clips/hello16k.wav", "text": "The quick brown fox jumps over the lazy dog."}
{"audio": "clips/a.wav", "text": "Again: hello, world!"}
{"audio": "$work/clips/b.flac", "text": "four"}
{"audio": "clips/d.wav", "text": "five six"}
JSONL
sed 's/}$/, "language": "en"}/' good.jsonl > good_en.jsonl
export NODE_PATH="$npm"
"$node" "$tests/data_pipeline/whisper_ids.js" "$tok" good.jsonl expected.jsonl || exit 1
"$node" "$tests/data_pipeline/whisper_ids.js" "$tok" good_en.jsonl expected_en.jsonl || exit 1

# ---- the cache and the loader ----
"$test_bin" "$work" "$tok" expected.jsonl expected_en.jsonl "$tests/data/whisper-mel" \
    > cache.log 2>&1 || fail "test_audio_cache:
$(cat cache.log)"
for want in "train.jsonl:4: $work/clips/missing.wav: No such file" \
    "train.jsonl:6: $work/clips/long.wav" "train.jsonl:7: no \"text\" string field (data.text_key)" \
    "train.jsonl:8: $work/clips/empty.wav" "train.jsonl:9: $work/clips/nan.wav" \
    "train.jsonl:10: $work/clips/cut.wav: truncated WAV" \
    "train.jsonl:11: its text is " "the decoder takes 32 (the model's max_target_positions)" \
    "train.jsonl:12: invalid JSON" "train.jsonl:13: $work/clips/notaudio.wav: not readable as audio"; do
    grep -qF "$want" cache.log || fail "no '$want' in the bad clips' messages:
$(grep 'bad clip' cache.log | head -20)"
done
grep -q "all checks passed" cache.log && grep -q "golden clip from the cache" cache.log ||
    fail "test_audio_cache did not pass: $(tail -5 cache.log)"

# ---- bora: cache, train with validation, eval, refusals ----
# expect STATUS NEEDLE ARGS...: run bora, check the exit status and that the output has NEEDLE
out=""
expect() {
    want=$1 needle=$2
    shift 2
    out=$("$bora" --plugin-dir "$plugins" --plugin-dir "$audio_plugins" "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "bora $*: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "bora $*: no '$needle' in:
$out" ;; esac
}
cat > run.yaml <<YAML
model: {type: audio_probe, max_target_positions: 32}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data:
  type: audio
  train_urls: [$work/train.jsonl, $work/more.jsonl.gz, $work/sub/abs.jsonl]
  validation_urls: [$work/sub/abs.jsonl]
  tokenizer: $tok
  max_bad_fraction: 0.6
  shuffle: true
  cache_dir: $work/run-cache
trainer:
  num_train_steps: 4
  train_batch_size: 2
  num_threads: 2
  steps_per_eval: 2
  checkpointer: {base_path: $work/ckpt, save_interval: 0s}
YAML
expect 0 "cache data.train_urls: 3 manifests, 7 clips" cache run.yaml --workers 2
case $out in *"cache data.validation_urls: 1 manifests, 2 clips"*) ;;
    *) fail "bora cache: no validation cache in: $out" ;; esac
expect 0 "trained 4 steps" train run.yaml --trainer.id=audio
case $out in *"eval at step 2: loss"*) ;; *) fail "no evaluation at step 2 in: $out" ;; esac
case $out in *"3 manifests reused"*) ;; *) fail "bora train did not reuse bora cache's shards: $out" ;; esac
expect 0 "(2 sequences," eval run.yaml --checkpoint "$work/ckpt/audio"

sed 's/^model: .*/model: {type: gpt2, seq_len: 32, hidden_dim: 16, num_layers: 1, num_heads: 2}/' \
    run.yaml > gpt2.yaml
expect 1 "data.type: audio, but model gpt2 (model.type) reads no input_features" train gpt2.yaml
expect 1 "model audio_probe (model.type) reads input_features, audio, but data.type is text" \
    train run.yaml --data.type=text
expect 1 "data.type: 'speech' is neither text nor audio" train run.yaml --data.type=speech
expect 1 "data.language/data.task: Whisper language 'klingon' is not one of Whisper's" \
    train run.yaml --data.language=klingon
expect 1 "data.validation_windows: holds out text windows" train run.yaml \
    --data.validation_urls=[] --data.validation_windows=2
expect 1 "9 of 16 clips are bad" train run.yaml --data.max_bad_fraction=0.1 \
    --data.cache_dir="$work/strict-cache"

[ "$fails" -eq 0 ] && echo "test_audio_cache: all passed"
exit $((fails > 0))
