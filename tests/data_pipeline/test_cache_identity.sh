#!/bin/sh
# What the token cache holds, as a user meets it through bora cache and bora train: a shard
# knows its tokenizer, so with meta.json deleted a cache of GPT-2 ids trained with the bytes
# tokenizer is tokenized again (not read as the wrong ids), and a shard of an older format is
# tokenized again; ids outside the vocabulary in a shard are refused naming it; a resume
# compares the data's content, not file times or where the cache lives: `touch` on a source,
# data.cache_rebuild: true, another cache_dir and cache_workers all resume to the weights of a
# run never interrupted, and a source with other content (its size unchanged) is refused, by
# the cache (with meta.json or without; --rebuild makes that shard again) and, rebuilt, by the
# resume, naming data. data.cache_rebuild makes again a damaged shard and keeps a touched
# source's shard. A fresh run takes the data's digest at its first save, not before training.
# usage: test_cache_identity.sh BORA PLUGIN_DIR TOKENIZER OTHER_TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 other=$4 text=$5 work=$6
rm -rf "$work" && mkdir -p "$work/src" && cd "$work" || exit 2
export XDG_CACHE_HOME="$work/xdg" # the default cache directory of part 4
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
b() { "$bora" --plugin-dir "$plugins" "$@"; }
losses() { echo "$1" | grep '^step ' | awk '{print $2, $4}'; }

# four .txt sources from 200 kB of the Brown text
head -c 200000 "$text" > all.txt
split -n l/4 -d -a 1 all.txt src/part
for f in src/part?; do mv "$f" "$f.txt"; done
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 32, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2}
data:
  train_urls: ["$work/src/part{0..3}.txt"]
  tokenizer: $tok
  cache_dir: $work/c
trainer:
  num_train_steps: 8
  train_batch_size: 4
  num_threads: 1
  seed: 3
  tracker: []
  checkpointer: {base_path: $work/ckpt, save_interval: 0s, keep: [{every: 4}]}
YAML

# 1. another tokenizer's shards with meta.json gone: tokenized again, the same losses as a
# fresh cache
out=$(b cache run.yaml --data.tokenizer="$other" --data.cache_dir=g 2>&1) || fail "cache: $out"
rm g/meta.json
out=$(b train run.yaml --data.cache_dir=g --trainer.id=g 2>&1) ||
    fail "training on another tokenizer's shards: $out"
has "$out" "data: cache shard g/shard-00000.bin (of $work/src/part0.txt) was tokenized by another tokenizer"
has "$out" "tokenizing it again"
fresh=$(b train run.yaml --data.cache_dir=f --trainer.id=f 2>&1) || fail "fresh: $fresh"
[ -n "$(losses "$fresh")" ] && [ "$(losses "$out")" = "$(losses "$fresh")" ] ||
    fail "losses differ from a fresh cache's:
$(losses "$out")
---
$(losses "$fresh")"
# (a run may end before its workers finish: bora cache completes both caches)
out=$(b cache run.yaml --data.cache_dir=g 2>&1) || fail "cache again: $out"
case $out in *"another tokenizer"*) fail "shards made again are stale again: $out" ;; esac
out=$(b cache run.yaml --data.cache_dir=f 2>&1) || fail "cache f: $out"
for i in 0 1 2 3; do
    cmp -s g/shard-0000$i.bin f/shard-0000$i.bin || fail "shard $i differs from a fresh cache's"
done

# 2. a shard of the previous format (version 1, no identity) is tokenized again
/usr/bin/python3 - g/shard-00002.bin <<'PY' || fail "cannot patch the version"
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(8)
    f.write(struct.pack("<I", 1))
PY
out=$(b cache run.yaml --data.cache_dir=g 2>&1) || fail "an old shard: $out"
has "$out" "data: cache shard g/shard-00002.bin (of $work/src/part2.txt) was written by an older bora (shard format 1"
has "$out" "(1 tokenized now, 3 reused"
cmp -s g/shard-00002.bin f/shard-00002.bin || fail "the shard made again differs"

