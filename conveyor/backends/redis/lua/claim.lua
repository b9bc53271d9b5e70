-- Receive: claim up to `limit` messages of one queue under a new receipt token.
-- KEYS[1] the queue's meta. ARGV: 1 prefix, 2 name, 3 now, 4 limit, 5 visible_at of the
-- claimed messages, 6 token, 7 retention horizon, 8 fifo (1/0), 9 max receive count (0:
-- no dead-letter queue), 10 dead-letter queue prefix ('' where it cannot be moved in this
-- script), 11 dead-letter queue name, 12 archive (1/0), 13 rate limit (0: none),
-- 14 wake channel, 15 and 16 the deadline rules (rules.deadline_rules): a deadline at or
-- before 15 is expired; a claim of a message whose deadline is after 16 ends at it when
-- that is sooner than 5.
-- Returns {claimed messages (flat: id, score, string, state each), the next time a message
-- becomes visible (when none was claimed), ids to dead-letter outside this script}.
local prefix, name, now_text = ARGV[1], ARGV[2], ARGV[3]
local now, limit, visible_text, token = tonumber(now_text), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local horizon_text, fifo, max_count = ARGV[7], ARGV[8] == '1', tonumber(ARGV[9])
local dlq, dlq_name, keep, rate = ARGV[10], ARGV[11], ARGV[12] == '1', tonumber(ARGV[13])
local horizon = tonumber(horizon_text)
local expires_text, cut_from = ARGV[15], tonumber(ARGV[16])
local expires, visible_at = tonumber(expires_text), tonumber(visible_text)
local meta = prefix .. 'meta'

promote(prefix, now_text, '1000')
-- what is past retention or deadline goes first, so candidates need no look at their own
-- times, unless more was due than one claim expires (then each is checked)
local all_expired = expire_due(prefix, name, now_text, horizon_text, expires_text, keep, '100')

local tokens = 0
if rate > 0 then
  local bucket = redis.call('HMGET', meta, 'tokens', 'tokens_at')
  local left, left_at = tonumber(bucket[1] or rate), tonumber(bucket[2] or now)
  local burst = rate >= 1 and rate or 1
  tokens = math.min(burst, left + math.max(0, now - left_at) * rate)
  limit = math.min(limit, math.floor(tokens))
end

local claimed, outbox = {}, {}
local count_claimed = 0
local dead = false
local states, flying, taken = {}, {}, {} -- what the next flush writes

-- Whether a candidate is past retention or its deadline (only looked at when expire_due
-- could not take everything that was due).
local function overdue(blob)
  if all_expired then return false end
  local sent, _, _, _, ext = unpack_message(blob)
  if tonumber(sent) < horizon then return true end
  local deadline = decode_ext(ext).dl
  return deadline ~= nil and tonumber(deadline) <= expires
end

-- When a claimed message becomes visible again: the claim's end, or its deadline where
-- the queue's rules end the claim there (rules.claimed_until).
local function claimed_until(blob)
  local _, _, _, _, ext = unpack_message(blob)
  if ext == '' then return visible_text end
  local deadline = decode_ext(ext).dl
  if deadline ~= nil then
    local at = tonumber(deadline)
    if at > cut_from and at < visible_at then return deadline end
  end
  return visible_text
end

-- A candidate is expired ('gone'), dead-lettered ('gone', or 'stays' where its dead-letter
-- queue is in another slot: the client moves it), or deliverable ('ok').
local function check(id, blob, n)
  if overdue(blob) then
    expire(prefix, name, id, now_text, keep)
    return 'gone'
  end
  if max_count > 0 and n >= max_count then
    if dlq ~= '' then
      move(prefix, name, id, dlq, dlq_name, now, now_text, name, false)
      redis.call('HINCRBY', meta, 'dead', '1')
      dead = true
      return 'gone'
    end
    table.insert(outbox, id)
    return 'stays'
  end
  return 'ok'
end

