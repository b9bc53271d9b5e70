-- Messages in delivery order after order score `after`, without receiving them: every one,
-- or those in one state. KEYS[1] the queue's meta. ARGV: prefix, now, after, limit, state
-- ('', 'ready', 'delayed' or 'in_flight'), or, for one message: prefix, '', id.
local prefix = ARGV[1]
if ARGV[2] == '' then
  return {fetch(prefix, ARGV[3]) or false}
end
local now, after, limit, state = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local out = {}
local from = '(' .. after
while #out < limit do
  local page = redis.call('ZRANGEBYSCORE', prefix .. 'all', from, '+inf', 'WITHSCORES',
                          'LIMIT', 0, 256)
  if #page == 0 then break end
  for i = 1, #page, 2 do
    local id = page[i]
    from = '(' .. page[i + 1]
    local f = redis.call('HMGET', message_key(prefix, id), 'v', 'n')
    if f[1] then
      local visible, count = tonumber(f[1]) <= now, tonumber(f[2] or 0)
      if state == '' or (state == 'ready' and visible)
          or (state == 'delayed' and not visible and count == 0)
          or (state == 'in_flight' and not visible and count > 0) then
        table.insert(out, fetch(prefix, id))
        if #out >= limit then break end
      end
    end
  end
  if #page < 512 then break end
end
return out
