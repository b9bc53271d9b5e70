-- Change the visibility of received messages, each where it still holds the receipt's token.
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, wake channel, then per entry:
-- message id, token, new visible_at. Returns 1 (changed) or 0 (stale) per entry.
local prefix, now_text, channel = ARGV[1], ARGV[3], ARGV[4]
local now = tonumber(now_text)
local out = {}
local released = false
for i = 5, #ARGV, 3 do
  local id, token, visible = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local key = message_key(prefix, id)
  local held = redis.call('HMGET', key, 't', 'n')
  if held[1] == token then
    redis.call('HSET', key, 'v', visible)
    redis.call('HINCRBY', key, 'r', 1)
    local score = redis.call('ZSCORE', prefix .. 'all', id)
    place(prefix, id, now, tonumber(visible), visible, tonumber(held[2] or 0), score)
    if tonumber(visible) <= now then released = true end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if released and channel ~= '' then
  redis.call('PUBLISH', channel, ARGV[2])
end
return out
