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
local key = message_key(prefix, id)
if redis.call('EXISTS', key) == 0 then
  return false
end
if op == 'remove' then
  drop(prefix, name, id, now_text, 'removed', ARGV[7] == '1')
  redis.call('HINCRBY', prefix .. 'meta', 'deleted', 1)  -- an admin's delete is a delete
  return {}
elseif op == 'moved' then
  drop(prefix, name, id, now_text, 'moved', false)
  if ARGV[7] == 'dead' then redis.call('HINCRBY', prefix .. 'meta', 'dead', 1) end
  return {}
end
local score = tonumber(redis.call('ZSCORE', prefix .. 'all', id))
if op == 'update' then
  local body, compressed, attrs, priority, visible = ARGV[7], ARGV[8], ARGV[9], ARGV[10],
    ARGV[11]
  if ARGV[12] == '1' then
    redis.call('HSET', key, 'b', body)
    if compressed == '1' then redis.call('HSET', key, 'z', '1') else redis.call('HDEL', key, 'z') end
  end
  if ARGV[13] == '1' then
    if attrs ~= '' then redis.call('HSET', key, 'a', attrs) else redis.call('HDEL', key, 'a') end
  end
  if ARGV[14] == '1' and tonumber(priority) ~= tonumber(redis.call('HGET', key, 'p')) then
    -- a new priority is a new place: the back of that priority's messages
    local seq = redis.call('HINCRBY', prefix .. 'meta', 'seq', 1)
    score = order(tonumber(priority), seq)
    redis.call('HSET', key, 'p', priority, 'q', seq)
    redis.call('HDEL', key, 't')
    zadd(prefix .. 'all', score, id)
  end
  if ARGV[15] == '1' then
    redis.call('HSET', key, 'v', visible)
  end
elseif op == 'reset' then
  redis.call('HSET', key, 'n', 0, 'v', now_text)
  redis.call('HDEL', key, 'f', 't')
elseif op == 'fail' then
  redis.call('HSET', key, 'v', ARGV[7])
  redis.call('HDEL', key, 't')
end
redis.call('HSET', key, 'r', tonumber(redis.call('HGET', key, 'r') or 1) + 1)
local state = redis.call('HMGET', key, 'v', 'n')
local visible = tonumber(state[1])
place(prefix, id, now, visible, state[1], tonumber(state[2] or 0), score)
if visible <= now and channel ~= '' then
  redis.call('PUBLISH', channel, name)
end
return fetch(prefix, id)
