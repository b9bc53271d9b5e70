-- Change the visibility of received messages, each where it still holds the receipt's token.
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, wake channel, mode, then per
-- entry: message id, token, new visible_at. Mode 'back' gives the messages back as though
-- the receive had not been made (give_back): the receive count one lower, the first
-- receive forgotten at 0, the token gone. Returns 1 (changed) or 0 (stale) per entry.
local prefix, now_text, channel, back = ARGV[1], ARGV[3], ARGV[4], ARGV[5] == 'back'
local now = tonumber(now_text)
local ids, tokens, visibles = {}, {}, {}
for i = 6, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
  tokens[#tokens + 1] = ARGV[i + 1]
  visibles[#visibles + 1] = ARGV[i + 2]
end
local texts = redis.call('HMGET', prefix .. 'st', unpack(ids))
local current, changed, out = {}, {}, {}
for j, id in ipairs(ids) do
  local text = current[id] or texts[j]
  if holds(text, tokens[j]) then
    local n, r, f, _, t = read_state(text, '')
    if not current[id] then changed[#changed + 1] = id end
    if back then
      n = math.max(n - 1, 0)
      if n == 0 then f = false end
      t = false
    end
    current[id] = write_state(n, r + 1, f, visibles[j], t)
    out[j] = 1
  else
    out[j] = 0
  end
end
if #changed > 0 then
  local states, ready, flying = {}, {}, {}
  local scores = redis.call('ZMSCORE', prefix .. 'all', unpack(changed))
  for j, id in ipairs(changed) do
    local text = current[id]
    states[#states + 1] = id
    states[#states + 1] = text
    local _, _, _, visible = read_state(text, '')
    if tonumber(visible) <= now then
      if scores[j] then
        ready[#ready + 1] = scores[j]
        ready[#ready + 1] = id
      end
    else
      flying[#flying + 1] = visible
      flying[#flying + 1] = id
    end
  end
  write_states(prefix, states)
  redis.call('ZREM', prefix .. 'ready', unpack(changed))
  redis.call('ZREM', prefix .. 'inflight', unpack(changed))
  if #flying > 0 then zadd(prefix .. 'inflight', unpack(flying)) end
  if #ready > 0 then
    zadd(prefix .. 'ready', unpack(ready))
    if channel ~= '' then redis.call('PUBLISH', channel, ARGV[2]) end
  end
end
return out
