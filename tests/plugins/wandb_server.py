#!/usr/bin/env python3
"""tests/plugins/wandb_server.py — a loopback stand-in for W&B's API, for the wandb tracker's tests.

It answers what a W&B client sends to create and stream a run: POST /graphql (the Viewer query
and the UpsertBucket mutation) and POST /files/<entity>/<project>/<run>/file_stream. Every
request is appended to --log as one JSON line {"method", "path", "headers", "body"}; what the
runs hold (their upserts, history lines by file_stream offset, summary, completion) is kept in
--state, written after every change, so a server killed and started again keeps it, as W&B does.
A history line posted again at an offset it already holds replaces it (W&B's file_stream
semantics), so a client that resends after a lost answer does not duplicate a step.

Faults, for the tracker's retries: --fail N answers the first N file_stream and graphql
requests with 500 (--status 429 answers 429 with Retry-After: 1 instead), --hang S sleeps S
seconds before answering the first request (past the client's timeout). A server that refuses
connections is one not started yet; one that dies mid-run is killed by the test.

usage: wandb_server.py --port P --log FILE --state FILE [--key API_KEY] [--fail N]
                       [--status 500|429] [--hang S] [--port-file FILE]
"""
import argparse
import base64
import json
import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--port-file")
ap.add_argument("--log", required=True)
ap.add_argument("--state", required=True)
ap.add_argument("--key", default="k" * 40)
ap.add_argument("--fail", type=int, default=0)
ap.add_argument("--status", type=int, default=500)
ap.add_argument("--hang", type=float, default=0)
args = ap.parse_args()

lock = threading.Lock()
state = {"runs": {}}
if os.path.exists(args.state):
    with open(args.state) as f:
        state = json.load(f)
faults = {"fail": args.fail, "hang": args.hang}


def save():
    tmp = args.state + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, args.state)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, code, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with lock:
            with open(args.log, "a") as f:
                f.write(json.dumps({"method": "POST", "path": self.path,
                                    "headers": {k.lower(): v for k, v in self.headers.items()},
                                    "body": body}) + "\n")
            hang, faults["hang"] = faults["hang"], 0
            fail = faults["fail"] > 0
            if fail:
                faults["fail"] -= 1
        if hang:
            time.sleep(hang)
            return  # the client gave up long ago; answering would only confuse the log
        want = "Basic " + base64.b64encode(("api:" + args.key).encode()).decode()
        if self.headers.get("Authorization") != want:
            return self.answer(401, {"errors": [{"message": "invalid api key"}]})
        if fail:
            extra = {"Retry-After": "1"} if args.status == 429 else None
            return self.answer(args.status, {"error": "injected fault"}, extra)
        if self.path == "/graphql":
            return self.graphql(body)
        parts = [urllib.parse.unquote(x) for x in self.path.strip("/").split("/")]
        if len(parts) == 5 and parts[0] == "files" and parts[4] == "file_stream":
            return self.file_stream("/".join(parts[1:4]), body)
        return self.answer(404, {"error": "no such path"})

    def graphql(self, body):
        query, v = body.get("query", ""), body.get("variables") or {}
        if "viewer" in query:
            return self.answer(200, {"data": {"viewer": {"id": "VXNlcjox", "entity": "tester",
                                                         "flags": "{}", "teams": {"edges": []}}}})
        if "upsertBucket" not in query:
            return self.answer(400, {"errors": [{"message": "unknown query"}]})
        entity = v.get("entity") or "tester"
        project = v.get("project") or "uncategorized"
        key = "%s/%s/%s" % (entity, project, v.get("name"))
        with lock:
            run = state["runs"].setdefault(key, {"upserts": [], "history": {}, "summary": None,
                                                 "complete": None})
            run["upserts"].append(v)
            lines = len(run["history"])
            save()
        return self.answer(200, {"data": {"upsertBucket": {"bucket": {
            "id": "UnVuOjE=", "name": v.get("name"), "displayName": v.get("displayName"),
            "description": None, "config": v.get("config"), "sweepName": None,
            "historyLineCount": lines,
            "project": {"id": "UHJvamVjdDox", "name": project,
                        "entity": {"id": "RW50aXR5OjE=", "name": entity}}},
            "inserted": len(run["upserts"]) == 1}}})

    def file_stream(self, key, body):
        with lock:
            run = state["runs"].get(key)
            if run is None:
                return self.answer(404, {"error": "run %s was never upserted" % key})
            for name, chunk in (body.get("files") or {}).items():
                if name == "wandb-history.jsonl":
                    for i, line in enumerate(chunk["content"]):
                        run["history"][str(chunk["offset"] + i)] = line
                elif name == "wandb-summary.json":
                    run["summary"] = chunk["content"][-1]
            if body.get("complete"):
                run["complete"] = {"exitcode": body.get("exitcode")}
            save()
        return self.answer(200, {"exitcode": None, "limits": {}})


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
if args.port_file:
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
server.serve_forever()
