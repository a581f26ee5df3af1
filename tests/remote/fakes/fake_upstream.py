"""A fake Search-R1-compatible retrieval server (docs/protocols.md, "The `/retrieve` contract"): `POST /retrieve` with
{"queries": [str], "topk": int|null, "return_scores": bool} and `POST /access` with
{"urls": [str]}, validated the way FastAPI + pydantic validate the reference QueryRequest
(a missing or ill-typed `queries` is a 422 {"detail": [...]}; falsy topk means the default 3).

Documents come from a small corpus scored by word overlap, so answers are deterministic.
`mode` selects the reference server it imitates:
  "slime"  -- both shapes, honouring return_scores (the SLIME/RLinf copies)
  "sr1"    -- the SR1/VERL bug: return_scores false is an HTTP 500 (docs/protocols.md, "Server quirks the clients adapted to")
  "flat"   -- always the flat shape, whatever return_scores says
Scripted misbehaviour works as in fake_serper (script[first query] or default_script).
"""
import re
import threading

from base import FakeServer, Reply, json_reply

CORPUS = [
    {"id": "0", "contents": "\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare around 1600."},
    {"id": "1", "contents": "\"Paris\"\nParis is the capital and largest city of France."},
    {"id": "2", "contents": "\"Tokyo\"\nTokyo is the capital of Japan. 東京都"},
    {"id": "3", "contents": "\"FAISS\"\nFAISS is a library for efficient similarity search of dense vectors."},
    {"id": "4", "contents": "\"Redis\"\nRedis is an in-memory data store used as a cache.", "url": "https://redis.io/"},
    {"id": "5", "contents": "\"Zürich\"\nZürich is the largest city in Switzerland."},
]
PAGES = {"https://en.wikipedia.org/wiki/Hamlet": {"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"}}


def words(s):
    return set(re.findall(r"\w+", s.lower()))


def search(q, k):
    qw = words(q)
    scored = []
    for i, d in enumerate(CORPUS):
        dw = words(d["contents"])
        s = len(qw & dw) / max(1, len(qw))
        scored.append((-s, i, d, s))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(d, round(0.5 + s / 2, 6)) for _, _, d, s in scored[:k]]


class FakeUpstream:
    def __init__(self, mode="slime", name="up", port=0):
        self.mode = mode
        self.name = name
        self.script = {}
        self.default_script = []
        self.healthy = True
        self.lock = threading.Lock()
        self.server = FakeServer(self.app, port=port)
        self.url = self.server.url
        self.port = self.server.port

    def stop(self):
        self.server.stop()

    def retrieve_requests(self, include_probes=False):
        out = []
        for r in self.server.requests:
            if r.path != "/retrieve":
                continue
            if not include_probes and r.body and r.json().get("queries") == []:
                continue
            out.append(r)
        return out

    def _next_script(self, q):
        with self.lock:
            lst = self.script.get(q)
            if lst is None:
                lst = self.default_script
            if not lst:
                return None
            return lst[0] if len(lst) == 1 else lst.pop(0)

    def app(self, req):
        if req.method != "POST":
            return json_reply({"detail": "Method Not Allowed"}, 405)
        if not self.healthy:
            return Reply(503, b"down for maintenance", content_type="text/plain")
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            return json_reply({"detail": [{"loc": ["body"], "msg": "Expecting value", "type": "value_error.jsondecode"}]}, 422)
        if req.path == "/access":
            urls = body.get("urls") if isinstance(body, dict) else None
            if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
                return json_reply({"detail": [{"loc": ["body", "urls"], "msg": "field required", "type": "value_error.missing"}]},
                                  422)
            return json_reply({"result": [PAGES.get(u) for u in urls]})
        if req.path != "/retrieve":
            return json_reply({"detail": "Not Found"}, 404)
        queries = body.get("queries") if isinstance(body, dict) else None
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return json_reply({"detail": [{"loc": ["body", "queries"], "msg": "value is not a valid list",
                                           "type": "type_error.list"}]}, 422)
        topk = body.get("topk")
        if topk is not None and (not isinstance(topk, int) or isinstance(topk, bool)):
            return json_reply({"detail": [{"loc": ["body", "topk"], "msg": "value is not a valid integer",
                                           "type": "type_error.integer"}]}, 422)
        topk = topk or 3
        rs = body.get("return_scores", False)
        if queries:
            entry = self._next_script(queries[0])
            if isinstance(entry, Reply):
                return entry
            if isinstance(entry, dict):
                if "garbage" in entry:
                    return Reply(entry.get("status", 200), entry["garbage"], delay=entry.get("delay", 0))
                if entry.get("close"):
                    return Reply(close=True, delay=entry.get("delay", 0))
                if entry.get("status", 200) != 200:
                    headers = {"Retry-After": str(entry["retry_after"])} if "retry_after" in entry else {}
                    return json_reply(entry.get("body", {"detail": "scripted failure"}), entry["status"], headers=headers,
                                      delay=entry.get("delay", 0))
                if entry.get("wrong_count"):
                    return json_reply({"result": []})
                delay = entry.get("delay", 0)
            else:
                delay = 0
        else:
            delay = 0
        if self.mode == "sr1" and not rs:
            return Reply(500, b"Internal Server Error", content_type="text/plain")
        flat = self.mode == "flat" or not rs
        result = []
        for q in queries:
            hits = search(q, topk)
            if flat:
                result.append([d for d, _ in hits])
            else:
                result.append([{"document": d, "score": s} for d, s in hits])
        return json_reply({"result": result}, delay=delay)
