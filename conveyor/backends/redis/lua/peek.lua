-- Messages in delivery order after order score `after`, without receiving them: every one,
-- or those in one state. KEYS[1] the queue's meta. ARGV: prefix, now, after, limit, state
-- ('', 'ready', 'delayed' or 'in_flight'), or, for one message: prefix, '', id.
-- Returns messages flat (id, score, string, state each).
local prefix = ARGV[1]
if ARGV[2] == '' then
  return fetch(prefix, ARGV[3]) or {}
end
local now, after, limit, state = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local out = {}
local from = '(' .. after
while #out < 4 * limit do
  local page = redis.call('ZRANGEBYSCORE', prefix .. 'all', from, '+inf', 'WITHSCORES',
                          'LIMIT', '0', '256')
  if #page == 0 then break end
  local ids, scores = {}, {}
  for i = 1, #page, 2 do
    ids[#ids + 1] = page[i]
    scores[#scores + 1] = page[i + 1]
  end
  from = '(' .. page[#page]
  local blobs = redis.call('HMGET', prefix .. 'msg', unpack(ids))
  local texts = redis.call('HMGET', prefix .. 'st', unpack(ids))
  for j, id in ipairs(ids) do
    local blob = blobs[j]
    if blob then
      local v, count = visibility(blob, texts[j])
      local visible = tonumber(v) <= now
      if state == '' or (state == 'ready' and visible)
          or (state == 'delayed' and not visible and count == 0)
          or (state == 'in_flight' and not visible and count > 0) then
        out[#out + 1] = id
        out[#out + 1] = scores[j]
        out[#out + 1] = blob
        out[#out + 1] = texts[j]
        if #out >= 4 * limit then break end
      end
    end
  end
  if #page < 512 then break end
end
return out
