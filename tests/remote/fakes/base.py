"""A small threaded HTTP/1.1 server for the remote-backend fakes (serper.dev, Qdrant, an
upstream /retrieve server). Standard library only; runs in a thread of the test process on
127.0.0.1 (optionally with TLS), records every request, counts connections and the highest
number of requests handled at once, and can misbehave on purpose: delay, close without an
answer, answer garbage or an oversized body.

An app is a function `app(req) -> Reply`; `req` is a Request. The fake servers in this folder
are apps that follow the public API documents of Qdrant and serper.dev (docs/protocols.md),
including their request validation.
"""
import http.server
import json
import socket
import ssl
import threading
import time
import urllib.parse


class Request:
    def __init__(self, method, target, headers, body, conn_id):
        self.method = method
        self.target = target
        self.proxied = target.startswith("http://") or target.startswith("https://")
        parsed = urllib.parse.urlsplit(target)
        self.path = parsed.path if self.proxied else target.split("?", 1)[0]
        self.query = urllib.parse.parse_qs(parsed.query)
        self.host = parsed.netloc if self.proxied else headers.get("host", "")
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.body = body
        self.conn_id = conn_id
        self.time = time.time()

    def json(self):
        return json.loads(self.body.decode("utf-8"))


class Reply:
    """What to answer. `close`: drop the connection without a response. `delay`: seconds to wait
    first. `chunks`: send the body slowly (list of (bytes, pause))."""

    def __init__(self, status=200, body=b"", headers=None, delay=0.0, close=False, content_type="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        if content_type is not None:
            self.headers.setdefault("Content-Type", content_type)
        self.delay = delay
        self.close = close


def json_reply(obj, status=200, **kw):
    return Reply(status, json.dumps(obj, ensure_ascii=False).encode(), **kw)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        srv = self.server.fake
        with srv.lock:
            srv.connections += 1
            self.conn_id = srv.connections
            srv.open_sockets.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            srv = self.server.fake
            with srv.lock:
                srv.open_sockets.discard(self.connection)

    def _handle(self):
        srv = self.server.fake
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        req = Request(self.command, self.path, dict(self.headers.items()), body, self.conn_id)
        with srv.lock:
            srv.requests.append(req)
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            try:
                reply = srv.app(req)
            except Exception as e:  # noqa: BLE001 - a bug in a fake is a 500, visible in the test
                reply = Reply(500, json.dumps({"fake_error": repr(e)}).encode())
            if reply.delay > 0:
                # sleep in small steps so a stopped server does not hold the test
                end = time.time() + reply.delay
                while time.time() < end and not srv.stopping:
                    time.sleep(min(0.02, max(0.0, end - time.time())))
            if reply.close:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            self.send_response(reply.status)
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            with srv.lock:
                srv.inflight -= 1
                srv.completed += 1

    do_GET = _handle
    do_POST = _handle
    do_PUT = _handle
    do_DELETE = _handle


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request, client_address):  # quiet on client disconnects
        pass


class FakeServer:
    """Runs `app` on 127.0.0.1:port (0 = any free port) in a background thread."""

    def __init__(self, app, port=0, certfile=None, keyfile=None):
        self.app = app
        self.lock = threading.Lock()
        self.requests = []
        self.connections = 0
        self.inflight = 0
        self.max_inflight = 0
        self.completed = 0
        self.stopping = False
        self.open_sockets = set()
        self.httpd = _Server(("127.0.0.1", port), _Handler)
        self.httpd.fake = self
        self.tls = certfile is not None
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile, keyfile)
            ctx.set_alpn_protocols(["http/1.1"])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def reset(self):
        with self.lock:
            self.requests = []
            self.connections = 0
            self.max_inflight = 0
            self.completed = 0

    def wait_idle(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            with self.lock:
                if self.inflight == 0:
                    return True
            time.sleep(0.01)
        return False

    def stop(self):
        """Stops listening and drops every open connection (kept-alive ones included)."""
        self.stopping = True
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            socks = list(self.open_sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def make_cert(directory):
    """A self-signed certificate for 127.0.0.1 (openssl CLI)."""
    import os
    import subprocess
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key
