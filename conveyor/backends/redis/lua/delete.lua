-- Delete messages by receipt: each where its message still holds the receipt's token.
-- KEYS[1] the queue's meta. ARGV: prefix, queue name, now, archive (1/0), then per
-- receipt: message id, token. Returns 1 (deleted) or 0 (stale) per receipt.
local prefix, name, now_text, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local out, gone = {}, 0
for i = 5, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', message_key(prefix, id), 't') == token then
    drop(prefix, name, id, now_text, 'deleted', keep)
    gone = gone + 1
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if gone > 0 then
  redis.call('HINCRBY', prefix .. 'meta', 'deleted', gone)
end
return out
