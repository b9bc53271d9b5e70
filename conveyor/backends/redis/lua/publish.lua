-- Send one message to several queues, all in this slot, all or none.
-- KEYS: the queues' metas. ARGV: now, dedup expiry, wake channel, id, body, ext, group,
-- deadline, then per queue: prefix, name, dedup key, dedup id (what the message shows),
-- priority, visible_at. Returns per queue: 1 and the sequence, or 0 and the id it
-- duplicates.
local now_text, dedup_until, channel = ARGV[1], ARGV[2], ARGV[3]
local id, body, ext, group, deadline = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local now = tonumber(now_text)
local out = {}
for i = 9, #ARGV, 6 do
  local prefix, name, dedup, shown, priority, visible = ARGV[i], ARGV[i + 1], ARGV[i + 2],
    ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local meta = prefix .. 'meta'
  local blob = pack_message(now_text, visible, group, shown, ext, body)
  local next_seq = tonumber(redis.call('HGET', meta, 'seq') or 0) + 1
  local result, stored = store_all(prefix, now, now_text,
                                   {{id, blob, dedup, priority, deadline, visible}},
                                   next_seq, dedup_until)
  if stored > 0 then
    redis.call('HINCRBY', meta, 'seq', '1')
    redis.call('HINCRBY', meta, 'sent', '1')
    if channel ~= '' then redis.call('PUBLISH', channel, name) end
  end
  out[#out + 1] = result[1]
  out[#out + 1] = result[2]
end
return out
