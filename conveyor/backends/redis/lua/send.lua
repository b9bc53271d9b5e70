-- Send messages to one queue, all or none (a script runs whole).
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, dedup expiry, wake channel, then
-- either 'full' and 6 values per message: id, message string, dedup key, priority,
-- deadline, visible_at; or 'bare', the priority and visible_at all share, and 2 values per
-- message: id, message string. Returns, per message: 1 and its sequence, or 0 and the id it
-- duplicates.
local prefix, now_text, dedup_until, channel = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local now = tonumber(now_text)
local meta = prefix .. 'meta'
local out, stored, woken
if ARGV[6] == 'bare' then
  -- made-up ids, no dedup keys or deadlines: one is only there already where this very send
  -- ran before and its answer was lost (a retry), so one ZMSCORE checks them all
  local count = (#ARGV - 8) / 2
  local next_seq = redis.call('HINCRBY', meta, 'seq', int(count)) - count + 1
  local base = order(tonumber(ARGV[7]), 0)
  local visible = ARGV[8]
  local ready = tonumber(visible) <= now
  local ids = {}
  for i = 9, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
  local held = redis.call('ZMSCORE', prefix .. 'all', unpack(ids))
  local kv, all, sent, index = {}, {}, {}, {}
  out, stored = {}, 0
  for j, id in ipairs(ids) do
    if held[j] then
      out[2 * j - 1] = 0
      out[2 * j] = id
    else
      local seq = next_seq + stored
      local score = int(base + seq)
      local k = 2 * stored + 1
      kv[k], kv[k + 1] = id, ARGV[8 + 2 * j]
      all[k], all[k + 1] = score, id
      sent[k], sent[k + 1] = now_text, id
      index[k], index[k + 1] = ready and score or visible, id
      stored = stored + 1
      out[2 * j - 1] = 1
      out[2 * j] = seq
    end
  end
  if stored > 0 then
    write_messages(prefix, kv)
    zadd(prefix .. 'all', unpack(all))
    zadd(prefix .. 'sent', unpack(sent))
    zadd(prefix .. (ready and 'ready' or 'delayed'), unpack(index))
  end
  woken = ready and stored > 0
else
  local messages = {}
  for i = 7, #ARGV, 6 do
    messages[#messages + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4],
                               ARGV[i + 5]}
  end
  local count = #messages
  local next_seq = redis.call('HINCRBY', meta, 'seq', int(count)) - count + 1
  out, stored, woken = store_all(prefix, now, now_text, messages, next_seq, dedup_until)
end
if stored > 0 then
  redis.call('HINCRBY', meta, 'sent', int(stored))
end
if woken and channel ~= '' then
  redis.call('PUBLISH', channel, ARGV[2])
end
return out
