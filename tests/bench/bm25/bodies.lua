-- wrk script of the bm25 benchmark: POST /retrieve with one query per request, cycling through
-- the request bodies in $SG_BENCH_BODIES (one JSON body per line); each wrk thread starts at a
-- different place so concurrent connections do not send identical queries.
local bodies = {}
for line in io.lines(os.getenv("SG_BENCH_BODIES")) do
  bodies[#bodies + 1] = line
end
local next_id = 0
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end
local i = 0
function init(args)
  i = (id or 0) * 7919
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function request()
  i = i + 1
  return wrk.format(nil, nil, nil, bodies[(i % #bodies) + 1])
end
