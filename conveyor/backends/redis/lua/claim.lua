-- Receive: claim up to `limit` messages of one queue under a new receipt token.
-- KEYS[1] the queue's meta. ARGV: 1 prefix, 2 name, 3 now, 4 limit, 5 visible_at of the
-- claimed messages, 6 token, 7 retention horizon, 8 fifo (1/0), 9 max receive count (0:
-- no dead-letter queue), 10 dead-letter queue prefix ('' where it cannot be moved in this
-- script), 11 dead-letter queue name, 12 archive (1/0), 13 rate limit (0: none),
-- 14 wake channel.
-- Returns {claimed messages (as `fetch` gives them), the next time a message becomes
-- visible (when none was claimed), ids to dead-letter outside this script}.
local prefix, name, now_text = ARGV[1], ARGV[2], ARGV[3]
local now, limit, visible_text, token = tonumber(now_text), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local horizon, fifo, max_count = tonumber(ARGV[7]), ARGV[8] == '1', tonumber(ARGV[9])
local dlq, dlq_name, keep, rate = ARGV[10], ARGV[11], ARGV[12] == '1', tonumber(ARGV[13])
local meta = prefix .. 'meta'

promote(prefix, now_text, 1000)

local tokens = 0
if rate > 0 then
  local bucket = redis.call('HMGET', meta, 'tokens', 'tokens_at')
  local left, left_at = tonumber(bucket[1] or rate), tonumber(bucket[2] or now)
  local burst = rate >= 1 and rate or 1
  tokens = math.min(burst, left + math.max(0, now - left_at) * rate)
  limit = math.min(limit, math.floor(tokens))
end

local claimed, outbox = {}, {}
local dead = false
local pending = {} -- ids claimed and still to move from 'ready' to 'inflight'

-- A candidate (its FIELDS, as HMGET read them) is expired ('gone'), dead-lettered ('gone',
-- or 'stays' where its dead-letter queue is in another slot: the client moves it), or
-- deliverable ('ok').
local function check(id, f)
  local sent, deadline, count = tonumber(f[7]), f[6], tonumber(f[9] or 0)
  if sent < horizon or (deadline and tonumber(deadline) <= now) then
    expire(prefix, name, id, now_text, keep)
    return 'gone'
  end
  if max_count > 0 and count >= max_count then
    if dlq ~= '' then
      move(prefix, name, id, dlq, dlq_name, now, now_text, name, false)
      redis.call('HINCRBY', meta, 'dead', 1)
      dead = true
      return 'gone'
    end
    table.insert(outbox, id)
    return 'stays'
  end
  return 'ok'
end

-- Claim a deliverable candidate.
local function claim(id, f)
  local count = tonumber(f[9] or 0)
  f[8] = visible_text
  f[9] = tostring(count + 1)
  f[10] = f[10] or now_text
  f[11] = tostring(tonumber(f[11] or 1) + 1)
  redis.call('HSET', message_key(prefix, id), 'n', f[9], 'r', f[11], 'f', f[10],
             'v', visible_text, 't', token)
  table.insert(f, 1, id)
  table.insert(f, false)
  table.insert(claimed, f)
  table.insert(pending, id)
  return 'claimed'
end

local function take(id, f)
  local checked = check(id, f)
  if checked ~= 'ok' then return checked end
  return claim(id, f)
end

-- Move what was claimed since the last flush out of 'ready' and into 'inflight'.
local function flush()
  if #pending == 0 then return end
  local scored = {}
  for _, id in ipairs(pending) do
    table.insert(scored, visible_text)
    table.insert(scored, id)
  end
  redis.call('ZREM', prefix .. 'ready', unpack(pending))
  zadd(prefix .. 'inflight', unpack(scored))
  pending = {}
end

if limit > 0 and not fifo then
  local skipped = 0
  while #claimed < limit do
    local page = redis.call('ZRANGE', prefix .. 'ready', skipped, skipped + limit - #claimed - 1)
    if #page == 0 then break end
    for _, id in ipairs(page) do
      local f = redis.call('HMGET', message_key(prefix, id), unpack(FIELDS))
      if not f[1] then
        redis.call('ZREM', prefix .. 'ready', id) -- an index entry without its message
      elseif take(id, f) == 'stays' then
        skipped = skipped + 1
      end
    end
    flush()
  end
elseif limit > 0 then
  -- FIFO: walk every message in send order; a group whose earliest message is not visible
  -- yields nothing. The batch fills from one group before it takes the next, as SQS does
  -- (rules.GroupFill): the walk gathers each group's deliverable messages and stops once
  -- the first group has `limit` of them, or 1,000 messages past a full batch.
  local blocked, groups, order = {}, {}, {}
  local total, beyond, done = 0, 0, false
  local after = '-inf'
  while not done do
    local page = redis.call('ZRANGEBYSCORE', prefix .. 'all', after, '+inf', 'WITHSCORES',
                            'LIMIT', 0, 64)
    if #page == 0 then break end
    for i = 1, #page, 2 do
      local id = page[i]
      after = '(' .. page[i + 1]
      if total >= limit then beyond = beyond + 1 end
      local f = redis.call('HMGET', message_key(prefix, id), unpack(FIELDS))
      local group = f[3] or ''
      if f[8] and not blocked[group] then
        if tonumber(f[8]) > now then
          blocked[group] = true
        else
          local checked = check(id, f)
          if checked == 'stays' then
            blocked[group] = true -- it waits to be moved out of this slot
          elseif checked == 'ok' then
            local g = groups[group]
            if not g then
              g = {}
              groups[group] = g
              table.insert(order, group)
            end
            if #g < limit then
              table.insert(g, {id, f})
              total = total + 1
            end
          end
        end
      end
      if #order > 0 and (#groups[order[1]] >= limit or beyond >= 1000) then
        done = true
        break
      end
    end
    if #page < 128 then break end
  end
  for _, group in ipairs(order) do
    for _, candidate in ipairs(groups[group]) do
      if #claimed >= limit then break end
      claim(candidate[1], candidate[2])
    end
  end
  flush()
end

if rate > 0 then
  redis.call('HSET', meta, 'tokens', tostring(tokens - #claimed), 'tokens_at', now_text)
end
if #claimed > 0 then
  redis.call('HINCRBY', meta, 'received', #claimed)
end
if dead then
  redis.call('PUBLISH', ARGV[14], dlq_name)
end
return {claimed, #claimed == 0 and next_visible(prefix, now_text) or false, outbox}
