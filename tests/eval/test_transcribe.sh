#!/bin/sh
# bora transcribe as a user meets it, on a small Whisper with random weights (a Hugging Face
# folder written by transcribe_torch.py) and clips espeak-ng speaks: the greedy ids with the KV
# cache (prefill, then one decode step a token) equal the full recompute's (--no-cache) and an
# independent float64 PyTorch greedy decoder's (transcribe_torch.py); --max-tokens bounds them;
# the text has no special tokens; bad clips (missing, not audio, longer than the model hears)
# are each named while the good ones are still transcribed (exit status 1); bad options are
# refused.
# usage: test_transcribe.sh BORA PLUGIN_DIR TOKENIZER WORK_DIR MEL_REF_PY TRANSCRIBE_TORCH_PY
set -u
# One thread: a decode step is many small kernels, and on a shared machine two OpenMP threads
# wait on each other at every one of them (the same tokens either way).
export OMP_NUM_THREADS=1
bora=$1 plugins=$2 tok=$3 work=$4 mel_ref=$5 ref=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
lacks() { case $1 in *"$2"*) fail "'$2' in:
$1" ;; esac; }

/usr/bin/python3 "$ref" --write-model hf "$tok" || { [ $? -eq 77 ] && exit 77; exit 1; }
say() { # say NAME VOICE TEXT: a 16 kHz mono WAV
    espeak-ng -v "$2" -s 170 -w "$1.22k.wav" "$3" && sox -R -D -G -q "$1.22k.wav" -r 16000 -c 1 -b 16 "$1" &&
        rm "$1.22k.wav" || { echo "cannot make $1 (espeak-ng, sox)"; exit 1; }
}
say a.wav en-us "the jury said friday"
say b.wav en-gb+f3 "it was a good day"
say c.wav en+m3 "what do you think of it"
sox -R -q c.wav -r 44100 -c 2 c.flac # another rate, two channels, FLAC
clips="a.wav b.wav c.wav"
tx() { "$bora" --plugin-dir "$plugins" transcribe --hf hf "$@"; }

out=$(tx $clips c.flac --ids 2>&1) || fail "transcribe: $out"
echo "$out"
has "$out" "KV cache"
has "$out" "4 clips (0 failed)"
for c in $clips c.flac; do
    echo "$out" | grep -q "^$c	" || fail "no transcript line for $c"
done
lacks "$out" "<|"
full=$(tx $clips c.flac --ids --no-cache 2>&1) || fail "transcribe --no-cache: $full"
has "$full" "no KV cache"
[ -n "$(echo "$out" | grep ': ids \[')" ] &&
    [ "$(echo "$out" | grep ': ids \[')" = "$(echo "$full" | grep ': ids \[')" ] ||
    fail "the KV cache and the full recompute gave different ids:
$out
$full"
[ "$(echo "$out" | grep "	")" = "$(echo "$full" | grep "	")" ] || fail "different texts"

# against the float64 reference (16 kHz WAVs: the reference features read WAV)
echo "$out" > bora.txt
/usr/bin/python3 "$ref" --check hf "$mel_ref" 1000 bora.txt $clips || fail "against PyTorch"

# --max-tokens bounds the new tokens
short=$(tx a.wav --ids --max-tokens 3 2>&1) || fail "--max-tokens 3: $short"
n=$(echo "$short" | sed -n 's/^a.wav: ids \[\(.*\)\]$/\1/p' | tr ',' '\n' | grep -c .)
[ "$n" -le 3 ] || fail "--max-tokens 3 gave $n ids: $short"
first3=$(echo "$short" | sed -n 's/^a.wav: ids \[\(.*\)\]$/\1/p')
echo "$out" | grep '^a.wav: ids' | grep -qF "ids [$first3" ||
    fail "--max-tokens 3 gave [$first3], not the start of the full transcript"

# bad clips are named, the good one still runs, the exit status says something failed
echo "not audio at all" > text.wav
sox -n -r 16000 -c 1 -b 16 long.wav synth 5 sine 440
bad=$(tx missing.wav text.wav long.wav a.wav 2>&1) && fail "bad clips passed: $bad"
has "$bad" "missing.wav"
has "$bad" "text.wav"
has "$bad" "long.wav"
has "$bad" "the model hears at most 3.00 s"
has "$bad" "4 clips (3 failed)"
echo "$bad" | grep -q "^a.wav	" || fail "the good clip was not transcribed: $bad"

# options
o=$(tx 2>&1) && fail "no clip accepted"
has "$o" "one or more audio files"
o=$(tx a.wav --max-tokens 0 2>&1) && fail "--max-tokens 0 accepted"
has "$o" "--max-tokens"
o=$(tx a.wav --max-tokenz 3 2>&1) && fail "--max-tokenz accepted"
has "$o" "did you mean '--max-tokens'"
o=$(tx a.wav --language klingon 2>&1) && fail "--language klingon accepted"
has "$o" "klingon"
o=$("$bora" --plugin-dir "$plugins" transcribe --checkpoint nowhere a.wav 2>&1) && fail "no checkpoint"
has "$o" "nowhere"

[ $fails -eq 0 ] && echo "transcribe: all checks passed"
exit $((fails > 0))
