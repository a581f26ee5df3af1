"""A fake serper.dev: `POST /search` as docs/protocols.md, "serper.dev" describes it.

The real service cannot be reached from the build machines, so the tests talk to this. It
validates requests the way the real service does (as far as its clients document it): the
`X-API-KEY` header must carry the key (else 403 {"message":"Unauthorized.","statusCode":403}),
the body must be a JSON object with a non-empty string `q`, an integer `num` in 1..100 and
string `gl`/`hl` when present (else 400 with a message). A good request gets
{"searchParameters": {...}, "organic": [...], "credits": 1}.

Results: `organic[q]` when the test set one for that query, else a deterministic generated list
of `num` items. Misbehaviour is scripted per query text with `script[q] = [Reply or dict, ...]`
(consumed one per request; the last entry repeats) or for every query with `default_script`, and
per key with `key_script[key]` (looked at first: a revoked key, a key over its rate). A dict entry
may hold: status, body, delay, close, retry_after, garbage (bytes), oversize (n). Several keys
are valid when `extra_keys` names more than `api_key` (labs spread their quota over keys).
"""
import json
import threading

from base import FakeServer, Reply, json_reply


def generated(q, num):
    items = []
    for i in range(num):
        items.append({
            "title": "Result %d for %s" % (i + 1, q),
            "link": "https://example.org/%d?q=%s" % (i + 1, q.replace(" ", "+")),
            "snippet": "This is the first long fragment about %s number %d ... short bit ... and then another fragment "
                       "that has more than five words in it" % (q, i + 1),
            "position": i + 1,
        })
    return items


class FakeSerper:
    def __init__(self, api_key="test-serper-key", certfile=None, keyfile=None, port=0, extra_keys=()):
        self.api_key = api_key
        self.keys = [api_key] + list(extra_keys)
        self.organic = {}
        self.script = {}
        self.key_script = {}
        self.default_script = []
        self.lock = threading.Lock()
        self.served = 0
        self.server = FakeServer(self.app, port=port, certfile=certfile, keyfile=keyfile)
        self.url = self.server.url
        self.port = self.server.port

    def stop(self):
        self.server.stop()

    @property
    def requests(self):
        return self.server.requests

    def search_requests(self):
        return [r for r in self.server.requests if r.path == "/search"]

    def keys_used(self):
        """The X-API-KEY of every /search request, in order."""
        return [r.headers.get("x-api-key") for r in self.search_requests()]

    def _next_script(self, q, key=None):
        with self.lock:
            lst = self.key_script.get(key)
            if not lst:
                lst = self.script.get(q)
            if lst is None:
                lst = self.default_script
            if not lst:
                return None
            entry = lst[0] if len(lst) == 1 else lst.pop(0)
        return entry

    def app(self, req):
        if req.method != "POST" or req.path != "/search":
            return json_reply({"message": "Not found.", "statusCode": 404}, 404)
        if req.headers.get("x-api-key") not in self.keys:
            return json_reply({"message": "Unauthorized.", "statusCode": 403}, 403)
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            return json_reply({"message": "Invalid JSON body.", "statusCode": 400}, 400)
        if not isinstance(body, dict):
            return json_reply({"message": "Body must be an object.", "statusCode": 400}, 400)
        q = body.get("q")
        if not isinstance(q, str) or q == "":
            return json_reply({"message": "Missing query parameter: q", "statusCode": 400}, 400)
        num = body.get("num", 10)
        if not isinstance(num, int) or isinstance(num, bool) or not 1 <= num <= 100:
            return json_reply({"message": "num must be an integer between 1 and 100", "statusCode": 400}, 400)
        for k in ("gl", "hl"):
            if k in body and not isinstance(body[k], str):
                return json_reply({"message": "%s must be a string" % k, "statusCode": 400}, 400)
        entry = self._next_script(q, req.headers.get("x-api-key"))
        if isinstance(entry, Reply):
            return entry
        delay = 0.0
        if isinstance(entry, dict):
            delay = entry.get("delay", 0.0)
            if "garbage" in entry:
                return Reply(entry.get("status", 200), entry["garbage"], delay=delay)
            if "oversize" in entry:
                blob = json.dumps({"organic": [{"title": "x", "snippet": "y" * entry["oversize"]}]})
                return Reply(200, blob.encode(), delay=delay)
            if entry.get("close"):
                return Reply(close=True, delay=delay)
            if "status" in entry and entry["status"] != 200:
                headers = {}
                if "retry_after" in entry:
                    headers["Retry-After"] = str(entry["retry_after"])
                body_out = entry.get("body", {"message": "scripted failure", "statusCode": entry["status"]})
                return json_reply(body_out, entry["status"], headers=headers, delay=delay)
        items = self.organic.get(q)
        if items is None:
            items = generated(q, num)
        with self.lock:
            self.served += 1
        reply = {"searchParameters": {"q": q, "gl": body.get("gl", "us"), "hl": body.get("hl", "en"), "type": "search",
                                      "num": num, "engine": "google"},
                 "organic": items, "credits": 1}
        return json_reply(reply, delay=delay)


def slime_format(organic):
    """What slime's google path makes of serper's organic items (examples/search-r1/
    google_search_server.py, google_search with snippet_only and its parse_snippet; the commit is in
    tests/clients/client_models.py PINS), restated from docs/backends/serper.md to compare the
    gateway with: the snippet is cut at every "...", the pieces are stripped and those of at least
    six words (Python's str.split: any Unicode whitespace separates) are kept, joined by one space;
    an item with an empty title and no piece left is dropped; the rest become
    {"document": {"contents": '"<title>"\n<pieces>'}}, "No title." and "No snippet available."
    standing in for an empty part."""
    out = []
    for item in organic:
        pieces = [p.strip() for p in item.get("snippet", "").split("...")]
        context = " ".join(p for p in pieces if len(p.split()) >= 6)
        title = item.get("title", "")
        if title == "" and context == "":
            continue
        out.append({"document": {"contents": '"%s"\n%s' % (title or "No title.", context or "No snippet available.")}})
    return out
