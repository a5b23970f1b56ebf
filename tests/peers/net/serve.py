"""A real HTTP or HTTPS server on 127.0.0.1 for the network tests (Python's http.server).

    python3 serve.py [--tls CERT KEY]

Prints its port on one line, then serves until its stdin closes (the test holds the pipe, so
the server never outlives it). Routes:

    /page           an HTML page whose text is "hello from the allowed host"
    /text           the same sentence as text/plain
    /headers        the request's headers as a JSON object
    /auth           the SHA-256 of the request's Authorization header, in hex (a test sees which
                    secret arrived without the secret being in any answer)
    /redirect?to=U  302 to U
    /robots.txt     404 (no rules: autonomous fetches are allowed)
"""

import hashlib
import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SENTENCE = "hello from the allowed host"
PAGE = f"<html><head><title>Allowed</title></head><body><h1>Allowed page</h1><p>{SENTENCE}</p></body></html>"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, kind="text/plain", extra=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/page":
            self.reply(200, PAGE, "text/html; charset=utf-8")
        elif url.path == "/text":
            self.reply(200, SENTENCE + "\n")
        elif url.path == "/headers":
            self.reply(200, json.dumps(dict(self.headers.items())), "application/json")
        elif url.path == "/auth":
            seen = self.headers.get("Authorization", "").encode()
            self.reply(200, hashlib.sha256(seen).hexdigest() + "\n")
        elif url.path == "/redirect":
            to = parse_qs(url.query).get("to", ["/"])[0]
            self.reply(302, "", extra=[("Location", to)])
        else:
            self.reply(404, "not found\n")

    do_HEAD = do_GET


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if sys.argv[1:2] == ["--tls"]:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[2], sys.argv[3])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)

    def end_with_stdin():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=end_with_stdin, daemon=True).start()
    server.serve_forever()


main()
