-- Shared by every script (prepended to each when it is loaded).
--
-- A queue's keys start with its prefix, "P:{tag}:name:id:", so every key of one queue lies
-- in one Redis Cluster slot:
--   meta      hash: seq, sent, received, deleted, dead, expired, tokens, tokens_at, archived
--   m:<id>    hash: one message (fields below)
--   all       zset: every message, by delivery order (priority band, then sequence)
--   ready     zset: visible messages, by delivery order
--   delayed   zset: invisible messages never received, by visible_at
--   inflight  zset: invisible messages received, by visible_at
--   sent      zset: every message, by sent_at (retention, oldest age)
--   dl        zset: messages with a deadline, by deadline
--   dedup     hash: FIFO de-duplication key -> "message id|expires at"; ddx zset by expiry
--   archive   list of archive entry numbers; arch:<n> hash: an archived message
-- Message fields: b body, a attributes (JSON), g group, d dedup key, p priority, dl
-- deadline, s sent_at, v visible_at, n receive count, f first received, r version,
-- t receipt token, o source queue, e error, z compressed, q sequence. A message never
-- received has no n (0) and no r (1): each field a send writes costs it about 1 µs.
-- Times travel as the decimal text the client sent, so no precision is lost in Lua.

local FIELDS = {'b', 'a', 'g', 'd', 'p', 'dl', 's', 'v', 'n', 'f', 'r', 'o', 'e', 'z', 'q'}
local BAND = 137438953472 -- 2^37: a delivery-order score stays exact in a double

-- Add to a sorted set (as ZADD, with its answer), keeping the set in Redis's skiplist
-- encoding whatever its size. A set made small gets the compact listpack encoding (up to 128
-- members by default), whose inserts scan and parse every score: at a few dozen members,
-- where the indexes of a queue whose consumers keep up live, an insert costs 4-6 times a
-- skiplist's. A set made with one member longer than zset-max-listpack-value is a skiplist,
-- and stays one while it exists (that member goes at once; it is made only then: making it
-- on every call would cost as much as the call).
local function zadd(key, ...)
  if redis.call('EXISTS', key) == 1 then
    return redis.call('ZADD', key, ...)
  end
  local wide = string.rep('~', 1024)
  redis.call('ZADD', key, 0, wide)
  local added = redis.call('ZADD', key, ...)
  redis.call('ZREM', key, wide)
  return added
end

local function order(priority, seq)
  return (32767 - priority) * BAND + seq
end

local function message_key(prefix, id)
  return prefix .. 'm:' .. id
end

-- The message as the client reads it: its id, the fields above, and a placeholder.
local function fetch(prefix, id)
  local values = redis.call('HMGET', message_key(prefix, id), unpack(FIELDS))
  if not values[1] then
    return nil
  end
  table.insert(values, 1, id)
  table.insert(values, false) -- the order score: the client computes it from p and q
  return values
end

-- Put a message in the index its state belongs to: ready, delayed or in flight.
local function place(prefix, id, now, visible_at, visible_text, count, score)
  redis.call('ZREM', prefix .. 'ready', id)
  redis.call('ZREM', prefix .. 'delayed', id)
  redis.call('ZREM', prefix .. 'inflight', id)
  if visible_at <= now then
    zadd(prefix .. 'ready', score, id)
  elseif count > 0 then
    zadd(prefix .. 'inflight', visible_text, id)
  else
    zadd(prefix .. 'delayed', visible_text, id)
  end
end

-- Remove a message from every index and delete it (archiving it first where asked).
local function drop(prefix, name, id, now_text, outcome, keep)
  local key = message_key(prefix, id)
  for _, index in ipairs({'all', 'ready', 'delayed', 'inflight', 'sent', 'dl'}) do
    redis.call('ZREM', prefix .. index, id)
  end
  if keep then
    local n = redis.call('HINCRBY', prefix .. 'meta', 'archived', 1)
    local entry = prefix .. 'arch:' .. n
    redis.call('RENAME', key, entry)
    redis.call('HSET', entry, 'i', id, 'x', now_text, 'y', outcome, 'u', name)
    redis.call('RPUSH', prefix .. 'archive', n)
  else
    redis.call('DEL', key)
  end
end

-- Delete messages known to be claimed (never in 'delayed'), without archiving: one
-- command per index for the whole batch.
local function drop_claimed(prefix, ids, deadlines)
  local keys = {}
  for i, id in ipairs(ids) do keys[i] = message_key(prefix, id) end
  redis.call('ZREM', prefix .. 'all', unpack(ids))
  redis.call('ZREM', prefix .. 'sent', unpack(ids))
  redis.call('ZREM', prefix .. 'inflight', unpack(ids))
  redis.call('ZREM', prefix .. 'ready', unpack(ids))
  if #deadlines > 0 then
    redis.call('ZREM', prefix .. 'dl', unpack(deadlines))
  end
  redis.call('DEL', unpack(keys))
end

local function expire(prefix, name, id, now_text, keep)
  drop(prefix, name, id, now_text, 'expired', keep)
  redis.call('HINCRBY', prefix .. 'meta', 'expired', 1)
end

