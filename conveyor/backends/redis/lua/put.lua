-- One half of a move between queues in different slots of a Redis Cluster (the other half
-- removes the message from its source with edit's 'moved'): write a moved message at the
-- back of this queue, replacing a message of the same id. KEYS[1] the queue's meta.
-- ARGV: prefix, queue name, now, wake channel, count as sent (1/0), then the message: id,
-- its string (visible from now), priority, deadline ('' for none), sent_at. Returns its
-- sequence.
local prefix, name, now_text, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id, blob, priority, deadline, sent = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
if redis.call('HEXISTS', prefix .. 'msg', id) == 1 then
  drop(prefix, name, id, now_text, 'replaced', false)
end
local seq = redis.call('HINCRBY', prefix .. 'meta', 'seq', '1')
local score = int(order(tonumber(priority), seq))
write_messages(prefix, {id, blob})
if deadline ~= '' then zadd(prefix .. 'dl', deadline, id) end
zadd(prefix .. 'all', score, id)
zadd(prefix .. 'ready', score, id)
zadd(prefix .. 'sent', sent, id)
if ARGV[5] == '1' then redis.call('HINCRBY', prefix .. 'meta', 'sent', '1') end
if channel ~= '' then redis.call('PUBLISH', channel, name) end
return seq
