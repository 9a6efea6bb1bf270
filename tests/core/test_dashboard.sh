#!/bin/sh
# bora dashboard as a user meets it: two real runs in runs/bora.db, the server started on a free
# port of 127.0.0.1; its JSON endpoints read with curl (the runs, a run's metrics after a step,
# its configuration and environment, the errors), a row written into the database while it
# serves appearing in the next poll; the page loaded in headless Chromium, whose DOM must hold
# both runs and every point of their curves (a screenshot is kept as dashboard.png); a port in
# use, a missing database and a file that is not one refused with the reason.
# usage: test_dashboard.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
export XDG_CACHE_HOME="$work/cache"
head -n 1000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], validation_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 6
  train_batch_size: 4
  num_threads: 1
  max_eval_batches: 2
  checkpointer: {base_path: $work/ckpt}
YAML
for lr in first:1e-2 second:3e-3; do
    out=$("$bora" --plugin-dir "$plugins" train run.yaml --trainer.id=${lr%:*} \
        --optimizer.learning_rate=${lr#*:} 2>&1) || fail "training ${lr%:*} failed: $out"
done

"$bora" dashboard --port 0 > server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
i=0
while ! grep -q "http://127.0.0.1:" server.log && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' server.log)
[ -n "$url" ] || { fail "the server printed no address: $(cat server.log)"; exit 1; }
port=${url#http://127.0.0.1:}
port=${port%/}
get() { curl -s --max-time 10 "$url$1"; }
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url$1"; }
py() { /usr/bin/python3 -c "import json, sys; d = json.load(sys.stdin); $1"; }

# 0. only requests naming this server as Host are answered (DNS rebinding), never sniffed
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H 'Host: evil.example' "${url}api/runs")" = 403 ] ||
    fail "a request with Host: evil.example was answered"
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Host: localhost:$port" "${url}api/runs")" = 200 ] ||
    fail "a request with Host: localhost:$port was refused"
curl -s -D - -o /dev/null --max-time 10 "$url" | grep -qi '^X-Content-Type-Options: nosniff' ||
    fail "the page is sent without X-Content-Type-Options: nosniff"
# 1. the runs, with what bora runs shows
runs=$(get api/runs)
[ "$(echo "$runs" | py 'print(" ".join(r["id"] + ":" + r["status"] + ":" + str(r["last_step"]) for r in d["runs"]))')" = \
    "first:finished:6 second:finished:6" ] || fail "/api/runs: $runs"
# 2. metrics: all of them, then only the steps after 4
m=$(get "api/metrics?run=first")
[ "$(echo "$m" | py 'print(len(d["metrics"]["train/loss"]), d["last_step"], "eval/loss" in d["metrics"], "optim/learning_rate" in d["metrics"])')" = \
    "6 6 True True" ] || fail "/api/metrics?run=first: $m"
loss6=$(sqlite3 runs/bora.db "select printf('%.6f', value) from metrics where run='first' and name='train/loss' and step=6")
[ "$(get "api/metrics?run=first&since=4" | py 'print(sorted(s for s, v in d["metrics"]["train/loss"]), "%.6f" % d["metrics"]["train/loss"][-1][1])')" = \
    "[5, 6] $loss6" ] || fail "since=4: $(get "api/metrics?run=first&since=4")"
# 2b. max_points thins a metric to every k-th row and its last; the default caps it too
[ "$(get "api/metrics?run=first&max_points=3" | py 'print([s for s, v in d["metrics"]["train/loss"]])')" = \
    "[1, 4, 6]" ] || fail "max_points=3: $(get "api/metrics?run=first&max_points=3")"
[ "$(code "api/metrics?run=first&max_points=1")" = 400 ] || fail "max_points=1 is not 400"
# 3. a run's configuration, environment and summary
r=$(get "api/run?run=second")
[ "$(echo "$r" | py 'print(d["config"]["model"]["type"], d["config"]["trainer"]["id"], "backend" in d["environment"]["record"], "train/final_loss" in d["summary"])')" = \
    "gpt2 second True True" ] || fail "/api/run?run=second: $r"
# 4. errors: a clear message and a status, never a crash
[ "$(code "api/metrics?run=nope")" = 404 ] || fail "an unknown run is not 404"
has "$(get "api/metrics?run=nope")" "no run 'nope'"
[ "$(code "api/metrics?run=first&since=soon")" = 400 ] || fail "a bad since is not 400"
has "$(get "api/metrics?run=first&since=soon")" "since: 'soon' is not a step"
[ "$(code api/metrics)" = 400 ] || fail "no run given is not 400"
[ "$(code nothing/here)" = 404 ] || fail "an unknown path is not 404"
# 5. the page and Chart.js from Debian's package, nothing from elsewhere
page=$(get "")
has "$page" '<script src="/chart.js">'
case $page in *"https://"* | *"http://"*) fail "the page loads something from the network" ;; esac
[ "$(get chart.js | head -c 200 | grep -c 'Chart.js v')" = 1 ] || fail "/chart.js is not Chart.js"

