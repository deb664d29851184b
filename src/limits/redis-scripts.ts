// The Redis store's Lua scripts: each runs atomically on the server, so every gateway sharing the
// Redis sees one set of counters. Time is the server's (TIME), never a gateway's clock. The bucket
// arithmetic is bucket.ts's, written again in Lua.

const PRELUDE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function level(key, cap)
  local v = redis.call('HMGET', key, 'l', 't')
  if not v[1] then return cap end
  local l = tonumber(v[1]) + math.max(0, now - tonumber(v[2])) * cap / 60000
  if l > cap then return cap end
  return l
end
local function full(l, cap)
  if l >= cap then return 0 end
  return math.ceil((cap - l) * 60000 / cap)
end
local function store(key, l, cap)
  redis.call('HSET', key, 'l', tostring(l), 't', now)
  redis.call('PEXPIRE', key, full(l, cap) + 60000)
end
`;

/**
 * KEYS: request buckets, token buckets, concurrency sets, budget counters, then each budget's holds
 * (a sorted set of "lease|micro-dollars" members scored by their expiry, as the concurrency leases).
 * ARGV: nR, nT, nC, nB, cost, lease, leaseMs, hold (micro-dollars, a whole number), bucket
 * capacities (R then T), concurrency maxima, budget maxima (micro-dollars), budget reset times
 * (epoch ms).
 * Returns {ok, kind (1 requests, 2 tokens, 3 concurrent, 4 budget), index, retryAfterMs, a
 * budget's spent and held micro-dollars (0 otherwise), then remaining and ms-to-full for each bucket}.
 */
export const ACQUIRE = `${PRELUDE}
local nR, nT, nC, nB = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cost, lease, leaseMs, hold = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local a = 9
local levels, caps = {}, {}
for i = 1, nR + nT do
  caps[i] = tonumber(ARGV[a + i - 1])
  levels[i] = level(KEYS[i], caps[i])
end
local function answer(ok, kind, index, wait, spent, held)
  local out = {ok, kind, index, wait, spent or 0, held or 0}
  for i = 1, nR + nT do
    out[#out + 1] = math.floor(math.max(0, levels[i]))
    out[#out + 1] = full(levels[i], caps[i])
  end
  return out
end
local function waitFor(l, cap, c)
  local need = math.min(c, cap) - l
  if need <= 0 then return 0 end
  return math.ceil(need * 60000 / cap)
end
local function heldOn(key)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local total = 0
  for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    total = total + (tonumber(string.match(member, '|(%d+)$')) or 0)
  end
  return total
end
for j = 1, nB do
  local spent = tonumber(redis.call('GET', KEYS[nR + nT + nC + j]) or '0')
  local max = tonumber(ARGV[a + nR + nT + nC + j - 1])
  local wait = math.max(0, tonumber(ARGV[a + nR + nT + nC + nB + j - 1]) - now)
  if spent >= max then return answer(0, 4, j - 1, wait, spent, 0) end
  if hold > 0 then
    local held = heldOn(KEYS[nR + nT + nC + nB + j])
    if spent + held + hold > max then return answer(0, 4, j - 1, wait, spent, held) end
  end
end
for i = 1, nR do
  if levels[i] < math.min(1, caps[i]) then return answer(0, 1, i - 1, waitFor(levels[i], caps[i], 1)) end
end
for i = nR + 1, nR + nT do
  if levels[i] < math.min(cost, caps[i]) then return answer(0, 2, i - nR - 1, waitFor(levels[i], caps[i], cost)) end
end
for k = 1, nC do
  local key = KEYS[nR + nT + k]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= tonumber(ARGV[a + nR + nT + k - 1]) then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return answer(0, 3, k - 1, math.max(1, tonumber(first[2]) - now))
  end
end
for i = 1, nR do levels[i] = levels[i] - 1 end
for i = nR + 1, nR + nT do levels[i] = levels[i] - cost end
for i = 1, nR + nT do store(KEYS[i], levels[i], caps[i]) end
for k = 1, nC do
  local key = KEYS[nR + nT + k]
  redis.call('ZADD', key, now + leaseMs, lease)
  redis.call('PEXPIRE', key, leaseMs * 2)
end
if hold > 0 then
  for j = 1, nB do
    local key = KEYS[nR + nT + nC + nB + j]
    redis.call('ZADD', key, now + leaseMs, lease .. '|' .. ARGV[8])
    redis.call('PEXPIRE', key, leaseMs * 2)
  end
end
return answer(1, 0, 0, 0)
`;

/**
 * KEYS: token buckets, concurrency sets, budget counters, budget holds, then the lease's "settled"
 * marker. ARGV: nT, nC, nS, nH, refund, lease, the hold's member ("lease|micro-dollars"), token
 * bucket capacities, spend (micro-dollars) per counter, each counter's expiry (epoch ms). Runs once
 * per lease: a settlement sent again within two minutes (its answer was lost) changes nothing.
 */
export const SETTLE = `${PRELUDE}
local nT, nC, nS, nH = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local refund, lease, held = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local a = 8
if redis.call('SET', KEYS[nT + nC + nS + nH + 1], '1', 'NX', 'PX', 120000) == false then return 0 end
if refund ~= 0 then
  for i = 1, nT do
    local cap = tonumber(ARGV[a + i - 1])
    store(KEYS[i], math.min(cap, level(KEYS[i], cap) + refund), cap)
  end
end
for k = 1, nC do redis.call('ZREM', KEYS[nT + k], lease) end
for j = 1, nS do
  local key = KEYS[nT + nC + j]
  redis.call('INCRBY', key, ARGV[a + nT + j - 1])
  redis.call('PEXPIREAT', key, ARGV[a + nT + nS + j - 1])
end
for h = 1, nH do redis.call('ZREM', KEYS[nT + nC + nS + h], held) end
return 1
`;

/**
 * KEYS: concurrency sets and budget holds; ARGV: leaseMs, then the member held in each set (the
 * lease; a hold's "lease|micro-dollars"). A lease or hold already gone stays gone (XX).
 */
export const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local leaseMs = tonumber(ARGV[1])
for k = 1, #KEYS do
  redis.call('ZADD', KEYS[k], 'XX', 'GT', now + leaseMs, ARGV[k + 1])
  redis.call('PEXPIRE', KEYS[k], leaseMs * 2)
end
return #KEYS
`;
