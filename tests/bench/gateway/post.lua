-- wrk script: POST the JSON body in $SG_BODY (one fixed query: every request after the first is a cache hit)
wrk.method = "POST"
wrk.body = os.getenv("SG_BODY") or '{"queries":["who wrote hamlet"],"topk":3,"return_scores":true}'
wrk.headers["Content-Type"] = "application/json"
