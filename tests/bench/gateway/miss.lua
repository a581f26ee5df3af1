-- wrk script: every request asks a query no earlier request asked (a cache miss that reaches the
-- backend), so each one goes through admission, spend budgets included. Each wrk thread has its
-- own tag, so threads never ask the same query.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
local tag
function init(args)
  tag = tostring(os.time()) .. "-" .. tostring(tid)
end

request = function()
  n = n + 1
  local body = '{"queries":["distinct query ' .. tag .. "-" .. tostring(n) .. '"],"topk":3,"return_scores":true}'
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end