# 3. an id outside the vocabulary (a well-formed shard, checksum and all) is refused at load,
# naming the shard, before any step
/usr/bin/python3 - g/shard-00001.bin <<'PY' || fail "cannot write the bad id"
import struct, sys
def fnv(data, h=1469598103934665603):
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
b = bytearray(open(sys.argv[1], "rb").read())
# the header: magic, version, width, tokens, documents, records, bad, checksum (at 48),
# message length, reserved, tokenizer, vocabulary, source digest, token digest (at 88); then
# the tokens (u16), which the token digest covers, and the checksum all from the tokenizer on
struct.pack_into("<H", b, 96 + 2 * 5, 300)  # token 5: past the 257 ids
n_tokens = struct.unpack_from("<Q", b, 16)[0]
struct.pack_into("<Q", b, 88, fnv(bytes(b[96:96 + 2 * n_tokens])))
struct.pack_into("<Q", b, 48, fnv(bytes(b[64:])))
open(sys.argv[1], "wb").write(b)
PY
out=$(b train run.yaml --data.cache_dir=g --trainer.id=h 2>&1) && fail "an id past the vocabulary was taken"
has "$out" "cache shard g/shard-00001.bin (of $work/src/part1.txt): token 5 is id 300, outside the tokenizer's 257 ids"
case $out in *"kernel"*) fail "the bad id reached a kernel: $out" ;; esac
# data.cache_rebuild makes that shard again, and only it
out=$(b cache run.yaml --data.cache_dir=g --rebuild 2>&1) || fail "--rebuild, a bad shard: $out"
has "$out" "data: cache shard g/shard-00001.bin (of $work/src/part1.txt): token 5 is id 300, outside the tokenizer's 257 ids; tokenizing it again (data.cache_rebuild)"
has "$out" "(1 tokenized now, 3 reused"
cmp -s g/shard-00001.bin f/shard-00001.bin || fail "the bad shard made again differs"

# 4. resumes: a run never interrupted, then one resumed from step 4 after each change (bora
# cache completes the cache first where a check needs every shard: a run may end before its
# workers do)
out=$(b train run.yaml --trainer.id=a 2>&1) || fail "run a: $out"
ref=ckpt/a/step-8/model.safetensors
[ -f $ref ] || fail "no $ref"
resume() { # NAME ARGS...: resume run NAME from step 4 with ARGS; its output in $out
    name=$1
    shift
    rm -rf "ckpt/$name/step-8"
    out=$(b train run.yaml --trainer.id="$name" "$@" 2>&1) || fail "resume $name $*: $out"
    has "$out" "resuming run $name from $work/ckpt/$name/step-4"
    cmp -s "$ref" "ckpt/$name/step-8/model.safetensors" ||
        fail "resumed $name ($*): the weights differ from the uninterrupted run's"
}
out=$(b train run.yaml --trainer.id=r 2>&1) || fail "run r: $out"
out=$(b cache run.yaml 2>&1) || fail "completing the cache: $out"
touch src/part1.txt
resume r
has "$out" "data: $work/src/part1.txt has a new modification time; read again, its content is the same"
out=$(b train run.yaml --trainer.id=r --trainer.num_train_steps=8 2>&1)
case $out in *"read again"*) fail "the touched source was read again twice: $out" ;; esac
# data.cache_rebuild: true makes again what differs, not the shards of a touched source whose
# content is the same
touch src/part2.txt
resume r --data.cache_rebuild=true
has "$out" "data: $work/src/part2.txt has a new modification time; read again, its content is the same"
case $out in *"rebuilding"* | *"tokenizing"*) fail "cache_rebuild after a touch made shards again: $out" ;; esac
resume r --data.cache_dir="$work/other" --data.cache_workers=1
# the default directory, keyed by the sources' times: a touch makes a new one, the same data
out=$(b train run.yaml --trainer.id=d --data.cache_dir= 2>&1) || fail "run d: $out"
touch src/part3.txt
resume d --data.cache_dir=

