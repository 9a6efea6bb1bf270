#!/bin/sh
# The tensorboard tracker and tracker lists as a user meets them: a run logged by
# [sqlite, jsonl, tensorboard] writes event files whose every record's CRCs hold and whose
# scalars, hparams and text summaries are what the run logged (read by tfevents.py); a run
# resumed from a checkpoint before its last logged step shows each step once in TensorBoard; a
# list without sqlite says once that the run will not appear in bora runs, and it does not;
# mistakes in the list are named. The reader also reads a TensorFlow-written file and refuses a
# file with a flipped byte. A run SIGKILLed once its first checkpoint's flush is done has every
# step up to that checkpoint on disk, and each step is in the file once it is logged. The final
# eval is shown once, not again from the summary.
# usage: test_tensorboard.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR READER SAMPLE FIXTURE_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5 reader=$6 sample=$7 fixtures=$8
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
hasnt() { case $1 in *"$2"*) fail "'$2' in:
$1" ;; esac; }
read_tb() { /usr/bin/python3 "$reader" "$@" 2>&1; }
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], validation_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 6
  steps_per_eval: 3
  max_eval_batches: 1
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, save_interval: 0s, keep: [{every: 2}]}
  tracker: [sqlite, jsonl, tensorboard]
YAML
train() { "$bora" --plugin-dir "$plugins" train run.yaml "$@" 2>&1; }
nosqlite="tracker list has no sqlite: this run will not appear in bora runs"

# 1. three trackers by name: every step in runs/tensorboard/ID, and the run in bora runs
out=$(train --trainer.id=tb) || fail "the run failed: $out"
hasnt "$out" "$nosqlite"
set -- runs/tensorboard/tb/events.out.tfevents.*
[ $# -eq 1 ] && [ -f "$1" ] || fail "want one event file in runs/tensorboard/tb: $*"
got=$(read_tb run runs/tensorboard/tb runs/tb/metrics.jsonl 6) || fail "$got"
echo "$got"
has "$("$bora" runs 2>&1)" "tb "

# 2. killed after step 6 was logged but before its checkpoint: resumed from step 4, steps 5
#    and 6 are logged again into a second file, and TensorBoard shows each step once
rm -rf ckpt/tb/step-6
out=$(train --trainer.id=tb) || fail "the resumed run failed: $out"
has "$out" "resuming run tb from $work/ckpt/tb/step-4"
set -- runs/tensorboard/tb/events.out.tfevents.*
[ $# -eq 2 ] || fail "want two event files after the resume: $*"
[ "$(grep -c '"step":5,' runs/tb/metrics.jsonl)" = 2 ] || fail "step 5 was not logged twice"
got=$(read_tb run runs/tensorboard/tb runs/tb/metrics.jsonl 6) || fail "$got"
echo "$got"

# 3. a list without sqlite: said once at the start, and the run is not in bora runs
out=$(train --trainer.id=nodb "--trainer.tracker=[jsonl, tensorboard]") || fail "$out"
[ "$(printf '%s\n' "$out" | grep -c "$nosqlite")" = 1 ] || fail "want '$nosqlite' once in:
$out"
hasnt "$("$bora" runs 2>&1)" "nodb"
[ "$(sqlite3 runs/bora.db "select count(*) from runs where id='nodb'")" = 0 ] ||
    fail "run nodb is in the database"
got=$(read_tb run runs/tensorboard/nodb runs/nodb/metrics.jsonl 6) || fail "$got"
# the default list is sqlite alone: nothing said
sed '/tracker:/d' run.yaml > default.yaml
out=$("$bora" --plugin-dir "$plugins" train default.yaml --trainer.id=dflt 2>&1) || fail "$out"
hasnt "$out" "$nosqlite"
has "$("$bora" runs 2>&1)" "dflt "

# 4. mistakes: an unknown name in the list, an unwritable logdir, an empty one
out=$(train --trainer.id=bad "--trainer.tracker=[sqlite, tensorbord]")
has "$out" "trainer.tracker[1].type: no tracker named 'tensorbord'; did you mean 'tensorboard'?"
out=$(train --trainer.id=bad "--trainer.tracker={type: tensorboard, logdir: run.yaml}") &&
    fail "a logdir under a file was accepted"
has "$out" "cannot create directory 'run.yaml/bad': Not a directory"
out=$(train --trainer.id=bad "--trainer.tracker={type: tensorboard, logdir: ''}") &&
    fail "an empty logdir was accepted"
has "$out" "logdir is empty: give a directory for the event files"

# 5. flush() makes the file durable: the fixture tracker, after tensorboard in the list, notes
#    each flush (one before every checkpoint); SIGKILL once it has noted the first, then every
#    step logged before that flush is in the event file
"$bora" --plugin-dir "$plugins" --plugin-dir "$fixtures" train run.yaml --trainer.id=killed \
    --trainer.num_train_steps=40 \
    "--trainer.tracker=[tensorboard, {type: fixture, path: $work/calls.txt, sleep_ms: 200}]" \
    > killed.out 2>&1 &
pid=$!
i=0
until grep -q '^flush' calls.txt 2>/dev/null || ! kill -0 $pid 2>/dev/null || [ $i -ge 300 ]; do
    sleep 0.1
    i=$((i + 1))
done
kill -KILL $pid
wait $pid 2>/dev/null
want=$(sed -n '/^flush/q;s/^log \([0-9]*\) .*/\1/p' calls.txt | tr '\n' ' ')
[ -n "$want" ] || fail "no step logged before the first flush: $(cat calls.txt killed.out)"
got=$(read_tb steps runs/tensorboard/killed/events.out.tfevents.*) || fail "$got"
for s in $want; do
    case " $(echo "$got" | tail -n 1) " in *" $s "*) ;; *) fail "step $s was logged before the flush but is not in the file: $got" ;; esac
done

# 5b. each step reaches the file when it is logged, not at the next checkpoint (there is none
#    here until the end): once the fixture, after tensorboard in the list, has seen step 20,
#    step 20 is in the file
"$bora" --plugin-dir "$plugins" --plugin-dir "$fixtures" train run.yaml --trainer.id=live \
    --trainer.num_train_steps=40 "--trainer.checkpointer.keep=[]" \
    --trainer.checkpointer.save_interval=1h \
    "--trainer.tracker=[tensorboard, {type: fixture, path: $work/live.txt, sleep_ms: 100}]" \
    > live.out 2>&1 &
pid=$!
i=0
until grep -q '^log 20 ' live.txt 2>/dev/null || ! kill -0 $pid 2>/dev/null || [ $i -ge 300 ]; do
    sleep 0.1
    i=$((i + 1))
done
grep -q '^flush' live.txt && fail "a flush came before step 20: $(cat live.txt)"
got=$(read_tb steps runs/tensorboard/live/events.out.tfevents.*) || fail "$got"
case " $got " in *" 20 "*) ;; *) fail "step 20 was logged but is not in the file: $got" ;; esac
wait $pid || fail "run live: $(tail -n 5 live.out)"

# 6. the reader: a file TensorFlow wrote, and one of ours with a byte flipped
got=$(read_tb sample "$sample") || fail "$got"
echo "$got"
cp runs/tensorboard/nodb/events.out.tfevents.* flipped
size=$(wc -c < flipped)
/usr/bin/python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(int(sys.argv[2]) // 2)
b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 1]))" flipped "$size"
got=$(read_tb read flipped) && fail "a flipped byte was not found"
has "$got" "flipped: offset"
has "$got" "CRC does not match"

[ "$fails" -eq 0 ] && echo "test_tensorboard: ok"
exit "$fails"
