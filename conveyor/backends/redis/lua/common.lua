-- Shared by every script (prepended to each when it is loaded).
--
-- A queue's keys start with its prefix, "P:{tag}:name:id:", so every key of one queue lies
-- in one Redis Cluster slot:
--   meta      hash: seq, sent, received, deleted, dead, expired, tokens, tokens_at, archived
--   msg       hash: message id -> the message, what never changes after its send (below)
--   st        hash: message id -> its receipt state, for messages received or edited
--   all       zset: every message, by delivery order (priority band, then sequence)
--   ready     zset: visible messages, by delivery order
--   delayed   zset: invisible messages never received, by visible_at
--   inflight  zset: invisible messages received, by visible_at
--   sent      zset: every message, by sent_at (retention, oldest age)
--   dl        zset: messages with a deadline, by deadline
--   dedup     hash: FIFO de-duplication key -> "message id|expires at"; ddx zset by expiry
--   archive   list of archive entry numbers; arch:<n> hash: an archived message
--
-- A message is one string, so that a batch reads and writes its messages with one HMGET
-- and one HSET: "sent \t visible \t group \t dedup \t ext \n body", where visible is when
-- it was first visible, group and dedup are FIFO's (printable ASCII: never a tab), and ext
-- is '' or a JSON object of strings: a attributes (JSON), dl deadline, o source queue,
-- e error, z '1' for a compressed body. Its priority and sequence are its score in 'all'.
-- Its receipt state is "token|count|version|first received|visible_at" in 'st' (a token is
-- 16 hex digits, or nothing), written once per batch by a claim; a message without one was
-- never received nor edited (count 0, version 1, visible as its string says, no token).
-- Times travel as the decimal text the client sent, so no precision is lost in Lua.
--
-- What costs a script most, measured: a Lua number given to redis.call is formatted with
-- "%.17g" (thousands of instructions), so numbers go as text (`int`, string literals);
-- string patterns that are not anchored scan, so states are read with anchored ones and
-- a token is compared by its place; tables grow by doubling, so few are built.

local BAND = 137438953472 -- 2^37: a delivery-order score stays exact in a double

-- Redis keeps a small sorted set or hash (up to 128 members) in its compact listpack
-- encoding, where every insert and look-up scans and parses the members: at the few dozen
-- members where the indexes and receipt states of a queue whose consumers keep up live, that
-- costs several times what a skiplist or hash table does. A set or hash made with one
-- member or value longer than 64 bytes (zset/hash-max-listpack-value) takes the scalable
-- encoding, and keeps it while it exists. WIDE is such a member (put in the text as the
-- script is loaded, so that no call builds it).
local WIDE = '{{WIDE}}'

-- Add to a sorted set (as ZADD, with its answer), made a skiplist if it is new (WIDE goes
-- at once: it is added only when the set is made).
local function zadd(key, ...)
  if redis.call('EXISTS', key) == 1 then
    return redis.call('ZADD', key, ...)
  end
  redis.call('ZADD', key, '0', WIDE)
  local added = redis.call('ZADD', key, ...)
  redis.call('ZREM', key, WIDE)
  return added
end

-- The queue's 'msg' and 'st' hashes keep WIDE under the field '' (never a message id), so
-- each is a hash table from its first write and never empties while the queue lives.

-- Write messages or receipt states: id, value, ...
local function write_messages(prefix, values)
  redis.call('HSET', prefix .. 'msg', '', WIDE, unpack(values))
end

local function write_states(prefix, states)
  redis.call('HSET', prefix .. 'st', '', WIDE, unpack(states))
end

local function order(priority, seq)
  return (32767 - priority) * BAND + seq
end

-- An integral number as a command argument (see above).
local function int(n)
  return string.format('%d', n)
end

-- A message string's parts: sent, visible, group, dedup, ext, and where its body starts.
local function unpack_message(blob)
  return string.match(blob, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\n]*)\n()')
end

local function pack_message(sent, visible, group, dedup, ext, body)
  return table.concat({sent, '\t', visible, '\t', group, '\t', dedup, '\t', ext, '\n', body})
end

local function decode_ext(ext)
  if ext == '' then return {} end
  return cjson.decode(ext)
end

local function encode_ext(fields)
  if next(fields) == nil then return '' end
  return cjson.encode(fields)
end

-- A receipt state's parts: count, version, first received (or false), visible_at (text),
-- token (or false). `visible` is the message's own, for a message without a state.
local function read_state(text, visible)
  if not text then return 0, 1, false, visible, false end
  local t, n, r, f, v = string.match(text, '^([^|]*)|(%d+)|(%d+)|([^|]*)|(.*)$')
  return tonumber(n), tonumber(r), f ~= '' and f or false, v, t ~= '' and t or false
end

local function write_state(n, r, f, v, t)
  return string.format('%s|%d|%d|%s|%s', t or '', n, r, f or '', v)
