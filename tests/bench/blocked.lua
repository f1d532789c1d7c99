-- wrk script for webhook_flood.sh: a chat completion the organization's policy blocks, paced by
-- WRK_DELAY_MS per connection (so -c N gives about N * 1000 / (delay + latency) requests a
-- second). done() (result.lua) prints the same RESULT line as ../shared/bench/chat.lua.
local pause = tonumber(os.getenv("WRK_DELAY_MS") or "4")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = os.getenv("WRK_AUTH") or ""
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"my account is ACCT-123456"}]}'

function delay()
  return pause
end

dofile("tests/bench/result.lua")
