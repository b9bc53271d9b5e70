-- Send one message to several queues, all in this slot, all or none.
-- KEYS: the queues' metas. ARGV: now, dedup expiry, wake channel, id, body, attributes,
-- group, deadline, compressed, then per queue: prefix, name, dedup key, priority,
-- visible_at. Returns per queue: 1 and the sequence, or 0 and the id it duplicates.
local now_text, dedup_until, channel = ARGV[1], ARGV[2], ARGV[3]
local id, body, attrs, group, deadline, compressed = ARGV[4], ARGV[5], ARGV[6], ARGV[7],
  ARGV[8], ARGV[9]
local now = tonumber(now_text)
local out = {}
for i = 10, #ARGV, 5 do
  local prefix, name, dedup, priority, visible = ARGV[i], ARGV[i + 1], ARGV[i + 2],
    ARGV[i + 3], ARGV[i + 4]
  local meta = prefix .. 'meta'
  local adds = new_adds()
  local seq, first = store(prefix, now, id, body, attrs, group, dedup, priority, deadline,
                           visible, compressed, now_text, dedup_until,
                           tonumber(redis.call('HGET', meta, 'seq') or 0) + 1, adds)
  flush_adds(prefix, adds)
  if seq then
    redis.call('HINCRBY', meta, 'seq', 1)
    redis.call('HINCRBY', meta, 'sent', 1)
    table.insert(out, 1); table.insert(out, seq)
    if channel ~= '' then redis.call('PUBLISH', channel, name) end
  else
    table.insert(out, 0); table.insert(out, first)
  end
end
return out
