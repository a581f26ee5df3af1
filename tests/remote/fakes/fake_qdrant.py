"""A fake Qdrant REST server (v1.10+ query API), as docs/protocols.md, "Qdrant" describes it after
Qdrant's OpenAPI document. No Qdrant server can be installed or built on the build machines, so
the tests talk to this.

It holds one collection of points (id, vector, optional payload), really searches it (cosine:
vectors are normalised on insert, as Qdrant does; or dot product), and validates requests as
Qdrant does: the `api-key` header (or `Authorization: Bearer`) when a key is set (401 plain text
otherwise), the collection name (404 {"status":{"error":"Not found: Collection `x` doesn't
exist!"}}), the body shape and types (400 "Format error in JSON body: ..."), the vector size
(400 "Wrong input: Vector dimension error: expected dim: D, got N"), named vectors, and limit.

Endpoints: GET /collections/{name}, POST /collections/{name}/points/query and
/points/query/batch. Misbehaviour: `script` is a list of dicts consumed one per query request
(the last repeats): status, body, delay, close, garbage.
"""
import json
import math
import threading
import time

from base import FakeServer, Reply, json_reply


def _err(status, msg):
    return json_reply({"status": {"error": msg}, "time": 0.0, "result": None}, status)


def _normalise(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n > 0 else list(v)


class FakeQdrant:
    def __init__(self, collection="wiki_collection", dim=64, distance="Cosine", api_key=None, vector_name=None, port=0,
                 status="green"):
        self.collection = collection
        self.dim = dim
        self.distance = distance
        self.api_key = api_key
        self.vector_name = vector_name
        self.status = status
        self.points = []
        self.script = []
        self.lock = threading.Lock()
        self.server = FakeServer(self.app, port=port)
        self.url = self.server.url
        self.port = self.server.port

    def stop(self):
        self.server.stop()

    def upsert(self, pid, vector, payload=None):
        assert len(vector) == self.dim
        v = _normalise(vector) if self.distance == "Cosine" else list(vector)
        self.points.append({"id": pid, "vector": v, "payload": payload})

    def query_requests(self):
        return [r for r in self.server.requests if r.method == "POST" and "/points/query" in r.path]

    # ---- request handling ----

    def _auth(self, req):
        if self.api_key is None:
            return None
        key = req.headers.get("api-key")
        auth = req.headers.get("authorization", "")
        if key is None and auth.startswith("Bearer "):
            key = auth[7:]
        if key is None:
            return Reply(401, b"Must provide an API key or an Authorization bearer token", content_type="text/plain")
        if key != self.api_key:
            return Reply(401, b"Invalid API key or JWT", content_type="text/plain")
        return None

    def _info(self):
        vec = {"size": self.dim, "distance": self.distance}
        vectors = {self.vector_name: vec} if self.vector_name else vec
        return json_reply({"result": {"status": self.status, "optimizer_status": "ok", "indexed_vectors_count": 0,
                                      "points_count": len(self.points), "segments_count": 1,
                                      "config": {"params": {"vectors": vectors, "shard_number": 1, "replication_factor": 1,
                                                            "write_consistency_factor": 1, "on_disk_payload": True},
                                                 "hnsw_config": {"m": 32, "ef_construct": 512, "full_scan_threshold": 10000}},
                                      "payload_schema": {}},
                           "status": "ok", "time": 0.0001})

    def _validate_query(self, q):
        """Returns (vector, limit, with_payload, threshold) or raises ValueError(reply)."""
        if not isinstance(q, dict):
            raise ValueError(_err(400, "Format error in JSON body: invalid type: expected struct QueryRequestInternal"))
        vec = q.get("query")
        if isinstance(vec, dict) and "nearest" in vec:
            vec = vec["nearest"]
        if not isinstance(vec, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec):
            raise ValueError(_err(400, "Format error in JSON body: data did not match any variant of untagged enum QueryInterface"))
        using = q.get("using")
        if using is not None and using != self.vector_name:
            raise ValueError(_err(400, "Wrong input: Not existing vector name error: %s" % using))
        if using is None and self.vector_name is not None:
            raise ValueError(_err(400, "Wrong input: Not existing vector name error: "))
        if len(vec) != self.dim:
            raise ValueError(_err(400, "Wrong input: Vector dimension error: expected dim: %d, got %d" % (self.dim, len(vec))))
        limit = q.get("limit", 10)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(_err(400, "Validation error in JSON body: [limit: value %r invalid, must be 1 or larger]" % limit))
        wp = q.get("with_payload", False)
        if not isinstance(wp, (bool, list, dict)):
            raise ValueError(_err(400, "Format error in JSON body: invalid type for with_payload"))
        params = q.get("params")
        if params is not None:
            if not isinstance(params, dict):
                raise ValueError(_err(400, "Format error in JSON body: invalid type: expected struct SearchParams"))
            ef = params.get("hnsw_ef")
            if ef is not None and (not isinstance(ef, int) or isinstance(ef, bool) or ef < 0):
                raise ValueError(_err(400, "Format error in JSON body: invalid value for hnsw_ef"))
            ex = params.get("exact")
            if ex is not None and not isinstance(ex, bool):
                raise ValueError(_err(400, "Format error in JSON body: invalid type for exact"))
        th = q.get("score_threshold")
        if th is not None and (not isinstance(th, (int, float)) or isinstance(th, bool)):
            raise ValueError(_err(400, "Format error in JSON body: invalid type for score_threshold"))
        return vec, limit, wp, th

    def _search(self, vec, limit, wp, th):
        qv = _normalise(vec) if self.distance == "Cosine" else vec
        scored = []
        for p in self.points:
            s = sum(a * b for a, b in zip(qv, p["vector"]))
            if th is not None and s < th:
                continue
            scored.append((s, p))
        scored.sort(key=lambda t: (-t[0], str(t[1]["id"])))
        out = []
        for s, p in scored[:limit]:
            pt = {"id": p["id"], "version": 1, "score": s}
            if wp is not False and p["payload"] is not None:
                pt["payload"] = p["payload"]
            elif wp is not False:
                pt["payload"] = None
            out.append(pt)
        return {"points": out}

    def _scripted(self):
        with self.lock:
            if not self.script:
                return None
            return self.script[0] if len(self.script) == 1 else self.script.pop(0)

    def app(self, req):
        bad = self._auth(req)
        if bad is not None:
            return bad
        parts = req.path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "collections":
            return Reply(404, b"", content_type=None)
        if parts[1] != self.collection:
            return _err(404, "Not found: Collection `%s` doesn't exist!" % parts[1])
        rest = "/".join(parts[2:])
        if req.method == "GET" and rest == "":
            return self._info()
        if req.method != "POST" or rest not in ("points/query", "points/query/batch"):
            return Reply(404, b"", content_type=None)
        entry = self._scripted()
        if entry is not None:
            if entry.get("close"):
                return Reply(close=True, delay=entry.get("delay", 0))
            if "garbage" in entry:
                return Reply(200, entry["garbage"], delay=entry.get("delay", 0))
            if entry.get("status", 200) != 200:
                headers = {"Retry-After": str(entry["retry_after"])} if "retry_after" in entry else {}
                return json_reply(entry.get("body", {"status": {"error": "Service internal error: scripted"}, "time": 0.0}),
                                  entry["status"], headers=headers, delay=entry.get("delay", 0))
            if entry.get("delay"):
                time.sleep(entry["delay"])
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError) as e:
            return _err(400, "Format error in JSON body: %s" % e)
        t0 = time.time()
        try:
            if rest == "points/query":
                res = self._search(*self._validate_query(body))
            else:
                if not isinstance(body, dict) or not isinstance(body.get("searches"), list):
                    return _err(400, "Format error in JSON body: missing field `searches`")
                res = [self._search(*self._validate_query(q)) for q in body["searches"]]
        except ValueError as e:
            return e.args[0]
        return Reply(200, json.dumps({"result": res, "status": "ok", "time": time.time() - t0}).encode())
