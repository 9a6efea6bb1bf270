#!/bin/sh
# The token cache as a user meets it, through bora cache and bora train: the Brown text cut
# into 48 files (.txt, .jsonl, .jsonl.gz); built with 1 and with 2 workers, byte for byte the
# same shards and ledger; a build killed with SIGKILL midway keeps its finished shards and
# resumes to the same bytes; another tokenizer or changed sources are refused with the reason,
# and --rebuild rebuilds; a new seq_len reuses the cache; a run that starts while its cache is
# still being built (shuffled in eras) trains on exactly the batches of a run whose cache was
# complete; a corrupt shard is refused naming the file.
# usage: test_cache.sh BORA PLUGIN_DIR TOKENIZER OTHER_TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 other=$4 text=$5 work=$6
rm -rf "$work" && mkdir -p "$work/src" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
b() { "$bora" --plugin-dir "$plugins" "$@"; }

# 48 sources: 16 .txt, 16 .jsonl, 16 .jsonl.gz
split -n l/48 -d -a 2 "$text" src/part
i=0
for f in src/part*; do
    case $((i % 3)) in
    0) mv "$f" "$f.txt" ;;
    1) /usr/bin/python3 -c "import json,sys
for block in open(sys.argv[1]).read().split('\n\n'):
    if block.strip(): print(json.dumps({'text': block}))" "$f" > "$f.jsonl" && rm "$f" ;;
    2) /usr/bin/python3 -c "import json,sys
for block in open(sys.argv[1]).read().split('\n\n'):
    if block.strip(): print(json.dumps({'text': block}))" "$f" | gzip -n > "$f.jsonl.gz" && rm "$f" ;;
    esac
    i=$((i + 1))
done
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 32, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2}
data:
  train_urls: ["$work/src/part{00..47}.*"]
  tokenizer: $tok
trainer:
  num_train_steps: 8
  train_batch_size: 4
  num_threads: 1
  tracker: []
  checkpointer: {base_path: $work/ckpt}
YAML

# 1. one worker, two workers: the same bytes
out=$(b cache run.yaml --workers 1 --data.cache_dir=c1 2>&1) || fail "cache, 1 worker: $out"
echo "$out" | tail -n 1
has "$out" "cache data.train_urls: 48 files"
has "$out" "(48 tokenized now, 0 reused"
out=$(b cache run.yaml --workers 2 --data.cache_dir=c2 2>&1) || fail "cache, 2 workers: $out"
has "$out" "with 2 workers"
n=$(ls c1/shard-*.bin | wc -l)
[ "$n" -eq 48 ] || fail "$n shards, not 48"
for f in c1/shard-*.bin c1/ledger.json c1/meta.json; do
    cmp -s "$f" "c2/${f#c1/}" || fail "$f differs between 1 and 2 workers"
done
grep -q '"tokens":' c1/ledger.json || fail "the ledger has no token count"

# 2. a second run reuses everything
out=$(b cache run.yaml --data.cache_dir=c1 2>&1) || fail "cache again: $out"
has "$out" "(0 tokenized now, 48 reused"

# 3. killed midway, then resumed: the same bytes
"$bora" --plugin-dir "$plugins" cache run.yaml --workers 1 --data.cache_dir=c3 > kill.log 2>&1 &
pid=$!
i=0
while [ ! -e c3/shard-00002.bin ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
kill -KILL $pid
wait $pid 2>/dev/null
kept=$(ls c3/shard-*.bin 2>/dev/null | wc -l)
echo "killed the build with $kept of 48 shards done"
if [ -e c3/ledger.json ]; then
    echo "note: the build finished before the kill; the resume check is weaker"
fi
out=$(b cache run.yaml --data.cache_dir=c3 2>&1) || fail "resume: $out"
has "$out" "$kept reused"
for f in c1/shard-*.bin c1/ledger.json; do
    cmp -s "$f" "c3/${f#c1/}" || fail "$f differs after a killed build resumed"
done
ls c3 | grep -q tmp && fail "temporary files left: $(ls c3)"

# 4. another tokenizer, changed sources: refused with the reason; --rebuild rebuilds
out=$(b cache run.yaml --data.cache_dir=c1 --data.tokenizer="$other" 2>&1) &&
    fail "a cache of another tokenizer was taken"
has "$out" "data.cache_dir c1 was built for another tokenizer"
has "$out" "data.cache_rebuild: true"
out=$(b cache run.yaml --data.cache_dir=c3 --data.tokenizer="$other" --rebuild 2>&1) ||
    fail "--rebuild: $out"
has "$out" "rebuilding the cache in c3"
has "$out" "(48 tokenized now, 0 reused"
cp -p src/part05.jsonl.gz part05.keep
echo '{"text": "one more document"}' | gzip -n >> src/part05.jsonl.gz
out=$(b cache run.yaml --data.cache_dir=c1 2>&1) && fail "changed sources were taken"
has "$out" "was built for other sources (file 6, $work/src/part05.jsonl.gz, has changed since"
cp -p part05.keep src/part05.jsonl.gz
touch -r part05.keep src/part05.jsonl.gz
# the default directory is keyed by the sources: no refusal, a new cache
out=$(XDG_CACHE_HOME=$work/xdg b cache run.yaml 2>&1) || fail "default directory: $out"
has "$out" "$work/xdg/bora/tokens/"

# 5. training: a new seq_len reads the same cache; a run that builds its cache while it
# trains (eras of 8 windows) gives the losses of one whose cache was complete
out=$(b train run.yaml --data.cache_dir=c1 --trainer.id=a --data.shuffle=8 2>&1) ||
    fail "train on a complete cache: $out"
has "$out" "cached in c1"
out2=$(b train run.yaml --data.cache_dir=c1 --trainer.id=b --model.seq_len=24 2>&1) ||
    fail "train with another seq_len: $out2"
has "$out2" "windows of 24 (cached in c1"
out3=$(b train run.yaml --data.cache_dir=c4 --data.cache_workers=1 --trainer.id=c \
    --data.shuffle=8 2>&1) || fail "train while the cache builds: $out3"
case $out3 in *"files tokenized so far"* | *"tokenized into c4"*) ;; *) fail "no cache line: $out3" ;; esac
la=$(echo "$out" | grep '^step ' | awk '{print $2, $4}')
lc=$(echo "$out3" | grep '^step ' | awk '{print $2, $4}')
[ -n "$la" ] && [ "$la" = "$lc" ] || fail "losses differ with a growing cache:
$la
---
$lc"
out=$(b train run.yaml --data.cache_dir=c1 --trainer.id=d --data.shuffle=often 2>&1) &&
    fail "shuffle: often was taken"
