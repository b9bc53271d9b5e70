-- Send messages to one queue, all or none (a script runs whole).
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, dedup expiry, wake channel, then
-- either 'full' and 9 values per message: id, body, attributes, group, dedup key, priority,
-- deadline, visible_at, compressed; or 'bare', the priority and visible_at all share, and 2
-- values per message: id, body (bodies without attributes, group, deadline or compression).
-- Returns, per message: 1 and its sequence, or 0 and the id it duplicates.
local prefix, now_text, dedup_until, channel = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local now = tonumber(now_text)
local bare = ARGV[6] == 'bare'
local first, step = 7, 9
if bare then first, step = 9, 2 end
local count = (#ARGV - first + 1) / step
local meta = prefix .. 'meta'
local next_seq = redis.call('HINCRBY', meta, 'seq', count) - count + 1
local out, stored, woken = {}, 0, false
local adds = new_adds()
if bare then
  -- made-up ids: one is only there already where this very send ran before and its answer
  -- was lost (a retry), so one ZMSCORE checks them all, and 'all' is added to once too
  local priority, visible = ARGV[7], ARGV[8]
  local ready = tonumber(visible) <= now
  local base = order(tonumber(priority), 0)
  local ids = {}
  for i = first, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
  local held = redis.call('ZMSCORE', prefix .. 'all', unpack(ids))
  local all, sent = {}, adds.sent
  local index = ready and adds.ready or adds.delayed
  for j, id in ipairs(ids) do
    if held[j] then
      out[#out + 1] = 0
      out[#out + 1] = id
    else
      local seq = next_seq + stored
      local score = base + seq
      redis.call('HSET', message_key(prefix, id), 'b', ARGV[first + 2 * j - 1], 'p', priority,
                 's', now_text, 'v', visible, 'q', seq)
      all[#all + 1] = score
      all[#all + 1] = id
      sent[#sent + 1] = now_text
      sent[#sent + 1] = id
      index[#index + 1] = ready and score or visible
      index[#index + 1] = id
      stored = stored + 1
      out[#out + 1] = 1
      out[#out + 1] = seq
    end
  end
  adds.all = all
  woken = ready and stored > 0
else
  for i = first, #ARGV, step do
    local visible = ARGV[i + 7]
    local seq, id = store(prefix, now, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3],
                          ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], visible, ARGV[i + 8], now_text,
                          dedup_until, next_seq, adds)
    if seq then
      next_seq = next_seq + 1
      stored = stored + 1
      out[#out + 1] = 1
      out[#out + 1] = seq
      if tonumber(visible) <= now then woken = true end
    else
      out[#out + 1] = 0
      out[#out + 1] = id
    end
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
