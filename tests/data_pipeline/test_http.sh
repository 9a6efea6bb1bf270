#!/bin/sh
# http(s) sources as a user meets them, against a server this test starts on 127.0.0.1
# (flaky_http.py): files served whole give the cache a local copy gives, byte for byte; a server
# that drops every file's first two connections midway is resumed with Range requests and still
# gives those bytes; one that always drops fails naming the URL and the bytes it got, leaving no
# ledger (nothing truncated is used); a missing file is a 404, not retried; bora train reads a
# brace range of URLs.
# usage: test_http.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR SERVER_PY
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5 server=$6
rm -rf "$work" && mkdir -p "$work/files" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
b() { "$bora" --plugin-dir "$plugins" "$@"; }

# six files: three .txt, three .jsonl.gz, from the first 6000 lines of the text
head -n 6000 "$text" | split -l 1000 -d -a 1 - files/part
for i in 0 1 2; do mv "files/part$i" "files/part$i.txt"; done
for i in 3 4 5; do
    /usr/bin/python3 -c "
import json, sys
text = open(sys.argv[1]).read()
for block in text.split('\n\n'):
    if block.strip(): print(json.dumps({'text': block}))" "files/part$i" | gzip -n > "files/part$i.jsonl.gz"
    rm "files/part$i"
done

/usr/bin/python3 "$server" "$work/files" "$work/port" "$work/requests.log" 2> server.err &
server_pid=$!
trap 'kill $server_pid 2>/dev/null' EXIT
i=0
while [ ! -s port ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -s port ] || { echo "FAIL: the test server did not start: $(cat server.err)"; exit 1; }
base="http://127.0.0.1:$(cat port)"

cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 32, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2}
data:
  train_urls: ["$work/files/part{0..2}.txt", "$work/files/part{3..5}.jsonl.gz"]
  tokenizer: $tok
trainer: {num_train_steps: 4, train_batch_size: 4, num_threads: 1, tracker: [], checkpointer: {base_path: $work/ckpt}}
YAML
same_shards() { # same_shards DIR_A DIR_B: every shard byte-identical
    for s in "$1"/shard-*.bin; do
        cmp -s "$s" "$2/$(basename "$s")" || { fail "$(basename "$s") differs between $1 and $2"; return; }
    done
    [ "$(ls "$1"/shard-*.bin | wc -l)" -eq 6 ] || fail "$1 does not have 6 shards"
}

# 1. local files, then the same files over http
out=$(b cache run.yaml --data.cache_dir=local 2>&1) || fail "local cache: $out"
out=$(b cache run.yaml --data.cache_dir=ok \
    --data.train_urls="['$base/ok/part{0..2}.txt', '$base/ok/part{3..5}.jsonl.gz']" 2>&1) ||
    fail "http cache: $out"
has "$out" "6 files"
same_shards local ok
grep -q "127.0.0.1:$(cat port)\\\\/ok\\\\/part3.jsonl.gz" ok/meta.json || fail "meta.json does not name the URL"

# 2. every file dropped twice midway: resumed with Range', the same bytes
out=$(b cache run.yaml --data.cache_dir=flaky \
    --data.train_urls="['$base/flaky/part{0..2}.txt', '$base/flaky/part{3..5}.jsonl.gz']" 2>&1) ||
    fail "flaky http cache: $out"
has "$out" "resuming (try 2 of 6)"
has "$out" "complete after 3 tries"
same_shards local flaky
grep -q "^GET /flaky/part4.jsonl.gz bytes=" requests.log || fail "no Range request in the log"
echo "flaky: $(grep -c '^GET /flaky/.* bytes=' requests.log) resumed requests for 6 files"

# 3. a server that always drops: the URL, the bytes it got, no ledger
out=$(BORA_HTTP_TRIES=3 b cache run.yaml --data.cache_dir=broken \
    --data.train_urls="['$base/broken/part1.txt']" 2>&1) && fail "a broken download was taken"
has "$out" "$base/broken/part1.txt: "
has "$out" "after 3 tries (nothing of it is used)"
[ -f broken/ledger.json ] && fail "a ledger was written for a failed download"
ls broken/shard-*.bin > /dev/null 2>&1 && fail "a shard was written for a failed download"

# 4. a missing file: 404, asked once
n0=$(grep -c "part9" requests.log)
out=$(b cache run.yaml --data.cache_dir=missing --data.train_urls="['$base/ok/part9.txt']" 2>&1) &&
    fail "a missing URL was taken"
has "$out" "$base/ok/part9.txt: HTTP status 404 (not found)"
[ "$(grep -c "part9" requests.log)" -eq $((n0 + 1)) ] || fail "a 404 was retried"

# 5. training straight from URLs
out=$(b train run.yaml --data.cache_dir=train --trainer.id=h \
    --data.train_urls="['$base/flaky/part{0..5}.*']" 2>&1) && fail "a glob in a URL was taken"
has "$out" "$base/flaky/part0.*: HTTP status 404" # asked for as written, not globbed locally
out=$(b train run.yaml --data.cache_dir=train --trainer.id=h \
    --data.train_urls="['$base/ok/part{0..2}.txt']" 2>&1) || fail "train from URLs: $out"
has "$out" "trained 4 steps"

[ $fails -eq 0 ] && echo "test_http: all checks passed" || echo "test_http: $fails failures"
[ $fails -eq 0 ]
