-- tollgate: one quota bucket's reservation in Redis (see
-- `crates/quota/src/store.rs`), with the in-memory `TokenBucket`'s exact
-- integer arithmetic (`crates/core/src/limiter/token_bucket.rs`). Redis'
-- Lua numbers are doubles, exact only below 2^53: every quantity here is a
-- natural number, a double below 2^48 and 24-bit limbs above (a bucket's
-- tokens are ops * 2^20, and a debt times the meter's denominator reaches
-- 2^123). A reservation of small numbers takes the fast path first, on
-- doubles alone.
--
-- KEYS[1]: the bucket's state, a hash: l (level in tokens, "-" for debt),
--   c (the meter's carry, below den), t (the time the level is up to
--   date with, ns), u (the time of the last reservation, ns), s (the size
--   and meter it was kept under).
-- KEYS[2] (dynamic buckets of a capped namespace only): the namespace's
--   live dynamic buckets, a sorted set of names scored by the millisecond
--   each turns idle ("inf": never).
-- ARGV: op ("reserve", or "refuse": the request asks too many tokens, so
--   only the dynamic cap is checked and nothing is written), the time in
--   ns ("" for Redis' TIME), ops, size (ops), whole, fraction, den (the
--   meter: tokens per ns is whole + fraction / den), max_debt (ns),
--   max_wait (ns), the namespace's dynamic cap ("" none), the bucket's
--   name, max_idle (ns, "" never idle).
-- Returns {code, value, now}: "OK" granted (value: the wait in ns), "W"
-- refused for the max wait (value: the wait), "D" refused for the max debt,
-- "B" the namespace's dynamic cap is reached, "T" refused for its tokens
-- (op "refuse", with room for the bucket).
--
-- A bucket idle for max_idle starts afresh, and leaves its namespace's
-- count, as the in-memory reaper removes it.
--
-- Op "batch" decides several reservations in one call (see
-- `crates/quota/src/store/batch.rs`): ARGV is "batch", the time (as
-- above, for all: "" has each read TIME), the count n, then each
-- reservation's 11 other arguments in turn (op, ops, size, ...,
-- max_idle); KEYS is each one's key, followed by its namespace's set
-- when it has a cap. Each is decided
-- in turn, on the state the ones before it left, by the same steps as
-- alone (fast path first), exactly as if sent one by one in that order.
-- Returns the n answers, {code, value, now} each, one after another.

