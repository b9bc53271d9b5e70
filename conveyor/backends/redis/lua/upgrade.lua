-- Rewrite messages of the first layout (a hash per message, "m:<id>", receipt state among its
-- fields) in this one: up to `most` messages of one queue, from rank `start` of 'all'.
-- KEYS[1] the queue's meta. ARGV: prefix, start, most. Returns the next start, or -1 when
-- the queue is done.
local prefix, start, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = redis.call('ZRANGE', prefix .. 'all', int(start), int(start + most - 1))
for _, id in ipairs(ids) do
  local key = prefix .. 'm:' .. id
  if redis.call('EXISTS', key) == 1 then
    local f = redis.call('HMGET', key, 'b', 'a', 'g', 'd', 'dl', 's', 'v', 'n', 'f', 'r', 't',
                         'o', 'e', 'z')
    local ext = {a = f[2] or nil, dl = f[5] or nil, o = f[12] or nil, e = f[13] or nil,
                 z = f[14] and '1' or nil}
    write_messages(prefix, {id, pack_message(f[6], f[7], f[3] or '', f[4] or '',
                                             encode_ext(ext), f[1])})
    if f[8] or f[9] or f[10] or f[11] then
      write_states(prefix, {id, write_state(tonumber(f[8] or 0), tonumber(f[10] or 1), f[9],
                                            f[7], f[11])})
    end
    redis.call('DEL', key)
  end
end
if #ids < most then return -1 end
return start + #ids
