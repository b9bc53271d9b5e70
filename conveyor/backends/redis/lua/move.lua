-- Move messages from one queue to another, both in this slot. KEYS[1], KEYS[2] the queues'
-- metas. ARGV: source prefix, source name, destination prefix, destination name, now,
-- wake channel, mode ('dead': to the source's dead-letter queue, recording `error`;
-- 'redrive': back out of a dead-letter queue), error, then message ids.
-- Returns per id: 1 and its new sequence, 0 (absent) or 2 (in flight, not redriven).
local src, src_name, dest, dest_name, now_text, channel, mode, err = ARGV[1], ARGV[2],
  ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local now = tonumber(now_text)
local out, moved = {}, 0
for i = 9, #ARGV do
  local id = ARGV[i]
  local blob = redis.call('HGET', src .. 'msg', id)
  local v, count
  if blob then v, count = visibility(blob, redis.call('HGET', src .. 'st', id)) end
  if not blob then
    table.insert(out, 0); table.insert(out, false)
  elseif mode == 'redrive' and tonumber(v) > now and count > 0 then
    table.insert(out, 2); table.insert(out, false)
  else
    local seq
    if mode == 'dead' then
      seq = move(src, src_name, id, dest, dest_name, now, now_text, src_name,
                 err ~= '' and err or false)
      redis.call('HINCRBY', src .. 'meta', 'dead', '1')
    else
      seq = move(src, src_name, id, dest, dest_name, now, now_text, false, false)
      redis.call('HINCRBY', dest .. 'meta', 'sent', '1')
    end
    moved = moved + 1
    table.insert(out, 1); table.insert(out, seq)
  end
end
if moved > 0 and channel ~= '' then
  redis.call('PUBLISH', channel, dest_name)
end
return out