-- The common call, a reservation whose numbers stay small, runs on
-- doubles alone, before the general path defines anything (Redis runs the
-- whole script on every call). Every product is checked below 2^53, where
-- doubles are exact; any other call breaks out, before it writes, and
-- answers nil: the general path below decides it.
local function fast(K, A)
  repeat
    if A[1] ~= "reserve" then break end
    local long = false
    -- The numbers (the name, 11, is not one).
    for i = 3, 12 do
      if i ~= 11 and #A[i] > 15 then long = true end
    end
    if long then break end
    local EX = 9007199254740992 -- 2^53
    local ops, size, whole, fraction, den = tonumber(A[3]), tonumber(A[4]), tonumber(A[5]), tonumber(A[6]), tonumber(A[7])
    local max_debt, max_wait = tonumber(A[8]), tonumber(A[9])
    local max_idle = A[12] ~= "" and tonumber(A[12]) or nil
    -- Tokens (2^20 to an op) below 2^48.
    if size >= 268435456 or ops >= 268435456 then break end
    size = size * 1048576
    local need = ops * 1048576
    local num = whole * den + fraction
    if num >= EX then break end
    -- The time as seconds and nanoseconds.
    local S, N
    local t = A[2]
    if t ~= "" then
      if #t > 9 then
        S, N = tonumber(string.sub(t, 1, -10)), tonumber(string.sub(t, -9))
      else
        S, N = 0, tonumber(t)
      end
    else
      t = redis.call("TIME")
      S, N = tonumber(t[1]), tonumber(t[2]) * 1000
    end
    -- Nanoseconds from (s, n) to now, nil when negative or too far.
    local function since(v)
      local s, n
      if #v > 9 then
        s, n = tonumber(string.sub(v, 1, -10)), tonumber(string.sub(v, -9))
      else
        s, n = 0, tonumber(v)
      end
      local d = (S - s) * 1000000000 + (N - n)
      if S - s > 9000000 then return nil end
      return d
    end
    local v = redis.call("HMGET", K[1], "l", "c", "t", "u", "s")
    local sid = A[4] .. ":" .. A[5] .. ":" .. A[6] .. ":" .. A[7]
    local live = v[1] ~= false
    local level, carry, dt = size, 0, 0
    if live then
      if v[5] ~= sid or #v[1] > 16 or #v[2] > 15 then break end
      if max_idle then
        local du = since(v[4])
        if not du then break end
        if du >= max_idle then live = false end
      end
    end
    if live then
      level, carry, dt = tonumber(v[1]), tonumber(v[2]), since(v[3])
      if not dt then break end
      if dt > 0 then
        -- The meter: dt whole + (dt fraction + carry) / den tokens.
        local scaled = dt * fraction
        local fresh = dt * whole
        if scaled >= EX - den or fresh >= 281474976710656 then break end
        scaled = scaled + carry
        local q = math.floor(scaled / den)
        local r = scaled - q * den
        if r < 0 then q, r = q - 1, r + den elseif r >= den then q, r = q + 1, r - den end
        carry = r
        level = level + fresh + q
        if level >= size then level, carry = size, 0 end
      end
    end
    -- ceil((debt den - carry) / num): the time to earn debt.
    local function nanos_until(debt)
      local x = debt * den
      if x >= EX - num then return nil end
      x = x - carry + num - 1
      local q = math.floor(x / num)
      local r = x - q * num
      if r < 0 then q = q - 1 elseif r >= num then q = q + 1 end
      return q
    end
    local code, value = "OK", 0
    if level < 0 then
      value = nanos_until(-level)
      if not value then break end
    end
    local after = level - need
    if value > max_wait then
      code = "W"
    elseif after < 0 then
      local earned = max_debt * num
      if earned >= EX or -after * den >= EX then break end
      if earned + carry < -after * den then
        code = "D"
        value = nanos_until(-after)
        if not value then break end
      end
    end
    if code == "OK" then level = after end
    local fresh_in = 0
    if level < size then
      fresh_in = nanos_until(size - level)
      if not fresh_in then break end
    end
    local fmt = string.format
    local now = S > 0 and fmt("%.0f%09d", S, N) or fmt("%.0f", N)
    -- A counted namespace: a name not counted yet needs room under the cap.
    local cap = A[10]
    if cap ~= "" then
      local now_ms = S * 1000 + math.floor(N / 1000000)
      local score = redis.call("ZSCORE", K[2], A[11])
      local member = false
      if score == "inf" then
        member = true
      elseif score then
        if #score > 15 then break end
        member = tonumber(score) > now_ms
      end
      if not member then
        redis.call("ZREMRANGEBYSCORE", K[2], "-inf", fmt("%.0f", now_ms))
        if redis.call("ZCARD", K[2]) >= tonumber(cap) then
          return { "B", "0", now }
        end
      end
    end
    -- Writes, as `save` below.
    -- The level was up to date with now if time passed, else as it was.
    local last = now
    if live and dt <= 0 then last = v[3] end
    redis.call("HSET", K[1], "l", fmt("%.0f", level), "c", fmt("%.0f", carry), "t", last, "u", now, "s", sid)
    if max_idle and max_idle < fresh_in then fresh_in = max_idle end
    local ms = math.floor(fresh_in / 1000000) + 1
    if A[2] ~= "" and ms < 60000 then ms = 60000 end
    redis.call("PEXPIRE", K[1], fmt("%.0f", ms))
    if cap ~= "" then
      if max_idle then
        -- Idle from the first millisecond at or after now + max_idle.
        local score = S * 1000 + math.ceil((N + max_idle) / 1000000)
        redis.call("ZADD", K[2], fmt("%.0f", score), A[11])
        local keep = math.floor(max_idle / 1000000) + 1
        if A[2] ~= "" and keep < 60000 then keep = 60000 end
        local pttl = redis.call("PTTL", K[2])
        if pttl == -2 or (pttl >= 0 and pttl < keep) then
          redis.call("PEXPIRE", K[2], fmt("%.0f", keep))
        end
      else
        redis.call("ZADD", K[2], "inf", A[11])
        redis.call("PERSIST", K[2])
      end
    end
    return { code, fmt("%.0f", value), now }
  until true
  return nil
