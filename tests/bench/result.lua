-- Shared by this directory's wrk scripts (dofile'd; wrk runs from the checkout's root): done()
-- prints the same machine-readable RESULT line as ../shared/bench/chat.lua (latencies in us).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d bytes=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%d"
      .. " err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
