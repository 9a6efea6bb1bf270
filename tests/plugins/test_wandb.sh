#!/bin/sh
# The wandb tracker as a user meets it: `bora train` with tracker wandb against a loopback
# stand-in for W&B's API (wandb_server.py). Its requests are checked against a recording of
# W&B's own npm client (tests/data/wandb/npm-sdk-0.5.1.jsonl, made by wandb_record.mjs), and
# every fault — a server that refuses connections for a while, answers 500 or 429, hangs past
# the timeout, dies mid-run — ends with every step on the server exactly once; so does a run
# killed (SIGKILL) and resumed, and an offline run uploaded by `bora wandb sync`. Eval metrics
# join their step's line, and the server's summary is the spool's; a run stopped while the
# server hangs goes at once, and a failed spool write costs only its own step.
# usage: test_wandb.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR TESTS_DIR FIXTURE_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5 tests=$6 fixtures=$7
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
py=/usr/bin/python3
server=$tests/plugins/wandb_server.py
check="$py $tests/plugins/wandb_check.py"
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
export WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567
unset WANDB_MODE WANDB_ENTITY WANDB_PROJECT WANDB_BASE_URL
# A free port, kept for the server's restarts.
port=$($py -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
export WANDB_BASE_URL=http://127.0.0.1:$port
spid=
start_server() { # [faults...]
    rm -f port
    $py "$server" --port "$port" --port-file port --log log.jsonl --state state.json \
        --key "$WANDB_API_KEY" "$@" &
    spid=$!
    i=0
    while [ ! -f port ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
stop_server() { [ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null && wait "$spid" 2>/dev/null; spid=; }
trap 'stop_server' EXIT
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], validation_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 6
  steps_per_eval: 4
  max_eval_batches: 1
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, keep: [{every: 5}]}
  tracker: [{type: wandb, project: proj, entity: tester, tags: [tiny], timeout: 1s,
             finish_timeout: 30s}]
YAML
train() { "$bora" --plugin-dir "$plugins" train run.yaml "$@" 2>&1; }

# 1. The protocol, against W&B's own client's recording.
start_server
out=$(train --trainer.id=proto) || fail "run proto: $out"
$check protocol log.jsonl "$tests/data/wandb/npm-sdk-0.5.1.jsonl" "$WANDB_API_KEY" ||
    fail "protocol"
$check steps state.json tester/proj/proto 6 0 runs/proto/wandb/history.jsonl || fail "proto steps"
$check evals state.json tester/proj/proto 4,6 || fail "proto evals"
$check summary state.json tester/proj/proto runs/proto/wandb/summary.json || fail "proto summary"
has "$(cat state.json)" '\"model\":{\"value\":{\"type\":\"gpt2\"'
stop_server

# 2. Refused connections for a while: the run ends first, its finish waits and uploads.
(sleep 2 && exec $py "$server" --port "$port" --log log.jsonl --state state.json \
    --key "$WANDB_API_KEY") &
spid=$!
out=$(train --trainer.id=refused) || fail "run refused: $out"
stop_server
$check steps state.json tester/proj/refused 6 0 || fail "refused"

# 3. 500s, 429 with Retry-After, a request that hangs past the timeout.
for fault in "--fail 2" "--fail 2 --status 429" "--hang 4"; do
    id=$(echo "$fault" | tr -dc 'a-z0-9')
    start_server $fault
    out=$(train --trainer.id="$id") || fail "run $id: $out"
    $check steps state.json "tester/proj/$id" 6 0 || fail "fault $fault"
    stop_server
done

# 4. The server dies mid-run (after it has taken some steps) and comes back.
start_server
"$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=dies \
    --trainer.num_train_steps=300 > dies.log 2>&1 &
pid=$!
i=0
while [ "$($check posts log.jsonl /dies/)" -eq 0 ] && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
done
stop_server
# Steps go on into the spool while the server is gone (unless the run ended first).
n=$(wc -l < runs/dies/wandb/history.jsonl)
i=0
while [ "$(wc -l < runs/dies/wandb/history.jsonl)" -lt $((n + 10)) ] && kill -0 $pid 2>/dev/null &&
    [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
done
echo "server down from spool line $n to $(wc -l < runs/dies/wandb/history.jsonl)"
start_server
wait $pid || fail "run dies: $(tail -n 5 dies.log)"
$check steps state.json tester/proj/dies 300 0 runs/dies/wandb/history.jsonl || fail "dies"
stop_server

# 5. Killed (SIGKILL) past its checkpoint, then resumed and stopped (SIGTERM).
start_server
"$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=kr \
    --trainer.num_train_steps=100000 > kr1.log 2>&1 &
pid=$!
i=0
while ! { grep -q "^step 13/" kr1.log && [ "$($check posts log.jsonl /kr/)" -gt 0 ]; } &&
    [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
kill -KILL $pid; wait $pid 2>/dev/null
echo "SIGKILL at spool line $(wc -l < runs/kr/wandb/history.jsonl), server at $($check posts log.jsonl /kr/)"
killed=$(wc -l < runs/kr/wandb/history.jsonl)
"$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=kr \
    --trainer.num_train_steps=100000 > kr2.log 2>&1 &
pid=$!
i=0
while ! grep -q "^step $((killed + 8))/" kr2.log && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid; wait $pid
grep -q "^resuming run kr" kr2.log || fail "the second run did not resume: $(head -n 20 kr2.log)"
last=$(wc -l < runs/kr/wandb/history.jsonl)
[ "$last" -gt "$killed" ] || fail "resumed run logged nothing new ($killed then $last lines)"
$check steps state.json tester/proj/kr "$last" 255 runs/kr/wandb/history.jsonl ||
    fail "kill and resume"
stop_server

# 5b. Stopped (SIGTERM) while the server hangs: the run goes within seconds (it was asked to),
# not after finish_timeout; the spool keeps the steps.
start_server --hang 100
"$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=term --trainer.num_train_steps=100000 \
    --trainer.tracker.0.timeout=60s --trainer.tracker.0.finish_timeout=60s > term.log 2>&1 &
pid=$!
i=0
while ! grep -q "^step 20/" term.log && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid
i=0
while kill -0 $pid 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $pid 2>/dev/null; then
    fail "a run stopped by SIGTERM still waits on a hanging server after 15 s"
    kill -KILL $pid
fi
wait $pid
has "$(cat term.log)" "bora wandb sync term"
stop_server

# 5c. One failed spool write (the file size limit, lowered for a moment, as a full disk would)
# costs that step alone: the error is reported, every line stays whole, later steps go on.
sh -c 'echo $$ > efbig.pid; trap "" XFSZ; exec "$0" "$@"' "$bora" --plugin-dir "$plugins" \
    --plugin-dir "$fixtures" train run.yaml --trainer.id=efbig --trainer.num_train_steps=40 \
    "--trainer.checkpointer.keep=[]" \
    "--trainer.tracker=[{type: fixture, path: /dev/null, sleep_ms: 50},
                        {type: wandb, project: proj, entity: tester, mode: offline}]" 2>&1 |
    cat > efbig.log &
spool=runs/efbig/wandb/history.jsonl
i=0
while [ "$(wc -l < $spool 2>/dev/null || echo 0)" -lt 3 ] && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
done
# the fixture (writing to /dev/null, which has no size) paces the tracker thread at 50 ms a call
prlimit --pid "$(cat efbig.pid)" --fsize="$(($(wc -c < $spool) + 20)):unlimited"
sleep 0.5
prlimit --pid "$(cat efbig.pid)" --fsize=unlimited:unlimited
i=0
while kill -0 "$(cat efbig.pid)" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
has "$(cat efbig.log)" "cannot write step"
$py - "$spool" <<'PY' || fail "the spool after a failed write"
import json, sys
steps = [json.loads(line)["_step"] for line in open(sys.argv[1])]
if steps != sorted(set(steps)) or steps[-1] != 40 or len(steps) >= 40:
    sys.exit("steps in the spool: %s (want 1..40 less the failed ones, in order)" % steps)
print("wandb: spool steps %d of 40 after a failed write" % len(steps))
PY

# 6. Offline (WANDB_MODE): nothing sent; bora wandb sync uploads it, and again sends nothing.
: > log.jsonl
out=$(WANDB_MODE=offline train --trainer.id=off) || fail "offline run: $out"
has "$out" "bora wandb sync off"
start_server
[ "$(wc -l < log.jsonl)" -eq 0 ] || fail "an offline run sent $(wc -l < log.jsonl) requests"
out=$("$bora" --plugin-dir "$plugins" wandb sync off 2>&1) || fail "sync: $out"
$check steps state.json tester/proj/off 6 0 runs/off/wandb/history.jsonl || fail "sync"
$check summary state.json tester/proj/off runs/off/wandb/summary.json || fail "sync summary"
out=$("$bora" --plugin-dir "$plugins" wandb sync off 2>&1) || fail "second sync: $out"
[ "$($check posts log.jsonl /off/)" -eq 6 ] || fail "sync sent lines twice"

# 6b. sync uploads whatever WANDB_MODE says (it is what the user asked for), leaves a line the
# run is still writing as it is, and resends a summary the server never acknowledged even when
# every line was (a process that died between the two).
out=$(WANDB_MODE=offline train --trainer.id=off2) || fail "offline run: $out"
printf '{"train/loss":1,"_st' >> runs/off2/wandb/history.jsonl
out=$(WANDB_MODE=disabled "$bora" --plugin-dir "$plugins" wandb sync off2 2>&1) ||
    fail "disabled sync: $out"
$check steps state.json tester/proj/off2 6 0 || fail "sync with WANDB_MODE=disabled"
[ "$(tail -c 4 runs/off2/wandb/history.jsonl)" = '"_st' ] || fail "sync cut the spool's last line"
out=$(WANDB_MODE=offline train --trainer.id=off3) || fail "offline run: $out"
printf 'sent 6\nexitcode 0\ncomplete 0\n' > runs/off3/wandb/state
out=$("$bora" --plugin-dir "$plugins" wandb sync off3 2>&1) || fail "sync off3: $out"
$check summary state.json tester/proj/off3 runs/off3/wandb/summary.json || fail "summary resent"

# 6c. A configuration larger than 64 KiB (the server echoes it in its answer).
big=$($py -c "print('x' * 100000)")
out=$(train --trainer.id=bigcfg --trainer.tracker.0.notes="$big") || fail "bigcfg: $out"
$check steps state.json tester/proj/bigcfg 6 0 || fail "a large config stopped uploads"

# 6d. Names that need escaping in the file_stream path.
out=$(train --trainer.id=esc "--trainer.tracker.0.project=my proj/x") || fail "esc: $out"
$check steps state.json "tester/my proj/x/esc" 6 0 || fail "a project name with a space and /"

# 7. A server that stays down: the run still ends (rc 0), the spool waits for bora wandb sync.
stop_server
out=$(train --trainer.id=down --trainer.tracker.0.finish_timeout=1s) || fail "down: $out"
has "$out" "6 of 6 steps not uploaded"
has "$out" "bora wandb sync down"
start_server
out=$("$bora" --plugin-dir "$plugins" wandb sync down 2>&1) || fail "sync down: $out"
$check steps state.json tester/proj/down 6 0 || fail "sync after down"

# 8. Refusals, each naming what to fix.
out=$(WANDB_API_KEY= train --trainer.id=nokey) && fail "a run without WANDB_API_KEY started"
has "$out" "WANDB_API_KEY is not set"
out=$(train --trainer.id=badmode --trainer.tracker.0.mode=sometimes) && fail "mode accepted"
has "$out" "mode: 'sometimes' is not online, offline or disabled"
out=$("$bora" --plugin-dir "$plugins" wandb sync nosuch 2>&1) && fail "sync of nothing"
has "$out" "no W&B spool of run 'nosuch' in 'runs/nosuch/wandb'"
out=$(WANDB_API_KEY=wrong train --trainer.id=wrongkey --trainer.tracker.0.finish_timeout=5s) ||
    fail "a refused key stopped training: $out"
has "$out" "HTTP 401"
out=$(train --trainer.id=twice "--trainer.tracker=[{type: wandb, project: a}, {type: wandb, project: b}]") &&
    fail "a list naming wandb twice with one spool was accepted"
has "$out" "the spool 'runs/twice/wandb' is in use by another wandb tracker"

[ $fails -eq 0 ] && echo "test_wandb: ok"
[ $fails -eq 0 ]
