#!/usr/bin/env python3
"""tests/plugins/wandb_check.py — checks for test_wandb.sh against what wandb_server.py kept.

  wandb_check.py protocol LOG RECORDING KEY
      bora's requests (LOG) against W&B's own client's (RECORDING, made by wandb_record.mjs):
      the same paths, headers, auth and GraphQL documents, the UpsertBucket variables W&B
      reads (config as {"key": {"value": ...}}), file_stream bodies of the recorded shape
      with contiguous offsets from 0, history lines with _step, _runtime and _timestamp, and
      the recorded final {"complete": true, "exitcode": 0}.
  wandb_check.py steps STATE RUN LAST EXITCODE [SPOOL]
      run RUN ("entity/project/name") on the server holds steps 1..LAST, each exactly once,
      at offsets 0..LAST-1, and ended with EXITCODE ("-" for not ended); with SPOOL (a
      history.jsonl), the server's lines are the spool's, byte for byte.
  wandb_check.py summary STATE RUN SUMMARY_JSON
      the server's summary of RUN is the spool's summary.json.
  wandb_check.py evals STATE RUN STEPS
      RUN's history holds eval/loss and eval/bpb exactly at STEPS (comma-separated), in the
      same line as that step's train/loss.
  wandb_check.py posts LOG PATH_PART
      prints how many history lines were posted to paths containing PATH_PART.
"""
import base64
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fail(msg):
    print("wandb_check: " + msg)
    sys.exit(1)


def protocol(log_path, rec_path, key):
    mine, rec = load(log_path), load(rec_path)
    rec_upsert = next(r for r in rec if r["body"].get("operationName") == "UpsertBucket")
    rec_viewer = next(r for r in rec if r["body"].get("operationName") == "Viewer")
    rec_stream = [r for r in rec if r["path"].endswith("/file_stream")]
    auth = "Basic " + base64.b64encode(("api:" + key).encode()).decode()
    for r in mine:
        if r["method"] != "POST":
            fail("%s: method %s, W&B's client POSTs" % (r["path"], r["method"]))
        if r["headers"].get("authorization") != auth:
            fail("%s: authorization %r, want %r" % (r["path"], r["headers"].get("authorization"),
                                                     auth))
        if r["headers"].get("content-type") != "application/json":
            fail("%s: content-type %r" % (r["path"], r["headers"].get("content-type")))
    gql = [r for r in mine if r["path"] == "/graphql"]
    ups = [r for r in gql if r["body"].get("operationName") == "UpsertBucket"]
    if not ups:
        fail("no UpsertBucket mutation was sent")
    for r in gql:
        ref = rec_upsert if r["body"].get("operationName") == "UpsertBucket" else rec_viewer
        if r["body"].get("query") != ref["body"]["query"]:
            fail("the %s document differs from W&B's client's" % r["body"].get("operationName"))
        if set(r["body"]) != set(ref["body"]):
            fail("graphql body keys %s, W&B's client sends %s" % (sorted(r["body"]),
                                                                  sorted(ref["body"])))
    declared = {"id", "name", "project", "entity", "groupName", "description", "displayName",
                "notes", "commit", "config", "host", "debug", "program", "repo", "jobType",
                "state", "sweep", "tags", "summaryMetrics"}
    for r in ups:
        v = r["body"]["variables"]
        if not set(v) <= declared:
            fail("UpsertBucket variables not in the mutation: %s" % (set(v) - declared))
        for k in ("name", "project", "entity", "displayName"):
            if not isinstance(v.get(k), str) or not v[k]:
                fail("UpsertBucket without %s: %s" % (k, v))
    cfg = json.loads(ups[-1]["body"]["variables"].get("config", "null") or "null")
    if not isinstance(cfg, dict) or not cfg or any(set(e) != {"value"} for e in cfg.values()):
        fail("config is not W&B's {\"key\": {\"value\": ...}}: %r" % cfg)
    streams = [r for r in mine if r["path"].endswith("/file_stream")]
    v = ups[-1]["body"]["variables"]
    want = "/files/%s/%s/%s/file_stream" % (v["entity"], v["project"], v["name"])
    offset = 0
    for r in streams:
        if r["path"] != want:
            fail("file_stream path %s, want %s" % (r["path"], want))
        b = r["body"]
        if "files" in b:
            if not set(b["files"]) <= set(rec_stream[0]["body"]["files"]):
                fail("file_stream files %s" % sorted(b["files"]))
            h = b["files"].get("wandb-history.jsonl")
            if h:
                if set(h) != set(rec_stream[0]["body"]["files"]["wandb-history.jsonl"]):
                    fail("history chunk keys %s" % sorted(h))
                if h["offset"] != offset:
                    fail("history offset %d, the lines before it end at %d" % (h["offset"],
                                                                                 offset))
                for line in h["content"]:
                    o = json.loads(line)
                    rec_line = json.loads(rec_stream[0]["body"]["files"]["wandb-history.jsonl"]
                                          ["content"][0])
                    under = {k for k in rec_line if k.startswith("_")}
                    if {k for k in o if k.startswith("_")} != under:
                        fail("history line %s lacks W&B's %s" % (line, sorted(under)))
                    if not isinstance(o["_step"], int):
                        fail("_step is not an integer: %s" % line)
                offset += len(h["content"])
            s = b["files"].get("wandb-summary.json")
            if s and (s["offset"] != 0 or len(s["content"]) != 1):
                fail("summary chunk %s" % s)
        elif b != rec_stream[-1]["body"]:
            fail("final file_stream body %s, W&B's client sends %s" % (b, rec_stream[-1]["body"]))
    if not streams or streams[-1]["body"] != rec_stream[-1]["body"]:
        fail("the run did not end with %s" % rec_stream[-1]["body"])
    if offset == 0:
        fail("no history was streamed")
    print("wandb_check: %d requests match W&B's client (%d history lines)" % (len(mine), offset))


