-- Delete messages by receipt: each where its message still holds the receipt's token.
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, archive (1/0), then per
-- receipt: message id, token. Returns 1 (deleted) or 0 (stale) per receipt.
local prefix, name, now_text, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local out, gone, deadlines, seen = {}, {}, {}, {}
local deleted = 0
for i = 5, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local held = redis.call('HMGET', message_key(prefix, id), 't', 'dl')
  if seen[id] == token then
    table.insert(out, 1) -- the same receipt twice in one batch
  elseif held[1] == token then
    seen[id] = token
    deleted = deleted + 1
    if keep then
      drop(prefix, name, id, now_text, 'deleted', keep)
    else
      table.insert(gone, id)
      if held[2] then table.insert(deadlines, id) end
    end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if #gone > 0 then
  drop_claimed(prefix, gone, deadlines)
end
if deleted > 0 then
  redis.call('HINCRBY', prefix .. 'meta', 'deleted', deleted)
end
return out