# 6. live: a step written while the server runs is in the next poll from the last step seen
sqlite3 -cmd ".timeout 5000" runs/bora.db "insert into metrics values('first', 7, 'train/loss', 1.25);
                      update runs set last_step = 7 where id = 'first'" || fail "cannot write the db"
[ "$(get "api/metrics?run=first&since=6" | py 'print(d["metrics"]["train/loss"], d["last_step"])')" = \
    "[[7, 1.25]] 7" ] || fail "the new row is not served: $(get "api/metrics?run=first&since=6")"
[ "$(get api/runs | py 'print([r["last_step"] for r in d["runs"]])')" = "[7, 6]" ] ||
    fail "the new step is not in /api/runs: $(get api/runs)"

# 7. the page in a real browser: both runs listed, every point plotted
if ! command -v chromium >/dev/null; then
    fail "no chromium to load the page (scripts/setup installs it)"
else
    browse() {
        chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/chrome" \
            --window-size=1400,1000 --virtual-time-budget=8000 "$@" "$url" 2>>chrome.log
    }
    browse --dump-dom > dom.html
    browse --screenshot="$work/dashboard.png" > /dev/null
    [ -s dashboard.png ] || fail "no screenshot"
    for id in first second; do
        grep -q "<tr data-run=\"$id\">" dom.html || fail "run $id is not listed in the page"
    done
    plotted=$(sed -n 's/.*<pre id="plotted"[^>]*>\([^<]*\)<.*/\1/p' dom.html | sed 's/&quot;/"/g')
    [ "$(echo "$plotted" | py 'print(d["train/loss"], d["optim/learning_rate"]["second"], list(d["eval/loss"]))')" = \
        "{'first': 7, 'second': 6} 6 ['first', 'second']" ] ||
        fail "the page's charts hold: $plotted (chromium said: $(tail -n 5 chrome.log))"
    [ "$(grep -c 'class="chart" data-metric="train/loss"' dom.html)" = 1 ] ||
        fail "no train/loss chart in the page"
fi

# 7b. with many runs only the newest five are ticked (and fetched) by themselves
if command -v chromium >/dev/null; then
    for k in 1 2 3 4 5; do
        sqlite3 -cmd ".timeout 5000" runs/bora.db "insert into runs(id, status, started, last_step)
            values('late$k', 'finished', 4e9 + $k, 1);
            insert into metrics values('late$k', 1, 'train/loss', 2.5)" || fail "cannot write the db"
    done
    browse --dump-dom > dom2.html
    plotted=$(sed -n 's/.*<pre id="plotted"[^>]*>\([^<]*\)<.*/\1/p' dom2.html | sed 's/&quot;/"/g')
    [ "$(echo "$plotted" | py 'print(sorted(d["train/loss"]))')" = \
        "['late1', 'late2', 'late3', 'late4', 'late5']" ] ||
        fail "with seven runs the page draws: $plotted"
fi

# 8. refusals
out=$("$bora" dashboard --port "$port" 2>&1) && fail "a port in use was accepted"
has "$out" "cannot listen on 127.0.0.1:$port"
has "$out" "--port 0 any free one"
out=$("$bora" dashboard --db nowhere.db --port 0 2>&1) && fail "a missing database was accepted"
has "$out" "no run database at nowhere.db"
out=$("$bora" dashboard --db small.txt --port 0 2>&1) && fail "a text file was taken as a database"
has "$out" "small.txt is not a bora run database"
out=$("$bora" dashboard --port 70000 2>&1) && fail "port 70000 was accepted"
has "$out" "--port: '70000' is not a port"

kill $server
wait $server
[ "$(grep -c "error" server.log)" = 0 ] || fail "the server logged errors: $(cat server.log)"
[ $fails -eq 0 ] && echo "all dashboard checks passed"
exit $fails
