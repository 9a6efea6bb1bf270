#!/bin/sh
# Whisper learns to hear: the README's second demo as a test. scripts/make-speech-data reads 600
# Brown sentences twice each (1,200 clips, six espeak-ng accents, two voice genders, 130-200
# words a minute; every fifth clip FLAC) and 60 held-out sentences once; bora train trains
# examples/whisper-speech.yaml on them; the loss must fall below LOSS_MAX (from 10.8 at step
# 1), and bora eval's word error rate on the held-out sentences — greedy transcripts of speech
# the model never heard, of sentences it never saw — must be below WER_MAX; bora transcribe of
# the same clips, with and without the KV cache, must print the same lines.
# Labelled slow: 2,000 steps of 16 clips (about twenty minutes on two free cores).
# usage: test_speech_e2e.sh BORA PLUGIN_DIR BROWN_TXT WORK_DIR REPO_DIR [LOSS_MAX WER_MAX]
set -u
bora=$1 plugins=$2 brown=$3 work=$4 repo=$5 loss_max=${6:-2.0} wer_max=${7:-0.5}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$repo/scripts/make-speech-data" speech --brown "$brown" --train 600 --validation 60 --copies 2 \
    --max-words 8 --max-seconds 3 --vocab 600 || exit 1
b() { "$bora" --plugin-dir "$plugins" "$@"; }
set -- --data.train_urls="[$work/speech/train.jsonl]" \
    --data.validation_urls="[$work/speech/validation.jsonl]" \
    --data.tokenizer="$repo/tests/data/whisper-tokenizer/tokenizer.json" \
    --data.cache_dir="$work/cache" --trainer.checkpointer.base_path="$work/ckpt" \
    --trainer.id=speech --trainer.tracker="[jsonl]"
b train "$repo/examples/whisper-speech.yaml" "$@" > train.log 2>&1 || { tail -n 30 train.log; exit 1; }
first=$(grep -m 1 '^step ' train.log | awk '{print $4}')
last=$(grep '^step ' train.log | tail -n 20 | awk '{s += $4} END {printf "%.4f", s / NR}')
echo "loss: $first at step 1, $last over the last 20 steps (at most $loss_max wanted)"
awk -v a="$last" -v m="$loss_max" 'BEGIN {exit !(a < m)}' || fail "the loss fell only to $last"

json=$(b eval "$repo/examples/whisper-speech.yaml" "$@" --checkpoint "$work/ckpt/speech" --json) ||
    fail "bora eval: $json"
echo "$json"
wer=$(echo "$json" | sed -n 's/.*"eval\/wer": \([^,}]*\).*/\1/p')
echo "held-out word error rate: $wer (below $wer_max wanted)"
[ -n "$wer" ] && awk -v w="$wer" -v m="$wer_max" 'BEGIN {exit !(w < m)}' ||
    fail "the word error rate is $wer"

clips=$(sed 's/.*"audio": "\([^"]*\)".*/speech\/\1/' speech/validation.jsonl | head -n 20)
ckpt=$(ls -d "$work"/ckpt/speech/step-* | sort -t- -k2 -n | tail -n 1)
# shellcheck disable=SC2086
with=$(b transcribe --checkpoint "$ckpt" $clips 2>/dev/null) || fail "transcribe: $with"
# shellcheck disable=SC2086
without=$(b transcribe --checkpoint "$ckpt" --no-cache $clips 2>/dev/null) || fail "--no-cache"
[ "$with" = "$without" ] || fail "the KV cache and the full recompute heard different words:
$with
---
$without"
echo "$with" | head -n 10
[ $fails -eq 0 ] && echo "speech e2e: all checks passed"
exit $((fails > 0))
