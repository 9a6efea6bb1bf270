#!/bin/sh
# bora viz-logprobs as a user meets it: a tiny GPT-2 trained for a few steps, its page over a
# .jsonl of odd text (markup, quotes, ampersands, a tab, a newline, non-ASCII, three documents).
# The page's predicted tokens are as many as bora eval counts over the same file and their mean
# log-probability is minus eval's loss; read back by an HTML parser, the tokens spell the text
# (nothing of it taken for markup, a character split over tokens whole) and each hover names
# the value and five alternatives; --max-docs cuts the windows; the page needs nothing else;
# bad options and a missing file are refused with the reason, leaving no page.
# usage: test_viz_logprobs.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
export XDG_CACHE_HOME="$work/cache"
head -n 1000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
cat > odd.jsonl <<'EOF'
{"text": "<script>alert(\"x&y\")</script> is not run: the page shows it as text, 'quoted' & all."}
{"text": "Caf\u00e9 \u65e5\u672c and a tab\there, a newline\nthere, and a </span> closing tag."}
{"text": "The third document is plain: the model has seen text like this in the Brown corpus."}
EOF
cat > run.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], validation_urls: [$work/odd.jsonl], tokenizer: $tok}
trainer:
  num_train_steps: 8
  train_batch_size: 4
  num_threads: 1
  max_eval_batches: 0
  checkpointer: {base_path: $work/ckpt}
YAML
b() { "$bora" --plugin-dir "$plugins" "$@"; }
out=$(b train run.yaml --trainer.id=tiny 2>&1) || fail "training failed: $out"

# 1. the page against bora eval over the same windows
ev=$(b eval run.yaml --checkpoint ckpt/tiny --json 2>/dev/null) || fail "eval failed: $ev"
odd='odd <b>&"q".jsonl' # the name is on the page too
cp odd.jsonl "$odd"
out=$(b viz-logprobs --checkpoint ckpt/tiny --data "$odd" --out page.html --max-docs 1000 2>&1) ||
    fail "viz-logprobs failed: $out"
has "$out" "page.html"
cat > check.py <<'EOF'
import html.parser, json, math, sys
ev = json.loads(sys.argv[2])
class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.windows, self.lps, self.titles, self.where, self.summary = [], [], [], None, None
        self.tags, self.h1 = [], None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "h1":
            self.where, self.h1 = "h1", ""
        if tag == "p" and a.get("id") == "summary":
            self.summary = a
        if tag == "div" and "data-window" in a:
            self.windows.append("")
        if tag == "span" and "t" in a.get("class", "").split():
            self.where = "token"
            if "data-lp" in a:
                self.lps.append(float(a["data-lp"]))
                self.titles.append(a["title"])
    def handle_endtag(self, tag):
        self.where = None
    def handle_data(self, d):
        if self.where == "h1":
            self.h1 += d
        if self.where == "token":
            self.windows[-1] += d
p = Page()
p.feed(open(sys.argv[1], encoding="utf-8").read())
problems = []
if len(p.lps) != ev["tokens"] or int(p.summary["data-tokens"]) != ev["tokens"]:
    problems.append(f"{len(p.lps)} tokens predicted on the page, eval counts {ev['tokens']}")
mean = sum(p.lps) / len(p.lps)
if abs(mean + ev["eval/loss"]) > 1e-4 or abs(float(p.summary["data-mean-logprob"]) + ev["eval/loss"]) > 1e-5:
    problems.append(f"mean log-probability {mean} ({p.summary['data-mean-logprob']}), eval loss {ev['eval/loss']}")
if int(p.summary["data-windows"]) != ev["sequences"] or len(p.windows) != ev["sequences"]:
    problems.append(f"{len(p.windows)} windows, eval ran {ev['sequences']}")
if any(lp > 0 for lp in p.lps):
    problems.append("a log-probability above 0")
# a window shows its first token and the 16 after it: the text itself, escaped and read back
if p.windows[0] != '<script>alert("x&':
    problems.append(f"window 0 reads {p.windows[0]!r}")
if "</script> is not" not in "".join(w[:-1] for w in p.windows):
    problems.append("the markup of the text is not on the page as text")
if "script" in p.tags:
    problems.append("the text's markup became elements")
# a character split over two tokens reads back whole, not as U+FFFD
if not any("Caf\u00e9 \u65e5\u672c" in w for w in p.windows) or "\ufffd" in "".join(p.windows):
    problems.append("non-ASCII text does not read back: " + repr([w for w in p.windows if "Caf" in w]))
if "tab\there" not in "".join(w[:-1] for w in p.windows) or "newline\nthere" not in "".join(w[:-1] for w in p.windows):
    problems.append("the tab or the newline is lost")
# every < of the page opens one of its own tags, every & an entity: none comes from the text
import re
raw = open(sys.argv[1], encoding="utf-8").read()
stray = re.findall(r"<(?!/?(?:!doctype|html|head|meta|title|style|body|h1|h2|p|div|span)[ >])..........", raw)
stray += re.findall(r"&(?!(?:amp|lt|gt|quot|#39|#10);)......", raw)
if stray:
    problems.append(f"unescaped text in the page: {stray[:3]}")
if p.h1 != "Log-probabilities of ckpt/tiny/step-8 on " + sys.argv[3]:
    problems.append(f"the heading reads {p.h1!r}")
for title in p.titles:
    t = title.split("\n")
    if not t[0].startswith("log-prob ") or t[1] != "most likely:" or len(t) != 7:
        problems.append(f"a hover reads {title!r}")
        break
print("\n".join(problems) if problems else "ok")
EOF
res=$(/usr/bin/python3 check.py page.html "$ev" "$odd" 2>&1)
[ "$res" = ok ] || fail "the page: $res"
grep -q "<script" page.html && fail "the page holds a <script> element"
grep -Eq '(src|href)=' page.html && fail "the page loads something else"

# 2. --max-docs: the first N windows
out=$(b viz-logprobs --checkpoint ckpt/tiny --data odd.jsonl --out two.html --max-docs 2 2>&1) ||
    fail "--max-docs 2 failed: $out"
[ "$(grep -c '<div class="doc"' two.html)" = 2 ] || fail "--max-docs 2 gave $(grep -c '<div class="doc"' two.html) windows"
has "$(grep -o '<p id="summary"[^>]*>' two.html)" 'data-windows="2"'

# 3. refusals: the reason, and no page
out=$(b viz-logprobs --checkpoint ckpt/tiny --data missing.jsonl --out bad.html 2>&1) &&
    fail "a missing --data was accepted"
has "$out" "missing.jsonl"
out=$(b viz-logprobs --checkpoint nowhere --data odd.jsonl --out bad.html 2>&1) &&
    fail "a missing checkpoint was accepted"
has "$out" "nowhere"
out=$(b viz-logprobs --checkpoint ckpt/tiny --data odd.jsonl --max-docs 0 2>&1) &&
    fail "--max-docs 0 was accepted"
has "$out" "--max-docs: '0' is not a number of windows"
out=$(b viz-logprobs --checkpoint ckpt/tiny --data odd.jsonl --max-doc 3 2>&1) &&
    fail "--max-doc was accepted"
has "$out" "did you mean '--max-docs'"
out=$(b viz-logprobs --checkpoint ckpt/tiny 2>&1) && fail "no --data was accepted"
has "$out" "give --checkpoint DIR and --data FILE"
ls bad.html bad.html.tmp 2>/dev/null && fail "a refused run left a page"

[ $fails -eq 0 ] && echo "all viz-logprobs checks passed"
exit $fails