end

if ARGV[1] ~= "batch" then
  local answer = fast(KEYS, ARGV)
  if answer then return answer end
end

-- The multi-limb integer library (`tollgate_service::redis_link::LIMBS`)
-- goes here.
--@limbs

local ZERO, ONE = 0, 1
local TPO = 1048576 -- tokens per op
local MILLION = 1000000
local U64MAX = { 16777215, 16777215, 65535 } -- 2^64 - 1

local function sat(a) return cmp(a, U64MAX) <= 0 and a or U64MAX end
-- ceil(a / b) for b > 0.
local function ceil(a, b)
  return divq(sub(add(a, b), ONE), b)
end

-- One reservation on the general path: its answer.
local function general(K, A)
  local explicit = A[2] ~= ""
  local now
  if explicit then
    now = parse(A[2])
  else
    local t = redis.call("TIME")
    now = add(mul(tonumber(t[1]), 1000000000), tonumber(t[2]) * 1000)
  end
  local now_ms = divq(now, MILLION)
  local out_now = str(now)

  local op = A[1]
  local ops = parse(A[3])
  local sid = table.concat({ A[4], A[5], A[6], A[7] }, ":")
  -- A meter: tokens per ns is (whole den + fraction) / den.
  local function meter(size, whole, fraction, den)
    local M = {
      size = mul(parse(size), TPO), whole = parse(whole),
      fraction = parse(fraction), den = parse(den),
    }
    M.num = add(mul(M.whole, M.den), M.fraction)
    M.id = whole .. ":" .. fraction .. ":" .. den
    return M
  end
  local P = meter(A[4], A[5], A[6], A[7])
  local max_debt, max_wait = parse(A[8]), parse(A[9])
  local cap, name = A[10], A[11]
  local max_idle = A[12] ~= "" and parse(A[12]) or nil
  local counted = cap ~= ""

  -- The state: a signed level as (neg, mag), the carry and the time.
  local v = redis.call("HMGET", K[1], "l", "c", "t", "u", "s")
  local live = v[1] ~= false
  if live and max_idle and cmp(now, add(parse(v[4]), max_idle)) >= 0 then
    -- Idle for max_idle: gone, as the reaper removes it in memory.
    live = false
  end
  if counted then
    local score = redis.call("ZSCORE", K[2], name)
    local member = score ~= false and (score == "inf" or cmp(parse(score), now_ms) > 0)
    if not member then
      redis.call("ZREMRANGEBYSCORE", K[2], "-inf", str(now_ms))
      if cmp(parse(tostring(redis.call("ZCARD", K[2]))), parse(cap)) >= 0 then
        return { "B", "0", out_now }
      end
    end
  end
  if op == "refuse" then return { "T", "0", out_now } end

  local neg, level, carry, last
  if live then
    local l = v[1]
    neg = string.sub(l, 1, 1) == "-"
    if neg then l = string.sub(l, 2) end
    level, carry, last = parse(l), parse(v[2]), parse(v[3])
  else
    neg, level, carry, last = false, P.size, ZERO, now
  end

  -- Adds the tokens earned from `last` to now under meter M, up to its size.
  local function refill(M)
    if cmp(now, last) <= 0 then return end
    local dt = sub(now, last)
    local scaled = add(mul(dt, M.fraction), carry)
    local q = divq(scaled, M.den)
    carry = sub(scaled, mul(q, M.den))
    local fresh = add(mul(dt, M.whole), q)
    last = now
    if neg then
      if cmp(fresh, level) >= 0 then
        neg, level = false, sub(fresh, level)
      else
        level = sub(level, fresh)
      end
    else
      level = add(level, fresh)
    end
    if not neg and cmp(level, M.size) >= 0 then
      level, carry = M.size, ZERO
    end
  end

  if live and v[5] ~= sid then
    -- New settings: earned up to now under the old ones, then the level
    -- down to the new size, and the carry dropped with the old meter.
    local o = {}
    for part in string.gmatch(v[5], "[^:]+") do o[#o + 1] = part end
    local old = meter(o[1], o[2], o[3], o[4])
    refill(old)
    if not neg and cmp(level, P.size) > 0 then level = P.size end
    if old.id ~= P.id then carry = ZERO end
  end
  refill(P)

  -- The least t with t num + carry >= debt den: the time to earn `debt`.
  local function nanos_until(debt)
    return sat(ceil(sub(mul(debt, P.den), carry), P.num))
  end
  -- The time until the level is back at the size.
  local function fresh_in()
    local deficit = neg and add(P.size, level) or sub(P.size, level)
    if deficit == 0 then return ZERO end
    return nanos_until(deficit)
  end

  -- Milliseconds of Redis' time to keep a key `ns` of the script's time.
  local function keep_ms(ns)
    local ms = add(divq(ns, MILLION), ONE)
    if explicit and cmp(ms, 60000) < 0 then
      -- A time given by the caller runs apart from Redis' own: keep the
      -- key at least a minute of Redis' time.
      ms = 60000
    end
    return ms
  end

  -- Writes the state, used now, expiring when it is full again (it then
  -- decides as a fresh one) or idle, whichever comes first.
  local function save()
    local l = str(level)
    if neg and level ~= 0 then l = "-" .. l end
    redis.call("HSET", K[1], "l", l, "c", str(carry), "t", str(last), "u", str(now), "s", sid)
    local ns = fresh_in()
    if max_idle and cmp(max_idle, ns) < 0 then ns = max_idle end
    redis.call("PEXPIRE", K[1], str(keep_ms(ns)))
    if counted then
      if max_idle then
        -- Idle from the first millisecond at or after now + max_idle.
        redis.call("ZADD", K[2], str(ceil(add(now, max_idle), MILLION)), name)
        local keep = keep_ms(max_idle)
        local pttl = redis.call("PTTL", K[2])
        if pttl == -2 or (pttl >= 0 and cmp(parse(tostring(pttl)), keep) < 0) then
          redis.call("PEXPIRE", K[2], str(keep))
        end
      else
        -- Never idle: counted until the configuration drops the namespace
        -- (at most the cap).
        redis.call("ZADD", K[2], "inf", name)
        redis.call("PERSIST", K[2])
      end
    end
  end

  -- The caller waits for the debt owed before it.
  local wait = ZERO
  if neg and level ~= 0 then wait = nanos_until(level) end
  if cmp(wait, max_wait) > 0 then
    -- Refused, and used: nothing claimed (the refill is the same whenever
    -- it is made).
    save()
    return { "W", str(wait), out_now }
  end
  local need = mul(ops, TPO)
  -- The level after: negative when need exceeds what is on hand.
  local aneg, after
  if neg then
    aneg, after = true, add(level, need)
  elseif cmp(level, need) >= 0 then
    aneg, after = false, sub(level, need)
  else
    aneg, after = true, sub(need, level)
  end
  if aneg and after ~= 0 then
    -- Earned within the max debt: max_debt num + carry >= debt den.
    if cmp(add(mul(max_debt, P.num), carry), mul(after, P.den)) < 0 then
      save()
      return { "D", str(nanos_until(after)), out_now }
    end
  end
  neg, level = aneg, after
  save()
  return { "OK", str(wait), out_now }
end

if ARGV[1] ~= "batch" then return general(KEYS, ARGV) end

local out, k, a = {}, 1, 4
for _ = 1, tonumber(ARGV[3]) do
  local A = { ARGV[a], ARGV[2] }
  for i = 1, 10 do A[i + 2] = ARGV[a + i] end
  a = a + 11
  local K = { KEYS[k] }
  k = k + 1
  if A[10] ~= "" then
    K[2] = KEYS[k]
    k = k + 1
  end
  local answer = fast(K, A) or general(K, A)
  for i = 1, 3 do out[#out + 1] = answer[i] end
end
return out
