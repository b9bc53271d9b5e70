-- Remove up to `most` messages of a queue (a purge), or everything of it (a deleted queue).
-- KEYS[1] the queue's meta. ARGV: prefix, most, everything (1/0).
-- Returns how many messages went, and whether anything is left.
local prefix, most, everything = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local ids = redis.call('ZRANGE', prefix .. 'all', '0', int(most - 1))
if #ids > 0 then
  redis.call('HDEL', prefix .. 'msg', unpack(ids))
  redis.call('HDEL', prefix .. 'st', unpack(ids))
  for _, index in ipairs({'all', 'ready', 'delayed', 'inflight', 'sent', 'dl'}) do
    redis.call('ZREM', prefix .. index, unpack(ids))
  end
end
local left = redis.call('ZCARD', prefix .. 'all') > 0
if not left then
  redis.call('DEL', prefix .. 'dedup', prefix .. 'ddx', prefix .. 'st', prefix .. 'msg')
end
if everything and not left then
  local entries = redis.call('LRANGE', prefix .. 'archive', '0', int(most - 1))
  for _, n in ipairs(entries) do
    redis.call('DEL', prefix .. 'arch:' .. n)
  end
  redis.call('LTRIM', prefix .. 'archive', int(#entries), '-1')
  left = redis.call('LLEN', prefix .. 'archive') > 0
  if not left then
    redis.call('DEL', prefix .. 'meta', prefix .. 'archive')
  end
end
return {#ids, left and 1 or 0}