-- Claim a deliverable candidate (its state read as read_state gives it).
local function claim(id, score, blob, n, r, f)
  local until_text = claimed_until(blob)
  local state = write_state(n + 1, r + 1, f or now_text, until_text, token)
  states[#states + 1] = id
  states[#states + 1] = state
  flying[#flying + 1] = until_text
  flying[#flying + 1] = id
  taken[#taken + 1] = id
  claimed[#claimed + 1] = id
  claimed[#claimed + 1] = score
  claimed[#claimed + 1] = blob
  claimed[#claimed + 1] = state
  count_claimed = count_claimed + 1
end

-- Move what was claimed since the last flush out of 'ready' and into 'inflight'.
local function flush()
  if #taken == 0 then return end
  write_states(prefix, states)
  redis.call('ZREM', prefix .. 'ready', unpack(taken))
  zadd(prefix .. 'inflight', unpack(flying))
  states, flying, taken = {}, {}, {}
end

if limit > 0 and not fifo then
  local skipped = 0
  while count_claimed < limit do
    local page = redis.call('ZRANGE', prefix .. 'ready', int(skipped),
                            int(skipped + limit - count_claimed - 1), 'WITHSCORES')
    if #page == 0 then break end
    local ids = {}
    for j = 1, #page, 2 do ids[#ids + 1] = page[j] end
    local blobs = redis.call('HMGET', prefix .. 'msg', unpack(ids))
    local texts = redis.call('HMGET', prefix .. 'st', unpack(ids))
    for j, id in ipairs(ids) do
      local blob = blobs[j]
      if not blob then
        redis.call('ZREM', prefix .. 'ready', id) -- an index entry without its message
      else
        local n, r, f = read_state(texts[j], '')
        local checked = check(id, blob, n)
        if checked == 'ok' then
          claim(id, page[2 * j], blob, n, r, f)
        elseif checked == 'stays' then
          skipped = skipped + 1
        end
      end
    end
    flush()
  end
elseif limit > 0 then
  -- FIFO (rules.GroupFill): walk every message in send order; a group is open while its
  -- earliest message is visible and serves the run of visible messages at its head. Open
  -- groups take turns in the order they opened (when their earliest message became
  -- visible; ties in send order), a batch filling from one group before it takes the next.
  -- A message never received bounds when any group reached later can have opened, so the
  -- walk stops once the group that opened first has `limit` messages and opened no later
  -- than that bound, or 1,000 messages past a full batch.
  local blocked, groups, opened, order_of_groups = {}, {}, {}, {}
  local total, beyond, bound = 0, 0, -math.huge
  local first
  local after = '-inf'
  local function before(a, b)
    local x, y = opened[a], opened[b]
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end
  while true do
    local page = redis.call('ZRANGEBYSCORE', prefix .. 'all', after, '+inf', 'WITHSCORES',
                            'LIMIT', '0', '64')
    if #page == 0 then break end
    local ids = {}
    for j = 1, #page, 2 do ids[#ids + 1] = page[j] end
    local blobs = redis.call('HMGET', prefix .. 'msg', unpack(ids))
    local texts = redis.call('HMGET', prefix .. 'st', unpack(ids))
    local done = false
    for j, id in ipairs(ids) do
      after = '(' .. page[2 * j]
      if total >= limit then beyond = beyond + 1 end
      local blob = blobs[j]
      if blob then
        local _, visible, group = unpack_message(blob)
        local n, r, f, v = read_state(texts[j], visible)
        local at = tonumber(v)
        if n == 0 then bound = at end
        if not blocked[group] then
          if at > now then
            blocked[group] = true
          else
            local checked = check(id, blob, n)
            if checked == 'stays' then
              blocked[group] = true -- it waits to be moved out of this slot
            elseif checked == 'ok' then
              local g = groups[group]
              if not g then
                g = {}
                groups[group] = g
                table.insert(order_of_groups, group)
                opened[group] = {at, #order_of_groups} -- ties: walk order
                if not first or before(group, first) then first = group end
              end
              if #g < limit then
                table.insert(g, {id, page[2 * j], blob, n, r, f})
                total = total + 1
              end
            end
          end
        end
      end
      if first and (beyond >= 1000 or (#groups[first] >= limit and opened[first][1] <= bound)) then
        done = true
        break
      end
    end
    if done or #page < 128 then break end
  end
  table.sort(order_of_groups, before)
  for _, group in ipairs(order_of_groups) do
    for _, c in ipairs(groups[group]) do
      if count_claimed >= limit then break end
      claim(c[1], c[2], c[3], c[4], c[5], c[6])
    end
  end
  flush()
end

if rate > 0 then
  redis.call('HSET', meta, 'tokens', string.format('%.17g', tokens - count_claimed),
             'tokens_at', now_text)
end
if count_claimed > 0 then
  redis.call('HINCRBY', meta, 'received', int(count_claimed))
end
if dead then
  redis.call('PUBLISH', ARGV[14], dlq_name)
end
return {claimed, count_claimed == 0 and next_visible(prefix, now_text) or false, outbox}
