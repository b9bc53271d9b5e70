-- Edit one message in place. KEYS[1] the queue's meta. ARGV: prefix, queue name, now, wake
-- channel, operation, message id, then the operation's values:
--   update: body or '', compressed, attributes or '', priority or '', visible_at or '',
--           and 1 for each of body, attributes, priority, visible_at given (4 flags)
--   reset: -; fail: visible_at; remove: archive (1/0);
--   moved (taken out for a move to another slot): 'dead' to count it as dead-lettered
-- Returns the message as `fetch` gives it (nothing after remove), or false if it is absent.
local prefix, name, now_text, channel, op, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  ARGV[6]
local now = tonumber(now_text)
local blob = redis.call('HGET', prefix .. 'msg', id)
if not blob then
  return false
end
if op == 'remove' then
  drop(prefix, name, id, now_text, 'removed', ARGV[7] == '1')
  redis.call('HINCRBY', prefix .. 'meta', 'deleted', '1')  -- an admin's delete is a delete
  return {}
elseif op == 'moved' then
  drop(prefix, name, id, now_text, 'moved', false)
  if ARGV[7] == 'dead' then redis.call('HINCRBY', prefix .. 'meta', 'dead', '1') end
  return {}
end
local score = tonumber(redis.call('ZSCORE', prefix .. 'all', id))
local sent, visible, group, dedup, ext, start = unpack_message(blob)
local n, r, f, v, t = read_state(redis.call('HGET', prefix .. 'st', id), visible)
if op == 'update' then
  local fields = decode_ext(ext)
  local body = string.sub(blob, start)
  if ARGV[12] == '1' then
    body = ARGV[7]
    fields.z = ARGV[8] == '1' and '1' or nil
  end
  if ARGV[13] == '1' then
    fields.a = ARGV[9] ~= '' and ARGV[9] or nil
  end
  write_messages(prefix, {id, pack_message(sent, visible, group, dedup, encode_ext(fields),
                                           body)})
  local priority = ARGV[10]
  if ARGV[14] == '1' and tonumber(priority) ~= 32767 - math.floor(score / BAND) then
    -- a new priority is a new place: the back of that priority's messages
    local seq = redis.call('HINCRBY', prefix .. 'meta', 'seq', '1')
    score = order(tonumber(priority), seq)
    t = false
    zadd(prefix .. 'all', int(score), id)
  end
  if ARGV[15] == '1' then
    v = ARGV[11]
  end
elseif op == 'reset' then
  n, f, t, v = 0, false, false, now_text
elseif op == 'fail' then
  v, t = ARGV[7], false
end
write_states(prefix, {id, write_state(n, r + 1, f, v, t)})
local visible_at = tonumber(v)
place(prefix, id, now, visible_at, v, n, int(score))
if visible_at <= now and channel ~= '' then
  redis.call('PUBLISH', channel, name)
end
return fetch(prefix, id)
