-- Delete messages by receipt: each where its message still holds the receipt's token.
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, archive (1/0), then per
-- receipt: message id, token. Returns 1 (deleted) or 0 (stale) per receipt.
local prefix, name, now_text, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local ids, tokens = {}, {}
for i = 5, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  tokens[#tokens + 1] = ARGV[i + 1]
end
local texts = redis.call('HMGET', prefix .. 'st', unpack(ids))
local out, gone, seen = {}, {}, {}
local deleted = 0
for j, id in ipairs(ids) do
  local token = tokens[j]
  if seen[id] ~= nil then
    out[j] = 0 -- deleted already in this batch: stale, as a second delete would be
  elseif holds(texts[j], token) then
    seen[id] = token
    deleted = deleted + 1
    if keep then
      drop(prefix, name, id, now_text, 'deleted', true)
    else
      gone[#gone + 1] = id
    end
    out[j] = 1
  else
    out[j] = 0
  end
end
if #gone > 0 then
  drop_claimed(prefix, gone)
end
if deleted > 0 then
  redis.call('HINCRBY', prefix .. 'meta', 'deleted', int(deleted))
end
return out
