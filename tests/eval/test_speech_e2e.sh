#!/bin/sh
# A small Whisper learns to hear, end to end: scripts/make-speech-data reads 32 Brown sentences
# (espeak-ng, six accents, two voice genders, 130-200 words a minute, every fifth clip FLAC);
# bora train trains examples/whisper-speech.yaml's model on them for 300 steps; its loss must
# fall below 0.05 nats (from 10.8: a decoder that ignored the audio could not go below the
# ln(32)/7 nats a token that choosing among the sentences costs), bora eval's word error rate
# on the same clips must be below 5% (measured: 0%), and bora transcribe of them with and
# without the KV cache must print the same lines. Held-out sentences are scripts/demo-speech's
# concern: they take this model an hour of training on a few thousand clips (README: 34% WER).
# Labelled slow: about five minutes. One thread: on a machine shared with other work, two
# OpenMP threads waiting on each other at every small kernel make each step several times
# slower.
# usage: test_speech_e2e.sh BORA PLUGIN_DIR BROWN_TXT WORK_DIR REPO_DIR
set -u
bora=$1 plugins=$2 brown=$3 work=$4 repo=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$repo/scripts/make-speech-data" speech --brown "$brown" --train 32 --validation 1 \
    --max-words 8 --max-seconds 3 --vocab 1000 || exit 1
b() { "$bora" --plugin-dir "$plugins" "$@"; }
set -- --data.train_urls="[$work/speech/train.jsonl]" \
    --data.validation_urls="[$work/speech/train.jsonl]" \
    --data.tokenizer="$repo/tests/data/whisper-tokenizer/tokenizer.json" \
    --data.cache_dir="$work/cache" --trainer.checkpointer.base_path="$work/ckpt" \
    --trainer.id=speech --trainer.tracker="[jsonl]" --trainer.num_train_steps=300 \
    --optimizer.warmup=30 --trainer.steps_per_eval=300 --trainer.num_threads=1
b train "$repo/examples/whisper-speech.yaml" "$@" > train.log 2>&1 || { tail -n 30 train.log; exit 1; }
first=$(grep -m 1 '^step ' train.log | awk '{print $4}')
last=$(grep '^step ' train.log | tail -n 10 | awk '{s += $4} END {printf "%.4f", s / NR}')
echo "loss: $first at step 1, $last over the last 10 steps"
awk -v a="$last" 'BEGIN {exit !(a < 0.05)}' || fail "the loss fell only to $last"

json=$(b eval "$repo/examples/whisper-speech.yaml" "$@" --checkpoint "$work/ckpt/speech" --json) ||
    fail "bora eval: $json"
echo "$json"
wer=$(echo "$json" | sed -n 's/.*"eval\/wer": \([^,}]*\).*/\1/p')
echo "word error rate on the 32 clips: $wer"
[ -n "$wer" ] && awk -v w="$wer" 'BEGIN {exit !(w < 0.05)}' || fail "the word error rate is $wer"

clips=$(sed 's/.*"audio": "\([^"]*\)".*/speech\/\1/' speech/train.jsonl | head -n 8)
ckpt=$(ls -d "$work"/ckpt/speech/step-* | sort -t- -k2 -n | tail -n 1)
# shellcheck disable=SC2086
with=$(OMP_NUM_THREADS=1 b transcribe --checkpoint "$ckpt" $clips 2>/dev/null) ||
    fail "transcribe: $with"
# shellcheck disable=SC2086
without=$(OMP_NUM_THREADS=1 b transcribe --checkpoint "$ckpt" --no-cache $clips 2>/dev/null) ||
    fail "--no-cache"
[ "$with" = "$without" ] || fail "the KV cache and the full recompute heard different words:
$with
---
$without"
echo "$with"
[ $fails -eq 0 ] && echo "speech e2e: all checks passed"
exit $((fails > 0))