# 5. other content, the size unchanged: the cache refuses it; rebuilt, the resume refuses it
out=$(b cache run.yaml 2>&1) || fail "completing the cache: $out"
sed -i '1s/^./X/' src/part2.txt
rm -rf ckpt/r/step-8
out=$(b train run.yaml --trainer.id=r 2>&1) && fail "a source with other content was taken"
has "$out" "data.cache_dir $work/c was built for other sources (file 3, $work/src/part2.txt, has changed since: its content differs)"
rm c/meta.json
out=$(b cache run.yaml 2>&1) && fail "a source with other content was taken with meta.json gone"
has "$out" "data.cache_dir $work/c was built for other sources (file 3, $work/src/part2.txt, has changed since: its content differs)"
[ -e c/meta.json ] && fail "meta.json written for shards that were refused"
out=$(b cache run.yaml --rebuild 2>&1) || fail "--rebuild with meta.json gone: $out"
has "$out" "data: $work/src/part2.txt has changed since its shard $work/c/shard-00002.bin was made; tokenizing it again"
has "$out" "(1 tokenized now, 3 reused"
out=$(b train run.yaml --trainer.id=r --data.cache_rebuild=true 2>&1) &&
    fail "resumed on other data"
has "$out" "differs from this one"
has "$out" "data: \"fnv:"
# a source of another size: refused; with --rebuild its shard alone is made again
echo "more text" >> src/part3.txt
out=$(b cache run.yaml 2>&1) && fail "a source of another size was taken"
has "$out" "data.cache_dir $work/c was built for other sources (file 4, $work/src/part3.txt, has changed since"
out=$(b cache run.yaml --rebuild 2>&1) || fail "--rebuild, a source of another size: $out"
has "$out" "data: $work/src/part3.txt has changed since its shard $work/c/shard-00003.bin was made; tokenizing it again"
has "$out" "(1 tokenized now, 3 reused"

# 6. a fresh run does not read its sources for the data's digest before training: the digest
# is taken at its first save, from the shards finished by then (one worker, 16 files: most are
# still to be tokenized when the first step runs)
mkdir -p many && split -n l/16 -d -a 2 all.txt many/p && for f in many/p??; do mv "$f" "$f.txt"; done
sed "s|src/part{0..3}.txt|many/p{00..15}.txt|; s|cache_dir: .*|cache_dir: $work/lazy|" run.yaml > lazy.yaml
out=$(b train lazy.yaml --trainer.id=lazy --data.cache_workers=1 --trainer.num_train_steps=5 2>&1) ||
    fail "run lazy: $out"
first_step=$(echo "$out" | grep -n '^step 1/' | cut -d: -f1)
reading=$(echo "$out" | grep -n 'not yet tokenized for the digest' | cut -d: -f1)
[ -n "$first_step" ] || fail "no step 1: $out"
[ -z "$reading" ] || [ "$reading" -gt "${first_step:-0}" ] ||
    fail "the sources were read for the digest before the first step: $out"
[ "$(echo "$out" | grep -c 'not yet tokenized for the digest')" -le 1 ] ||
    fail "the sources were read for the digest more than once: $out"
grep -q '"data": "fnv:' ckpt/lazy/step-5/trainer.json || fail "no data digest in the checkpoint"
out=$(b cache lazy.yaml 2>&1) || fail "cache lazy: $out"
rm -rf ckpt/lazy/step-5
out=$(b train lazy.yaml --trainer.id=lazy --trainer.num_train_steps=5 2>&1) ||
    fail "resume lazy (the digest taken while tokenizing, then from the shards): $out"
has "$out" "resuming run lazy from $work/ckpt/lazy/step-4"

[ $fails -eq 0 ] && echo "test_cache_identity: ok" || echo "test_cache_identity: $fails failures"
[ $fails -eq 0 ]
