"""A fake Jina Reader (`r.jina.ai`) for the serper backend's page reader (POST /access).

It follows Jina's public Reader documentation (the jina-ai/reader README and the reader page of
jina.ai), since the real service is paid and cannot be reached from the build machines:

* Request: `GET /<page URL>`: the page URL is appended as it is after the first slash, its query
  string included (`https://r.jina.ai/https://example.com/a?b=c`). `Authorization: Bearer <key>`
  carries the API key; without one the request is anonymous (the real service serves anonymous
  callers at a low rate; `anonymous=False` makes the fake refuse them).
* `Accept: application/json` ("JSON mode") answers
  `{"code": 200, "status": 20000, "data": {"title", "description", "url", "content", "usage": {"tokens"}}}`;
  any other Accept answers the page as text/plain:
  `Title: <title>\\n\\nURL Source: <url>\\n\\nMarkdown Content:\\n<content>`.
* Errors are JSON envelopes whatever the Accept:
  `{"data": null, "code": <HTTP status>, "name": "<...Error>", "status": <code*100+n>, "message": ..., "readableMessage": ...}`
  with the statuses of the reader's error classes: 401 AuthenticationRequiredError (no key) and
  AuthenticationFailedError (bad key), 402 InsufficientBalanceError, 422 AssertionFailureError
  (the page could not be loaded), 429 RateLimitTriggeredError (with Retry-After), 451
  SecurityCompromiseError (blocked), 5xx.

Scripting: `pages[url] = {"title", "content", "description"}` sets a page (else a deterministic
one is generated). `script[url]` and `key_script[key]` are lists of entries consumed one per
request (the last one repeats); the key's script is looked at first. An entry is a dict with any
of: status (an error envelope with that status, or with `in_body` the envelope under HTTP 200),
retry_after, delay (seconds), close (drop the connection), garbage (raw bytes with status 200),
oversize (a page of that many content bytes).
"""
import json
import threading
import urllib.parse

from base import FakeServer, Reply, json_reply

ERRORS = {
    400: ("ParamValidationError", 40001, "Invalid request parameters"),
    401: ("AuthenticationFailedError", 40103, "Invalid API key, please get a new one from https://jina.ai"),
    402: ("InsufficientBalanceError", 40203, "Account balance not enough to run this query, please recharge."),
    403: ("AbuseAlleviationError", 40305, "Anonymous access to this domain is blocked"),
    422: ("AssertionFailureError", 42206, "Failed to goto the page: net::ERR_NAME_NOT_RESOLVED"),
    429: ("RateLimitTriggeredError", 42903, "Per key rate limit exceeded"),
    451: ("SecurityCompromiseError", 45102, "Domain blocked for security reasons"),
    500: ("InternalServerError", 50001, "Internal server error"),
    503: ("ServiceNodeResourceDrainError", 50303, "No resource available"),
}


def envelope(status, message=None, name=None):
    n, st, msg = ERRORS.get(status, ("ApplicationError", status * 100, "Error %d" % status))
    name = name or n
    message = message or msg
    return {"data": None, "code": status, "name": name, "status": st, "message": message,
            "readableMessage": "%s: %s" % (name, message)}


def generated(url):
    return {"title": "Page of %s" % url, "description": "",
            "content": "# Page of %s\n\nThis is the readable text of %s, as the reader renders it." % (url, url)}


def text_form(url, page):
    return "Title: %s\n\nURL Source: %s\n\nMarkdown Content:\n%s" % (page["title"], url, page["content"])


class FakeJina:
    def __init__(self, keys=("test-jina-key",), anonymous=True, port=0):
        self.keys = list(keys)
        self.anonymous = anonymous
        self.pages = {}
        self.script = {}
        self.key_script = {}
        self.lock = threading.Lock()
        self.server = FakeServer(self.app, port=port)
        self.url = self.server.url
        self.port = self.server.port

    def stop(self):
        self.server.stop()

    def page_requests(self):
        """(page URL, key or None, Accept) of every request for a page."""
        out = []
        for r in list(self.server.requests):
            if r.target.startswith("/") and len(r.target) > 1:
                auth = r.headers.get("authorization")
                out.append((r.target[1:], auth[7:] if auth and auth.startswith("Bearer ") else None, r.headers.get("accept")))
        return out

    def _next(self, table, k):
        with self.lock:
            lst = table.get(k)
            if not lst:
                return None
            return lst[0] if len(lst) == 1 else lst.pop(0)

    def app(self, req):
        if req.method != "GET":
            return json_reply(envelope(405, "Only GET is faked here", "MethodNotAllowedError"), 405)
        target = req.target[1:]
        auth = req.headers.get("authorization")
        key = None
        if auth is not None:
            if not auth.startswith("Bearer ") or auth[7:] not in self.keys:
                return json_reply(envelope(401), 401)
            key = auth[7:]
        elif not self.anonymous:
            return json_reply(envelope(401, "Authentication is required to use this endpoint.", "AuthenticationRequiredError"),
                              401)
        if target == "":  # the service root: usage and the caller's balance
            return json_reply({"code": 200, "status": 20000, "data": {"usage1": "%s/YOUR_URL" % self.url,
                                                                       "authenticatedAs": key and "fake-account"}})
        entry = (self._next(self.key_script, key) if key is not None else None) or self._next(self.script, target)
        if entry is None:
            entry = self._next(self.script, urllib.parse.unquote(target))
        if isinstance(entry, Reply):
            return entry
        delay = 0.0
        if isinstance(entry, dict):
            delay = entry.get("delay", 0.0)
            if entry.get("close"):
                return Reply(close=True, delay=delay)
            if "garbage" in entry:
                return Reply(200, entry["garbage"], delay=delay)
            if "status" in entry and entry["status"] != 200:
                headers = {}
                if "retry_after" in entry:
                    headers["Retry-After"] = str(entry["retry_after"])
                body = envelope(entry["status"], entry.get("message"))
                return json_reply(body, 200 if entry.get("in_body") else entry["status"], headers=headers, delay=delay)
        page = self.pages.get(target) or self.pages.get(urllib.parse.unquote(target)) or generated(target)
        if isinstance(entry, dict) and "oversize" in entry:
            page = {"title": "Huge", "description": "", "content": "x" * entry["oversize"]}
        accept = req.headers.get("accept", "")
        if "application/json" in accept:
            data = {"title": page["title"], "description": page.get("description", ""), "url": target,
                    "content": page["content"], "usage": {"tokens": max(1, len(page["content"]) // 4)}}
            return json_reply({"code": 200, "status": 20000, "data": data}, delay=delay)
        return Reply(200, text_form(target, page).encode(), delay=delay, content_type="text/plain; charset=utf-8")
