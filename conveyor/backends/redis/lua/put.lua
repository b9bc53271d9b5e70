-- One half of a move between queues in different slots of a Redis Cluster (the other half
-- removes the message from its source with edit's 'moved'): write a moved message at the
-- back of this queue, replacing a message of the same id. KEYS[1] the queue's meta.
-- ARGV: prefix, queue name, now, wake channel, count as sent (1/0), then the message:
-- id, body, attributes, group, dedup key, priority, deadline, sent_at, compressed, source
-- queue, error ('' for none). Returns its sequence.
local prefix, name, now_text, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id, priority, deadline, sent = ARGV[6], ARGV[11], ARGV[12], ARGV[13]
local key = message_key(prefix, id)
if redis.call('EXISTS', key) == 1 then
  drop(prefix, name, id, now_text, 'replaced', false)
end
local seq = redis.call('HINCRBY', prefix .. 'meta', 'seq', 1)
local score = order(tonumber(priority), seq)
local fields = {'b', ARGV[7], 'p', priority, 's', sent, 'v', now_text, 'n', 0, 'r', 1, 'q', seq}
local optional = {a = ARGV[8], g = ARGV[9], d = ARGV[10], z = ARGV[14], o = ARGV[15], e = ARGV[16]}
for field, value in pairs(optional) do
  if value ~= '' then table.insert(fields, field); table.insert(fields, value) end
end
if deadline ~= '' then
  table.insert(fields, 'dl'); table.insert(fields, deadline)
  zadd(prefix .. 'dl', deadline, id)
end
redis.call('HSET', key, unpack(fields))
zadd(prefix .. 'all', score, id)
zadd(prefix .. 'ready', score, id)
zadd(prefix .. 'sent', sent, id)
if ARGV[5] == '1' then redis.call('HINCRBY', prefix .. 'meta', 'sent', 1) end
if channel ~= '' then redis.call('PUBLISH', channel, name) end
return seq