def steps(state_path, run, last, exitcode, spool=None):
    with open(state_path) as f:
        runs = json.load(f)["runs"]
    if run not in runs:
        fail("no run %s on the server (it has %s)" % (run, sorted(runs)))
    r = runs[run]
    hist = r["history"]
    if sorted(int(k) for k in hist) != list(range(len(hist))):
        fail("offsets are not 0..%d: %s" % (len(hist) - 1, sorted(int(k) for k in hist)))
    got = [json.loads(hist[str(i)])["_step"] for i in range(len(hist))]
    if got != list(range(1, int(last) + 1)):
        fail("steps on the server %s, want 1..%s once each" % (got, last))
    if exitcode == "-":
        if r["complete"]:
            fail("the run was marked complete: %s" % r["complete"])
    elif not r["complete"] or r["complete"]["exitcode"] != int(exitcode):
        fail("the run ended with %s, want exitcode %s" % (r["complete"], exitcode))
    if spool:
        with open(spool) as f:
            lines = f.read().splitlines()
        if lines != [hist[str(i)] for i in range(len(hist))]:
            fail("the server's lines differ from the spool's")
    print("wandb_check: %s holds steps 1..%s once each" % (run, last))


def summary(state_path, run, summary_path):
    with open(state_path) as f:
        r = json.load(f)["runs"].get(run) or fail("no run %s on the server" % run)
    with open(summary_path) as f:
        want = json.load(f)
    got = json.loads(r["summary"]) if r["summary"] else None
    if got != want:
        fail("the server's summary %s, the spool's %s" % (got, want))
    print("wandb_check: %s's summary matches (%d values)" % (run, len(want)))


def evals(state_path, run, steps_csv):
    with open(state_path) as f:
        hist = json.load(f)["runs"][run]["history"]
    lines = [json.loads(hist[str(i)]) for i in range(len(hist))]
    got = [o["_step"] for o in lines if "eval/loss" in o and "eval/bpb" in o]
    want = [int(x) for x in steps_csv.split(",")]
    if got != want:
        fail("eval/loss at steps %s, want %s" % (got, want))
    if any("train/loss" not in o for o in lines):
        fail("a history line without train/loss (a step split in two)")
    print("wandb_check: %s has eval/loss at %s" % (run, want))


def posts(log_path, part):
    n = 0
    for r in load(log_path):
        if part in r["path"] and isinstance(r["body"], dict) and "files" in r["body"]:
            n += len(r["body"]["files"].get("wandb-history.jsonl", {}).get("content", []))
    print(n)


if __name__ == "__main__":
    {"protocol": protocol, "steps": steps, "summary": summary, "evals": evals,
     "posts": posts}[sys.argv[1]](*sys.argv[2:])
