-- Send messages to one queue, all or none (a script runs whole).
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, dedup expiry, wake channel,
-- then 9 values per message: id, body, attributes, group, dedup key, priority, deadline,
-- visible_at, compressed.
-- Returns, per message: 1 and its sequence, or 0 and the id it duplicates.
local prefix, now_text, dedup_until, channel = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local now = tonumber(now_text)
local out = {}
local woken = false
local meta = prefix .. 'meta'
local next_seq = redis.call('HINCRBY', meta, 'seq', (#ARGV - 5) / 9) - (#ARGV - 5) / 9 + 1
local stored = 0
local adds = new_adds()
for i = 6, #ARGV, 9 do
  local seq, id = store(prefix, now, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3],
                        ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8],
                        now_text, dedup_until, next_seq, adds)
  if seq then
    next_seq = next_seq + 1
    stored = stored + 1
    table.insert(out, 1)
    table.insert(out, seq)
    if tonumber(ARGV[i + 7]) <= now then woken = true end
  else
    table.insert(out, 0)
    table.insert(out, id)
  end
end
flush_adds(prefix, adds)
if stored > 0 then
  redis.call('HINCRBY', meta, 'sent', stored)
end
if woken and channel ~= '' then
  redis.call('PUBLISH', channel, ARGV[2])
end
return out