has "$out" "data.shuffle: 'often' is not false, true or an era length"

# 6. a corrupt shard is refused, naming it
printf 'XXXX' | dd of=c1/shard-00007.bin bs=1 seek=100 conv=notrunc 2>/dev/null
out=$(b cache run.yaml --data.cache_dir=c1 2>&1) && fail "a corrupt shard was taken"
has "$out" "cache shard c1/shard-00007.bin"
has "$out" "its checksum does not match (corrupt)"
head -c 200 c2/shard-00001.bin > c1/shard-00007.bin
out=$(b cache run.yaml --data.cache_dir=c1 2>&1) && fail "a truncated shard was taken"
has "$out" "does not match its header (truncated?)"

# 7. a mixture of two datasets (files 0-23 and 24-47), 3:1 in blocks of 8 rows (two steps),
# then only the second from step 4; bora cache builds each dataset's cache; a typo in a
# dataset's keys is named with its line and the key meant
cat > mix.yaml <<YAML
model: {type: gpt2, seq_len: 32, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2}
data:
  configs:
    early: {train_urls: ["$work/src/part{00..23}.*"]}
    late: {train_urls: ["$work/src/part{24..47}.*"]}
  train_weights: [[0, {early: 3, late: 1}], [4, {late: 1}]]
  mixture_block_size: 8
  cache_dir: $work/mixcache
  tokenizer: $tok
trainer:
  num_train_steps: 6
  train_batch_size: 4
  num_threads: 1
  tracker: []
  checkpointer: {base_path: $work/ckpt}
YAML
out=$(b cache mix.yaml 2>&1) || fail "cache of a mixture: $out"
has "$out" "cache data.configs.early.train_urls: 24 files"
has "$out" "cache data.configs.late.train_urls: 24 files"
[ -f mixcache/early/ledger.json ] && [ -f mixcache/late/ledger.json ] ||
    fail "no cache per dataset under cache_dir"
out=$(b train mix.yaml --trainer.id=mix 2>&1) || fail "train on a mixture: $out"
has "$out" "data: mixture from step 0, per block of 8 rows: early 6, late 2"
has "$out" "data: mixture from step 4, per block of 8 rows: early 0, late 8"
has "$out" "trained 6 steps"
out=$(b train mix.yaml --trainer.id=mix2 --data.train_weights="[[0, {early: 1}], [3, {late: 1}]]" 2>&1) &&
    fail "a stage off a block boundary was taken"
has "$out" "the stage at step 3 starts at row 12, not a multiple of data.mixture_block_size 8"
out=$(b train mix.yaml --trainer.id=mix3 --data.train_weights="{early: 1, erly: 2}" 2>&1) &&
    fail "a weight for an unknown dataset was taken"
has "$out" "data.train_weights: 'erly' is not a dataset of data.configs"
sed 's/late: {train_urls/late: {train_url/' mix.yaml > typo.yaml
out=$(b train typo.yaml 2>&1) && fail "a typo in data.configs was taken"
has "$out" "typo.yaml:6:12: "
has "$out" "unknown key 'train_url' in data.configs.late; did you mean 'train_urls'?"

# 8. validation held out of train_urls: eval runs on it, training reads the rest
out=$(b train run.yaml --data.cache_dir=c2 --trainer.id=held --data.validation_windows=64 \
    --trainer.steps_per_eval=4 2>&1) || fail "train with validation_windows: $out"
has "$out" "eval every 4 steps and at the end on 64 validation sequences"
has "$out" "eval at step 8: loss"

[ $fails -eq 0 ] && echo "test_cache: all checks passed" || echo "test_cache: $fails failures"
[ $fails -eq 0 ]
