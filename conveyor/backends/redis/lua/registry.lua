-- What every queue shares: the registry of queues, topics and subscriptions, and the
-- consumer registry. Every key here has the store's own hash tag (one slot).
-- KEYS[1] the queue registry. ARGV[1] the key prefix "{P}:", ARGV[2] the operation.
local p, op = ARGV[1], ARGV[2]
local queues, topics, consumers = p .. 'queues', p .. 'topics', p .. 'consumers'

local function prune(now)
  local gone = redis.call('ZRANGEBYSCORE', consumers, '-inf', '(' .. now)
  for _, id in ipairs(gone) do
    redis.call('DEL', p .. 'c:' .. id)
    redis.call('ZREM', consumers, id)
  end
end

if op == 'create_queue' then -- name, entry: the existing entry, or false once created
  if redis.call('HSETNX', queues, ARGV[3], ARGV[4]) == 1 then return false end
  return redis.call('HGET', queues, ARGV[3])
elseif op == 'set_queue' then -- name, entry: false if there is no such queue
  if redis.call('HEXISTS', queues, ARGV[3]) == 0 then return false end
  redis.call('HSET', queues, ARGV[3], ARGV[4])
  return 1
elseif op == 'delete_queue' then -- name: its entry, or false
  local entry = redis.call('HGET', queues, ARGV[3])
  if not entry then return false end
  redis.call('HDEL', queues, ARGV[3])
  for _, topic in ipairs(redis.call('HKEYS', topics)) do
    redis.call('SREM', p .. 't:' .. topic, ARGV[3])
    redis.call('HDEL', p .. 'ta:' .. topic, ARGV[3])
  end
  return entry
elseif op == 'create_topic' then -- name, now: 1 if created
  return redis.call('HSETNX', topics, ARGV[3], ARGV[4])
elseif op == 'delete_topic' then -- name: 1 if it existed
  if redis.call('HDEL', topics, ARGV[3]) == 0 then return 0 end
  redis.call('DEL', p .. 't:' .. ARGV[3], p .. 'ta:' .. ARGV[3])
  redis.call('HDEL', p .. 'tsettings', ARGV[3])
  return 1
elseif op == 'subscribe' or op == 'unsubscribe' then
  -- topic, queue, attributes JSON ('' keeps them): 1, -1 (no topic) or -2 (no queue)
  if redis.call('HEXISTS', topics, ARGV[3]) == 0 then return -1 end
  if op == 'unsubscribe' then
    redis.call('SREM', p .. 't:' .. ARGV[3], ARGV[4])
    redis.call('HDEL', p .. 'ta:' .. ARGV[3], ARGV[4])
    return 1
  end
  if redis.call('HEXISTS', queues, ARGV[4]) == 0 then return -2 end
  redis.call('SADD', p .. 't:' .. ARGV[3], ARGV[4])
  if ARGV[5] ~= '' then redis.call('HSET', p .. 'ta:' .. ARGV[3], ARGV[4], ARGV[5]) end
  return 1
elseif op == 'subscribers' then
  -- topic: name, entry and attributes of each subscribed queue, or false
  if redis.call('HEXISTS', topics, ARGV[3]) == 0 then return false end
  local out = {}
  for _, name in ipairs(redis.call('SMEMBERS', p .. 't:' .. ARGV[3])) do
    table.insert(out, name)
    table.insert(out, redis.call('HGET', queues, name) or false)
    table.insert(out, redis.call('HGET', p .. 'ta:' .. ARGV[3], name) or false)
  end
  return out
elseif op == 'topic_settings' then -- topic: its settings JSON ('' if none), or false
  if redis.call('HEXISTS', topics, ARGV[3]) == 0 then return false end
  return redis.call('HGET', p .. 'tsettings', ARGV[3]) or ''
elseif op == 'update_topic' or op == 'update_subscription' then
  -- topic, changes JSON (null removes)[, queue]: the settings JSON after, or -1 (no topic)
  -- or -3 (not subscribed)
  if redis.call('HEXISTS', topics, ARGV[3]) == 0 then return -1 end
  local key, field = p .. 'tsettings', ARGV[3]
  if op == 'update_subscription' then
    if redis.call('SISMEMBER', p .. 't:' .. ARGV[3], ARGV[5]) == 0 then return -3 end
    key, field = p .. 'ta:' .. ARGV[3], ARGV[5]
  end
  local current = redis.call('HGET', key, field)
  local settings = {}
  if current and current ~= '' then settings = cjson.decode(current) end
  for k, v in pairs(cjson.decode(ARGV[4])) do
    if v == cjson.null then settings[k] = nil else settings[k] = v end
  end
  local encoded = '{}'
  if next(settings) ~= nil then encoded = cjson.encode(settings) end
  redis.call('HSET', key, field, encoded)
  return encoded
elseif op == 'register' then -- id, queue, info, timeout, registered_at, now, expiry, ttl ms
  local key = p .. 'c:' .. ARGV[3]
  local registered = ARGV[7]
  if registered == '' then
    registered = redis.call('HGET', key, 'registered_at') or ARGV[8]
  end
  redis.call('DEL', key)
  redis.call('HSET', key, 'queue', ARGV[4], 'info', ARGV[5], 'timeout', ARGV[6],
             'registered_at', registered, 'heartbeat_at', ARGV[8])
  redis.call('PEXPIRE', key, ARGV[10])
  redis.call('ZADD', consumers, ARGV[9], ARGV[3])
  return registered
elseif op == 'heartbeat' then -- id, now: the consumer's fields, or false
  prune(ARGV[4])
  local key = p .. 'c:' .. ARGV[3]
  local timeout = redis.call('HGET', key, 'timeout')
  if not timeout then
    redis.call('ZREM', consumers, ARGV[3])
    return false
  end
  redis.call('HSET', key, 'heartbeat_at', ARGV[4])
  redis.call('PEXPIRE', key, math.ceil(tonumber(timeout) * 1000) + 1000)
  redis.call('ZADD', consumers, tonumber(ARGV[4]) + tonumber(timeout), ARGV[3])
  return redis.call('HMGET', key, 'queue', 'info', 'timeout', 'registered_at', 'heartbeat_at')
elseif op == 'unregister' then -- id
  redis.call('DEL', p .. 'c:' .. ARGV[3])
  redis.call('ZREM', consumers, ARGV[3])
  return 1
elseif op == 'consumers' then -- now: id and fields of every live consumer
  prune(ARGV[3])
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', consumers, 0, -1)) do
    local f = redis.call('HMGET', p .. 'c:' .. id, 'queue', 'info', 'timeout', 'registered_at',
                         'heartbeat_at')
    if f[3] then
      table.insert(out, id)
      for _, value in ipairs(f) do table.insert(out, value) end
    else
      redis.call('ZREM', consumers, id) -- its key expired
    end
  end
  return out
end
return redis.error_reply('unknown registry operation ' .. op)