end

-- Whether a state holds `token` (16 hex digits: a state's starts with its token, or '|').
local function holds(text, token)
  return text and string.sub(text, 1, 16) == token
end

-- One message as the client reads it: id, order score, string, state (or false).
local function fetch(prefix, id)
  local blob = redis.call('HGET', prefix .. 'msg', id)
  if not blob then
    return nil
  end
  return {id, redis.call('ZSCORE', prefix .. 'all', id), blob,
          redis.call('HGET', prefix .. 'st', id) or false}
end

-- A message's visible_at (text) and receive count, from its string and state.
local function visibility(blob, text)
  local _, visible = unpack_message(blob)
  local n, _, _, v = read_state(text, visible)
  return v, n
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

-- Keep a message in the queue's archive (outcome: deleted, expired, removed).
local function archive(prefix, name, id, blob, text, now_text, outcome)
  local sent, visible, group, _, ext, start = unpack_message(blob)
  local fields = decode_ext(ext)
  local n, _, first = read_state(text, visible)
  local score = tonumber(redis.call('ZSCORE', prefix .. 'all', id))
  local number = redis.call('HINCRBY', prefix .. 'meta', 'archived', '1')
  local entry = prefix .. 'arch:' .. number
  local values = {'i', id, 'b', string.sub(blob, start), 'p', int(32767 - math.floor(score / BAND)),
                  's', sent, 'n', int(n), 'x', now_text, 'y', outcome, 'u', name}
  if fields.a then table.insert(values, 'a'); table.insert(values, fields.a) end
  if group ~= '' then table.insert(values, 'g'); table.insert(values, group) end
  if first then table.insert(values, 'f'); table.insert(values, first) end
  if fields.z then table.insert(values, 'z'); table.insert(values, '1') end
  redis.call('HSET', entry, unpack(values))
  redis.call('RPUSH', prefix .. 'archive', int(number))
end

-- Remove a message from every index and delete it (archiving it first where asked).
local function drop(prefix, name, id, now_text, outcome, keep)
  if keep then
    local blob = redis.call('HGET', prefix .. 'msg', id)
    if blob then
      archive(prefix, name, id, blob, redis.call('HGET', prefix .. 'st', id), now_text, outcome)
    end
  end
  for _, index in ipairs({'all', 'ready', 'delayed', 'inflight', 'sent', 'dl'}) do
    redis.call('ZREM', prefix .. index, id)
  end
  redis.call('HDEL', prefix .. 'st', id)
  redis.call('HDEL', prefix .. 'msg', id)
end

-- Delete messages known to be claimed (never in 'delayed'), without archiving: one
-- command per index for the whole batch.
local function drop_claimed(prefix, ids)
  redis.call('ZREM', prefix .. 'all', unpack(ids))
  redis.call('ZREM', prefix .. 'sent', unpack(ids))
  redis.call('ZREM', prefix .. 'inflight', unpack(ids))
  redis.call('ZREM', prefix .. 'ready', unpack(ids))
  redis.call('ZREM', prefix .. 'dl', unpack(ids))
  redis.call('HDEL', prefix .. 'st', unpack(ids))
  redis.call('HDEL', prefix .. 'msg', unpack(ids))
end

local function expire(prefix, name, id, now_text, keep)
  drop(prefix, name, id, now_text, 'expired', keep)
  redis.call('HINCRBY', prefix .. 'meta', 'expired', '1')
end

-- Expire what is past retention or its deadline (at or before `expires_text`: the queue's
-- deadline rule, rules.deadline_rules), at most `most` of each; true when that was
-- everything (false: more is due, and a caller must check each candidate itself).
local function expire_due(prefix, name, now_text, horizon_text, expires_text, keep, most)
  -- `most` is text; the counts compare with its number
  local limit = tonumber(most)
  local all_gone = true
  local old = redis.call('ZRANGEBYSCORE', prefix .. 'sent', '-inf', '(' .. horizon_text,
                         'LIMIT', '0', most)
  for _, id in ipairs(old) do expire(prefix, name, id, now_text, keep) end
  if #old >= limit then all_gone = false end
  local due = redis.call('ZRANGEBYSCORE', prefix .. 'dl', '-inf', expires_text, 'LIMIT', '0',
                         most)
  for _, id in ipairs(due) do expire(prefix, name, id, now_text, keep) end
  if #due >= limit then all_gone = false end
  return all_gone, #old + #due
end

-- Store new messages, each {id, string, dedup key, priority, deadline, visible}, at the
-- back of their priority bands (the caller reserved sequences from `next_seq`). Returns
-- per message (flat) 1 and its sequence, or 0 and the id it duplicates: an id the queue
-- holds ('all' holds every message), an id earlier in `messages`, or a FIFO dedup key seen
-- before. Also how many were stored, and whether one of them is ready now.
local function store_all(prefix, now, now_text, messages, next_seq, dedup_until)
  local ids = {}
  for i, m in ipairs(messages) do ids[i] = m[1] end
  local held = redis.call('ZMSCORE', prefix .. 'all', unpack(ids))
  local out, kv, sent, ready, delayed, all, taken = {}, {}, {}, {}, {}, {}, {}
  local stored, woken = 0, false
  for i, m in ipairs(messages) do
    local id, blob, dedup, priority, deadline, visible = m[1], m[2], m[3], m[4], m[5], m[6]
    local duplicate = false
    if held[i] or taken[id] then
      duplicate = id
    elseif dedup ~= '' then
      local seen = redis.call('HGET', prefix .. 'dedup', dedup)
      if seen then
        local bar = string.find(seen, '|', 1, true)
        if tonumber(string.sub(seen, bar + 1)) > now then
          duplicate = string.sub(seen, 1, bar - 1)
        end
      end
      if not duplicate then
        redis.call('HSET', prefix .. 'dedup', dedup, id .. '|' .. dedup_until)
        zadd(prefix .. 'ddx', dedup_until, dedup)
      end
    end
    if duplicate then
      out[#out + 1] = 0
      out[#out + 1] = duplicate
    else
      taken[id] = true
      local seq = next_seq + stored
      local score = int(order(tonumber(priority), seq))
      kv[#kv + 1] = id
      kv[#kv + 1] = blob
      all[#all + 1] = score
      all[#all + 1] = id
      sent[#sent + 1] = now_text
      sent[#sent + 1] = id
      if deadline ~= '' then zadd(prefix .. 'dl', deadline, id) end
      if tonumber(visible) <= now then
        ready[#ready + 1] = score
        ready[#ready + 1] = id
        woken = true
      else
        delayed[#delayed + 1] = visible
        delayed[#delayed + 1] = id
      end
      stored = stored + 1
      out[#out + 1] = 1
      out[#out + 1] = seq
    end
  end
  if stored > 0 then
    write_messages(prefix, kv)
    for index, scored in pairs({all = all, sent = sent, ready = ready, delayed = delayed}) do
      if #scored > 0 then zadd(prefix .. index, unpack(scored)) end
    end
  end
  return out, stored, woken
end

-- Move a message to the back of another queue (`dead_from` names the source when it goes
-- to a dead-letter queue; false for a redrive). A message of the same id there is replaced.
-- Returns its new sequence.
local function move(src, src_name, id, dest, dest_name, now, now_text, dead_from, err)
  local blob = redis.call('HGET', src .. 'msg', id)
  local score = tonumber(redis.call('ZSCORE', src .. 'all', id))
  local sent, _, group, dedup, ext, start = unpack_message(blob)
  local fields = decode_ext(ext)
  if dead_from then
    fields.o = dead_from
    if err then fields.e = err end
  else
    sent = now_text
    fields.o, fields.e = nil, nil
  end
  if redis.call('HEXISTS', dest .. 'msg', id) == 1 then
    drop(dest, dest_name, id, now_text, 'replaced', false)
  end
  local seq = redis.call('HINCRBY', dest .. 'meta', 'seq', '1')
  local new_score = int(order(32767 - math.floor(score / BAND), seq))
  drop(src, src_name, id, now_text, 'moved', false)
  write_messages(dest, {id, pack_message(sent, now_text, group, dedup, encode_ext(fields),
                                         string.sub(blob, start))})
  if fields.dl then zadd(dest .. 'dl', fields.dl, id) end
  zadd(dest .. 'all', new_score, id)
  zadd(dest .. 'ready', new_score, id)
  zadd(dest .. 'sent', sent, id)
  return seq
end

-- The earliest time after `now` at which an invisible message becomes visible (or false).
local function next_visible(prefix, now_text)
  local best = false
  for _, index in ipairs({'delayed', 'inflight'}) do
    local head = redis.call('ZRANGEBYSCORE', prefix .. index, '(' .. now_text, '+inf',
                            'WITHSCORES', 'LIMIT', '0', '1')
    if head[2] and (not best or tonumber(head[2]) < tonumber(best)) then
      best = head[2]
    end
  end
  return best
end

-- Make what became visible by `now` ready (at most `most`, text, of each index at a time).
local function promote(prefix, now_text, most)
  for _, index in ipairs({'delayed', 'inflight'}) do
    local due = redis.call('ZRANGEBYSCORE', prefix .. index, '-inf', now_text, 'LIMIT', '0',
                           most)
    if #due > 0 then
      local scores = redis.call('ZMSCORE', prefix .. 'all', unpack(due))
      local scored = {}
      for i, id in ipairs(due) do
        if scores[i] then
          scored[#scored + 1] = scores[i]
          scored[#scored + 1] = id
        end
      end
      redis.call('ZREM', prefix .. index, unpack(due))
      if #scored > 0 then zadd(prefix .. 'ready', unpack(scored)) end
    end
  end
end
