-- Counts by state, the oldest message's sent_at, and the running totals.
-- KEYS[1] the queue's meta. ARGV: prefix, now.
local prefix, now_text = ARGV[1], ARGV[2]
local due = redis.call('ZCOUNT', prefix .. 'delayed', '-inf', now_text)
  + redis.call('ZCOUNT', prefix .. 'inflight', '-inf', now_text)
local oldest = redis.call('ZRANGE', prefix .. 'sent', '0', '0', 'WITHSCORES')
local totals = redis.call('HMGET', prefix .. 'meta', 'sent', 'received', 'deleted', 'dead',
                          'expired')
return {
  redis.call('ZCARD', prefix .. 'ready') + due,
  redis.call('ZCOUNT', prefix .. 'delayed', '(' .. now_text, '+inf'),
  redis.call('ZCOUNT', prefix .. 'inflight', '(' .. now_text, '+inf'),
  oldest[2] or false,
  totals[1] or 0, totals[2] or 0, totals[3] or 0, totals[4] or 0, totals[5] or 0,
}