-- Store one new message (fields as the client gave them). Returns its sequence, or nil
-- and the id it duplicates: an id the queue holds, or a FIFO dedup key seen before.
-- `seq` is the sequence it gets (the caller reserves them, and counts what was stored).
local function store(prefix, now, id, body, attrs, group, dedup, priority, deadline, visible,
                     compressed, now_text, dedup_until, seq, adds)
  local score = order(tonumber(priority), seq)
  if dedup == '' then
    -- 'all' holds every message of the queue: adding to it is the existence check
    if zadd(prefix .. 'all', 'NX', score, id) == 0 then
      return nil, id
    end
  else
    if redis.call('EXISTS', message_key(prefix, id)) == 1 then
      return nil, id
    end
    local seen = redis.call('HGET', prefix .. 'dedup', dedup)
    if seen then
      local bar = string.find(seen, '|', 1, true)
      if tonumber(string.sub(seen, bar + 1)) > now then
        return nil, string.sub(seen, 1, bar - 1)
      end
    end
    redis.call('HSET', prefix .. 'dedup', dedup, id .. '|' .. dedup_until)
    zadd(prefix .. 'ddx', dedup_until, dedup)
    zadd(prefix .. 'all', score, id)
  end
  local fields = {'b', body, 'p', priority, 's', now_text, 'v', visible, 'q', seq}
  if attrs ~= '' then table.insert(fields, 'a'); table.insert(fields, attrs) end
  if group ~= '' then table.insert(fields, 'g'); table.insert(fields, group) end
  if dedup ~= '' then table.insert(fields, 'd'); table.insert(fields, dedup) end
  if deadline ~= '' then
    table.insert(fields, 'dl'); table.insert(fields, deadline)
    zadd(prefix .. 'dl', deadline, id)
  end
  if compressed == '1' then table.insert(fields, 'z'); table.insert(fields, '1') end
  redis.call('HSET', message_key(prefix, id), unpack(fields))
  local sent = adds.sent
  sent[#sent + 1] = now_text
  sent[#sent + 1] = id
  local index = adds.ready
  if tonumber(visible) <= now then
    index[#index + 1] = score
  else
    index = adds.delayed
    index[#index + 1] = visible
  end
  index[#index + 1] = id
  return seq, id
end

-- What `store` leaves to add to the indexes (a send of bare bodies adds 'all' too), one
-- command per index for a whole send.
local function new_adds()
  return {sent = {}, ready = {}, delayed = {}}
end

local function flush_adds(prefix, adds)
  for index, scored in pairs(adds) do
    if #scored > 0 then
      zadd(prefix .. index, unpack(scored))
    end
  end
end

-- Move a message to the back of another queue (`dead_from` names the source when it goes
-- to a dead-letter queue; false for a redrive). A message of the same id there is replaced.
-- Returns its new sequence.
local function move(src, src_name, id, dest, dest_name, now, now_text, dead_from, err)
  local f = redis.call('HMGET', message_key(src, id), 'b', 'a', 'g', 'd', 'p', 'dl', 's', 'z', 'e')
  if redis.call('EXISTS', message_key(dest, id)) == 1 then
    drop(dest, dest_name, id, now_text, 'replaced', false)
  end
  local seq = redis.call('HINCRBY', dest .. 'meta', 'seq', 1)
  local score = order(tonumber(f[5]), seq)
  local fields = {'b', f[1], 'p', f[5], 'v', now_text, 'n', 0, 'r', 1, 'q', seq}
  local sent = now_text
  if dead_from then
    sent = f[7]
    table.insert(fields, 'o'); table.insert(fields, dead_from)
    local e = err or f[9]
    if e then table.insert(fields, 'e'); table.insert(fields, e) end
  end
  table.insert(fields, 's'); table.insert(fields, sent)
  if f[2] then table.insert(fields, 'a'); table.insert(fields, f[2]) end
  if f[3] then table.insert(fields, 'g'); table.insert(fields, f[3]) end
  if f[4] then table.insert(fields, 'd'); table.insert(fields, f[4]) end
  if f[6] then
    table.insert(fields, 'dl'); table.insert(fields, f[6])
    zadd(dest .. 'dl', f[6], id)
  end
  if f[8] then table.insert(fields, 'z'); table.insert(fields, f[8]) end
  drop(src, src_name, id, now_text, 'moved', false)
  redis.call('HSET', message_key(dest, id), unpack(fields))
  zadd(dest .. 'all', score, id)
  zadd(dest .. 'ready', score, id)
  zadd(dest .. 'sent', sent, id)
  return seq
end

-- The earliest time after `now` at which an invisible message becomes visible (or false).
local function next_visible(prefix, now_text)
  local best = false
  for _, index in ipairs({'delayed', 'inflight'}) do
    local head = redis.call('ZRANGEBYSCORE', prefix .. index, '(' .. now_text, '+inf',
                            'WITHSCORES', 'LIMIT', 0, 1)
    if head[2] and (not best or tonumber(head[2]) < tonumber(best)) then
      best = head[2]
    end
  end
  return best
end

-- Make what became visible by `now` ready (at most `most` of each index at a time).
local function promote(prefix, now_text, most)
  for _, index in ipairs({'delayed', 'inflight'}) do
    local due = redis.call('ZRANGEBYSCORE', prefix .. index, '-inf', now_text, 'LIMIT', 0, most)
    for _, id in ipairs(due) do
      local score = redis.call('ZSCORE', prefix .. 'all', id)
      redis.call('ZREM', prefix .. index, id)
      if score then
        zadd(prefix .. 'ready', score, id)
      end
    end
  end
end
