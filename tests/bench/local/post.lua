-- wrk script for the local backend benchmark: POST /retrieve with distinct queries taken in turn
-- from $SG_BENCH_QUERIES (one JSON string literal per line), $SG_BENCH_PER_REQUEST queries per
-- request (default 1), starting at line $SG_BENCH_OFFSET (default 0), topk $SG_BENCH_TOPK (3).
local queries = {}
for line in io.lines(os.getenv("SG_BENCH_QUERIES")) do
  queries[#queries + 1] = line
end
local per = tonumber(os.getenv("SG_BENCH_PER_REQUEST") or "1")
local counter = tonumber(os.getenv("SG_BENCH_OFFSET") or "0")
local topk = tonumber(os.getenv("SG_BENCH_TOPK") or "3")
local headers = {["Content-Type"] = "application/json"}

request = function()
  local parts = {}
  for i = 1, per do
    parts[i] = queries[(counter % #queries) + 1]
    counter = counter + 1
  end
  local body = '{"queries":[' .. table.concat(parts, ",") .. '],"topk":' .. topk .. ',"return_scores":true}'
  return wrk.format("POST", "/retrieve", headers, body)
end
