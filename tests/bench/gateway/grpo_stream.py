"""A GRPO-like query stream: N distinct queries, each sent `repeat` times by concurrent clients
(one query per request, like slime/RLinf), in rounds. Prints wall time and queries/s as JSON.
Usage: grpo_stream.py PORT [--distinct N] [--repeat 5] [--concurrency 64] [--path /retrieve]"""
import argparse
import http.client
import json
import queue
import random
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("--distinct", type=int, default=400)
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--concurrency", type=int, default=64)
ap.add_argument("--path", default="/retrieve")
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
rng = random.Random(a.seed)
work = [i for i in range(a.distinct) for _ in range(a.repeat)]
rng.shuffle(work)
q = queue.Queue()
for w in work:
    q.put(w)
errors = []


def client():
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=300)
    while True:
        try:
            i = q.get_nowait()
        except queue.Empty:
            break
        body = json.dumps({"queries": ["grpo prompt %d about hamlet paris tokyo" % i], "topk": 3, "return_scores": False})
        conn.request("POST", a.path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            errors.append(r.status)
    conn.close()


t0 = time.time()
ts = [threading.Thread(target=client) for _ in range(a.concurrency)]
for t in ts:
    t.start()
for t in ts:
    t.join()
dt = time.time() - t0
print(json.dumps({"queries": len(work), "seconds": round(dt, 3), "qps": round(len(work) / dt, 1), "errors": len(errors)}))
