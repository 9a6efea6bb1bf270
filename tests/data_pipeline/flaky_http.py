"""A file server on 127.0.0.1 for the http source tests: serves DIR under three prefixes.

  /ok/NAME      the file, with HEAD, Last-Modified and Range (bytes=N-) support
  /flaky/NAME   as /ok, but the first two GETs of each file announce the whole length, send a
                third of the rest and drop the connection
  /broken/NAME  every GET drops the connection a third of the way in
Anything else is 404. Each request is logged to LOG as "METHOD PATH RANGE". The port goes to
PORT_FILE once the server listens.

usage: flaky_http.py DIR PORT_FILE LOG
"""
import email.utils
import http.server
import os
import sys

root, port_file, log_path = sys.argv[1], sys.argv[2], sys.argv[3]
drops = {}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def target(self):
        parts = self.path.split("/", 2)
        if len(parts) != 3 or parts[1] not in ("ok", "flaky", "broken"):
            return None, None
        path = os.path.join(root, os.path.basename(parts[2]))
        return (parts[1], path) if os.path.isfile(path) else (None, None)

    def note(self):
        with open(log_path, "a") as f:
            f.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Range", "-")))

    def head_common(self, size, mtime, start):
        self.send_header("Content-Length", str(size - start))
        self.send_header("Last-Modified", email.utils.formatdate(mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        self.end_headers()

    def do_HEAD(self):
        self.note()
        mode, path = self.target()
        if not path:
            self.send_error(404)
            return
        self.send_response(200)
        st = os.stat(path)
        self.head_common(st.st_size, st.st_mtime, 0)

    def do_GET(self):
        self.note()
        mode, path = self.target()
        if not path:
            self.send_error(404)
            return
        data = open(path, "rb").read()
        st = os.stat(path)
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if start else 200)
        self.head_common(len(data), st.st_mtime, start)
        body = data[start:]
        n = drops.get(self.path, 0)
        if mode == "broken" or (mode == "flaky" and n < 2):
            drops[self.path] = n + 1
            self.wfile.write(body[: max(1, len(body) // 3)])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
