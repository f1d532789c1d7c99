-- wrk script for webhook_flood.sh: a chat completion the organization's policy blocks, paced by
-- WRK_DELAY_MS per connection (so -c N gives about N * 1000 / (delay + latency) requests a
-- second). done() prints the same RESULT line as ../shared/bench/chat.lua.
local pause = tonumber(os.getenv("WRK_DELAY_MS") or "4")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = os.getenv("WRK_AUTH") or ""
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"my account is ACCT-123456"}]}'

function delay()
  return pause
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d bytes=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%d"
      .. " err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
