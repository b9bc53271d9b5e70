-- Expire what is past retention or deadline (at most `most` of each), and forget FIFO
-- de-duplication keys past their five minutes. KEYS[1] the queue's meta. ARGV: prefix,
-- queue name, now, retention horizon, archive (1/0), most, deadline expiry (a deadline at
-- or before it is expired). Returns how many expired.
local prefix, name, now_text, horizon = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep, most, expires = ARGV[5] == '1', ARGV[6], ARGV[7]
local _, gone = expire_due(prefix, name, now_text, horizon, expires, keep, most)
for _, key in ipairs(redis.call('ZRANGEBYSCORE', prefix .. 'ddx', '-inf', now_text,
                                'LIMIT', '0', most)) do
  redis.call('HDEL', prefix .. 'dedup', key)
  redis.call('ZREM', prefix .. 'ddx', key)
end
return gone
