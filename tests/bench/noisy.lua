-- wrk script for noisy_neighbour.sh: one chat completion whose user message is WRK_PROMPT_BYTES
-- (default 1 MiB) of lower-case words, as a tenant flooding gw with huge prompts would send.
-- done() (result.lua) prints the same RESULT line as ../shared/bench/chat.lua.
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

dofile("tests/bench/result.lua")
