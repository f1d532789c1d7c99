-- wrk script for noisy_neighbour.sh: one chat completion whose user message is WRK_PROMPT_BYTES
-- (default 1 MiB) of lower-case words, as a tenant flooding gw with huge prompts would send.
-- done() prints the same RESULT line as ../shared/bench/chat.lua.
local size = tonumber(os.getenv("WRK_PROMPT_BYTES") or "1048576")
local words = { "lorem ", "ipsum ", "dolor ", "sit ", "amet ", "consectetur ", "adipiscing ", "elit " }
local parts, n, i = {}, 0, 0
while n < size do
  local w = words[(i % #words) + 1]
  parts[#parts + 1] = w
  n = n + #w
  i = i + 1
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = os.getenv("WRK_AUTH") or ""
wrk.body = '{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"'
  .. table.concat(parts) .. '"}]}'

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d bytes=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%d"
      .. " err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
