-- wrk script for the remote-backend benchmark: POSTs $SG_BENCH_BODY to $SG_BENCH_PATH. Every
-- "@N@" in the body becomes a per-request unique token (thread id and counter), so the
-- gateway's singleflight and cache never merge two benchmark requests.
local body = os.getenv("SG_BENCH_BODY")
local path = os.getenv("SG_BENCH_PATH")
local next_id = 0
local counter = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

request = function()
  counter = counter + 1
  local b = string.gsub(body, "@N@", (tid or 0) .. "-" .. counter)
  return wrk.format("POST", path, {["Content-Type"] = "application/json"}, b)
end
