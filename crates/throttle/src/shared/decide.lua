-- tollgate: the throttler's policies on keys kept in Redis (see
-- `crates/throttle/src/shared/mod.rs`). Redis' Lua numbers are doubles,
-- exact only below 2^53, so every quantity here is a natural number with
-- the same integer arithmetic as the Rust policies: a double while it is
-- below 2^48 (counts, limits, durations, window indexes), 24-bit limbs
-- above (a GCRA's tokens); the time is S seconds and N nanoseconds, whole
-- only where a step needs it (a GCRA's meter, windows of 6.5 days or
-- more). A check of one fixed window, sliding window counter, GCRA or
-- token pool on small numbers takes the fast path below, on doubles
-- alone.
--
-- KEYS: one state key per item.
-- ARGV[1]: "check", "standing" (a check that also says where each key
-- stands after it), "settle", "give" (a slice's unused tokens back) or
-- "batch" (several checks in one call, see the end of the script).
-- ARGV[2]: the time in nanoseconds, or "" for Redis' TIME.
-- ARGV[3]: the number of items; then 9 arguments per item:
--   kind ("fw", "swc", "gcra", "sl", "tp"; "KIND!NS" under a rule that bans
--   for NS nanoseconds), role ("H" enforced hard limit, "S" shadow
--   hard limit, "s" the soft limit of the item before it), cost (check) or
--   signed delta (settle), and five parameters:
--   fw, swc: limit, window_ns, -, -, -
--   sl: limit, window_ns, log_rejected ("1" or "0"), -, -
--   gcra: burst, queue, whole, fraction, den (the exact meter: tokens per
--   nanosecond is whole + fraction / den)
--   tp: A, B, cap (in tokens), num, den (tokens per nanosecond: num / den)
--   and the slice: in a check, the most an admitted enforced fw or swc
--   item takes (its cost and up to that much more that fits, "T" below;
--   "0" none); in a give, the window index the tokens were taken in
--   (returned only while that window is the key's latest).
-- Returns {now, then per item: code, value, remaining, reset (0 and 0
-- unless asked), then, when a check's first item (not a token pool) is
-- rejected for a cost it could ever pay, "S" and that key's stored fields
-- (three, "0" after the last)}; a batch returns {now, then each
-- request's answers as above}; code "A" admit (value: remaining), "T"
-- followed by the tokens taken (an admitted slice; value: remaining), "D"
-- delay (value: ns), "R" reject (value: retry ns), "B" rejected as banned
-- (value: ns to the ban's end), "X" rejected, starting a ban (value: ns to
-- its end), "-" not decided. A check charges nothing when an enforced
-- hard limit rejects; otherwise it writes every admitted item's state,
-- each with a TTL of the time until it decides like a fresh key. Either
-- way it writes a ban a rejection starts, the rejections a sliding log
-- that logs them logged, and each token pool's refill (not its charge).

-- The common call, a check of one fixed window, sliding window counter,
-- GCRA or token pool on small numbers, runs on doubles alone, before the
-- general path defines anything: Redis runs the whole script on every
-- call, and each function it defines costs about 0.1 µs. So does each
-- such check of a batch. A check it cannot take returns nil before it
-- writes, to the general path, which takes the time read here. The
-- GCRA's and the token pool's steps are spliced in below, each one
-- function (`gcra_fast.lua`, `token_pool_fast.lua`).
local fast_S, fast_N
do
  local t = ARGV[2]
  if t ~= "" then
    if #t > 9 then
      fast_S, fast_N = tonumber(string.sub(t, 1, -10)), tonumber(string.sub(t, -9))
    else
      fast_S, fast_N = 0, tonumber(t)
    end
  else
    t = redis.call("TIME")
    fast_S, fast_N = tonumber(t[1]), tonumber(t[2]) * 1000
  end
end
local fmt = string.format
local fast_now = fast_S > 0 and fmt("%.0f%09d", fast_S, fast_N) or fmt("%.0f", fast_N)

-- The keys the fast path has read or decided in this call, by name: {i,
-- p ("-" for a fixed window), c}, with `ms`, the TTL, once a check
-- changed it; `held_keys` lists the changed ones in order. A key is read
-- once a call and written once, by `flush`, before the call returns or
-- hands over to the general path.
local held, held_keys = {}, {}
local fast_div = {}
local function flush()
  for _, key in ipairs(held_keys) do
    local h = held[key]
    if h[2] == "-" then
      redis.call("HSET", key, "i", fmt("%.0f", h[1]), "c", fmt("%.0f", h[3]))
    else
      redis.call("HSET", key, "i", fmt("%.0f", h[1]), "p", fmt("%.0f", h[2]),
        "c", fmt("%.0f", h[3]))
    end
    redis.call("PEXPIRE", key, fmt("%.0f", h.ms))
  end
  held, held_keys = {}, {}
end

--@gcra_fast
--@token_pool_fast

-- The answer values of check `op` of one item, its arguments after
-- ARGV[a0] and its key `key`; nil for one the general path decides.
local function fast(op, a0, key)
  if op ~= "check" and op ~= "standing" then return nil end
  local kind = ARGV[a0 + 1]
  if ARGV[a0 + 2] ~= "s" then
    if kind == "gcra" then return fast_gcra(op, a0, key) end
    if kind == "tp" then return fast_tp(op, a0, key) end
  end
  if kind ~= "fw" and kind ~= "swc" then return nil end
  if ARGV[a0 + 2] == "s" or ARGV[a0 + 9] ~= "0" then return nil end
  local cs, ls, ws = ARGV[a0 + 3], ARGV[a0 + 4], ARGV[a0 + 5]
  -- cost, limit and window below 10^14 < 2^47.
  if #cs > 14 or #ls > 14 or #ws > 14 then return nil end
  local cost, limit, w = tonumber(cs), tonumber(ls), tonumber(ws)
  local S, N = fast_S, fast_N
  -- Far below 2^64, a window's end does not saturate.
  if S > 18446743000 then return nil end
  -- The window index and now mod w, as in `index` below, once a call.
  local d = fast_div[w]
  if not d then
    local q1 = math.floor(S / w)
    if q1 >= 9000000 then return nil end
    local x, q2, n, pow = S - q1 * w, 0, N, 100000000
    for _ = 1, 9 do
      local digit = math.floor(n / pow)
      n = n - digit * pow
      pow = pow / 10
      x = x * 10 + digit
      local qd = math.floor(x / w)
      x = x - qd * w
      q2 = q2 * 10 + qd
    end
    -- Below 9 * 10^15 < 2^53.
    d = { q1 * 1000000000 + q2, x }
    fast_div[w] = d
  end
  local idx, r = d[1], d[2]
  local left = w - r
  local code, value, fields, ttl, tail
  local i, p, c
  local remaining, reset = "0", "0"
  if kind == "fw" then
    i, c = idx, 0
    local h = held[key]
    if h then
      i, c = h[1], h[3]
    else
      local v = redis.call("HMGET", key, "i", "c")
      if v[1] then
        if #v[1] > 15 or #v[2] > 14 then return nil end
        i, c = tonumber(v[1]), tonumber(v[2])
      end
    end
    -- A window after now's (a time that went back) takes the general path.
    if i > idx then return nil end
    if i < idx then i, c = idx, 0 end
    if cost > limit then
      code, value = "R", "18446744073709551615"
    elseif c + cost <= limit then
      c = c + cost
      code, value = "A", fmt("%.0f", limit - c)
      fields, ttl = true, left
    else
      code, value = "R", fmt("%.0f", left)
      tail = { "S", fmt("%.0f", i), fmt("%.0f", c), "0" }
    end
    if op == "standing" then
      remaining = fmt("%.0f", limit > c and limit - c or 0)
      if c ~= 0 then reset = fmt("%.0f", left) end
    end
  else
    i, p, c = idx, 0, 0
    local h = held[key]
    if h then
      i, p, c = h[1], h[2], h[3]
    else
      local v = redis.call("HMGET", key, "i", "p", "c")
      if v[1] then
        if #v[1] > 15 or #v[2] > 14 or #v[3] > 14 then return nil end
        i, p, c = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
      end
    end
    if i > idx then return nil end
    if idx == i + 1 then
      i, p, c = idx, c, 0
    elseif idx > i + 1 then
      i, p, c = idx, 0, 0
    end
    -- floor(prev (w - r) / w) and the first offset at which the previous
    -- window's weight is at most m, as `weighted` and `first_fit` below;
    -- nil where a product reaches 2^53.
    local function weighted(prev, rr)
      local y = prev * (w - rr)
      if y >= 9007199254740992 then return nil end
      return math.floor(y / w)
    end
    local function first_fit(prev, m, rr)
      local wp = weighted(prev, rr)
      if not wp then return nil end
      if wp <= m then return rr end
      local y = (m + 1) * w
      if y >= 9007199254740992 then return nil end
      local span = math.floor((y - 1) / prev)
      local fit = w > span and w - span or 0
      return fit > rr and fit or rr
    end
    local wp = weighted(p, r)
    if not wp then return nil end
    local est = c + wp
    if cost > limit then
      code, value = "R", "18446744073709551615"
    elseif est + cost <= limit then
      c = c + cost
      code, value = "A", fmt("%.0f", limit - est - cost)
      fields, ttl = true, left + w
    else
      local m = limit - cost
      if c <= m then
        local fit = first_fit(p, m - c, r)
        if not fit then return nil end
        if fit < w then code, value = "R", fmt("%.0f", fit - r) end
      end
      if not code then
        local fit = first_fit(c, m, 0)
        if not fit then return nil end
        if fit > w then fit = w end
        code, value = "R", fmt("%.0f", left + fit)
      end
      tail = { "S", fmt("%.0f", i), fmt("%.0f", p), fmt("%.0f", c) }
    end
    if op == "standing" then
      est = c + wp
      remaining = fmt("%.0f", limit > est and limit - est or 0)
      if c ~= 0 then
        reset = fmt("%.0f", left + w)
      elseif wp ~= 0 then
        reset = fmt("%.0f", left)
      end
    end
  end
  -- Held for the batch's next check of the key; an admitted one's write
  -- is left to `flush`.
  local was = held[key]
  if fields then
    local ms = math.floor(ttl / 1000000) + 1
    if ARGV[2] ~= "" and ms < 60000 then ms = 60000 end
    if not was or not was.ms then held_keys[#held_keys + 1] = key end
    held[key] = { i, kind == "fw" and "-" or p, c, ms = ms }
  elseif not was then
    held[key] = { i, kind == "fw" and "-" or p, c }
  end
  if tail then
    return { code, value, remaining, reset, tail[1], tail[2], tail[3], tail[4] }
  end
  return { code, value, remaining, reset }
end

-- A batch's checks, in turn, while the fast path takes them; the general
-- path goes on from the first it does not (`batch_from`).
local batch_from
if ARGV[1] == "batch" then
  local out = { fast_now }
  local a, k, q, count = 4, 0, 1, tonumber(ARGV[3])
  while q <= count do
    if ARGV[a + 1] ~= "1" then break end
    local r = fast(ARGV[a], a + 1, KEYS[k + 1])
    if not r then break end
    for j = 1, #r do out[#out + 1] = r[j] end
    a, k, q = a + 11, k + 1, q + 1
  end
  flush()
  if q > count then return out end
  batch_from = { q = q, a = a, k = k, out = out }
elseif ARGV[3] == "1" then
  local r = fast(ARGV[1], 3, KEYS[1])
  flush()
  if r then
    table.insert(r, 1, fast_now)
    return r
  end
end

-- The multi-limb integer library (`tollgate_service::redis_link::LIMBS`)
-- goes here.
--@limbs

local ZERO, ONE = 0, 1
local U64MAX = { 16777215, 16777215, 65535 } -- 2^64 - 1
local TPO = 1048576 -- tokens per op
local MILLION = 1000000

local function maxb(a, b) return cmp(a, b) >= 0 and a or b end
local function minb(a, b) return cmp(a, b) <= 0 and a or b end
local function sat(a) return minb(a, U64MAX) end
local function satsub(a, b) return cmp(a, b) > 0 and sub(a, b) or ZERO end
local function copy(s)
  local c = {}
  for k, v in pairs(s) do c[k] = v end
  return c
end

-- The time: S seconds and N nanoseconds since the epoch (S below 2^35,
-- N below 10^9), the number of nanoseconds built only when a step needs
-- it whole.
local S, N = fast_S, fast_N
local explicit = ARGV[2] ~= ""
if S then
  -- Read by the fast path above.
elseif explicit then
  local t = ARGV[2]
  if #t > 9 then
    S, N = tonumber(string.sub(t, 1, -10)), tonumber(string.sub(t, -9))
  else
    S, N = 0, tonumber(t)
  end
else
  local t = redis.call("TIME")
  S, N = tonumber(t[1]), tonumber(t[2]) * 1000
end
local whole
local function now()
  if not whole then whole = add(mul(S, 1000000000), N) end
  return whole
end

-- floor(now / w) and now mod w, by long division of S, then of N a digit
-- at a time: every step divides a number below 10w < 2^53, whose floor
-- in doubles is exact, for w below 2^49 (6.5 days; longer windows divide
-- on limbs, with no remainder).
local divided = {}
local function index(w)
  local d = divided[w]
  if d then return d[1], d[2] end
  if type(w) ~= "number" or w >= 562949953421312 then
    d = { divq(now(), w) }
  else
    local q1 = math.floor(S / w)
    local x, q2, n, pow = S - q1 * w, 0, N, 100000000
    for _ = 1, 9 do
      local digit = math.floor(n / pow)
      n = n - digit * pow
      pow = pow / 10
      x = x * 10 + digit
      local qd = math.floor(x / w)
      x = x - qd * w
      q2 = q2 * 10 + qd
    end
    d = { add(mul(q1, 1000000000), q2), x }
  end
  divided[w] = d
  return d[1], d[2]
end

-- The nanoseconds from now to window i's end, sat((i + 1) w) -
-- max(now, i w): in the window that holds now, and not near 2^64, w less
-- now mod w.
local function window_left(w, i)
  local idx, r = index(w)
  if r and cmp(i, idx) == 0 and S + w / 1000000000 + 2 < 18446744073 then
    return w - r
  end
  return sub(sat(mul(add(i, ONE), w)), maxb(now(), mul(i, w)))
end

-- The fixed window: {i = window index, c = count}.
local fw = {}
function fw.fresh(P) return { i = (index(P.w)), c = ZERO } end
function fw.load(v) return { i = parse(v[1]), c = parse(v[2]) } end
function fw.save(s) return { "i", str(s.i), "c", str(s.c) } end
function fw.fields() return { "i", "c" } end
function fw.roll(P, s)
  local idx = index(P.w)
  if cmp(idx, s.i) > 0 then
    s.i, s.c = idx, ZERO
  end
end
function fw.check(P, s, cost)
  if cmp(cost, P.limit) > 0 then return "R", U64MAX end
  fw.roll(P, s)
  local c = add(s.c, cost)
  if cmp(c, P.limit) <= 0 then
    s.c = c
    return "A", sub(P.limit, c)
  end
  return "R", window_left(P.w, s.i)
end
function fw.settle(P, s, neg, d)
  fw.roll(P, s)
  s.c = neg and satsub(s.c, d) or sat(add(s.c, d))
end
function fw.standing(P, s0)
  local s = copy(s0)
  fw.roll(P, s)
  local reset = ZERO
  if s.c ~= 0 then reset = window_left(P.w, s.i) end
  return satsub(P.limit, s.c), reset
end
-- After an admitted check: takes up to `most` more that fits; returns
-- how many and what remains.
function fw.take(P, s, most)
  local extra = minb(most, satsub(P.limit, s.c))
  s.c = add(s.c, extra)
  return extra, satsub(P.limit, s.c)
end
-- The nanoseconds from now until the key decides like a fresh one.
function fw.fresh_in(P, s)
  local idx, r = index(P.w)
  if r and cmp(s.i, idx) == 0 then return P.w - r end
  return satsub(mul(add(s.i, ONE), P.w), now())
end

-- The sliding window counter: {i = window index, p = previous, c = current}.
local swc = {}
function swc.fresh(P) return { i = (index(P.w)), p = ZERO, c = ZERO } end
function swc.load(v) return { i = parse(v[1]), p = parse(v[2]), c = parse(v[3]) } end
function swc.save(s) return { "i", str(s.i), "p", str(s.p), "c", str(s.c) } end
function swc.fields() return { "i", "p", "c" } end
function swc.roll(P, s)
  local idx, rem = index(P.w)
  local c = cmp(idx, add(s.i, ONE))
  if c == 0 then
    s.i, s.p, s.c = idx, s.c, ZERO
  elseif c > 0 then
    s.i, s.p, s.c = idx, ZERO, ZERO
  end
  -- now - i w in the window that holds now, 0 in a later one.
  local c = cmp(s.i, idx)
  if c > 0 then return ZERO end
  if rem then return rem end
  return sub(now(), mul(s.i, P.w))
end
local function weighted(P, prev, r)
  return divq(mul(prev, sub(P.w, r)), P.w)
end
local function first_fit(P, prev, m, r)
  if cmp(weighted(P, prev, r), m) <= 0 then return r end
  local span = divq(sub(mul(add(m, ONE), P.w), ONE), prev)
  return maxb(sat(satsub(P.w, span)), r)
end
function swc.check(P, s, cost)
  if cmp(cost, P.limit) > 0 then return "R", U64MAX end
  local r = swc.roll(P, s)
  local est = sat(add(s.c, weighted(P, s.p, r)))
  if cmp(sat(add(est, cost)), P.limit) <= 0 then
    s.c = add(s.c, cost)
    return "A", sub(sub(P.limit, est), cost)
  end
  local m = sub(P.limit, cost)
  if cmp(s.c, m) <= 0 then
    local fit = first_fit(P, s.p, sub(m, s.c), r)
    if cmp(fit, P.w) < 0 then return "R", sub(fit, r) end
  end
  local fit = minb(first_fit(P, s.c, m, ZERO), P.w)
  return "R", sat(add(sub(P.w, r), fit))
end
function swc.take(P, s, most)
  local r = swc.roll(P, s)
  local est = sat(add(s.c, weighted(P, s.p, r)))
  local extra = minb(most, satsub(P.limit, est))
  s.c = add(s.c, extra)
  return extra, satsub(satsub(P.limit, est), extra)
end
function swc.settle(P, s, neg, d)
  swc.roll(P, s)
  s.c = neg and satsub(s.c, d) or sat(add(s.c, d))
end
function swc.standing(P, s0)
  local s = copy(s0)
  local r = swc.roll(P, s)
  local wp = weighted(P, s.p, r)
  local est = sat(add(s.c, wp))
  local reset = ZERO
  if s.c ~= 0 then
    reset = sat(add(sub(P.w, r), P.w))
  elseif wp ~= 0 then
    reset = sub(P.w, r)
  end
  return satsub(P.limit, est), reset
end
function swc.fresh_in(P, s)
  local idx, r = index(P.w)
  if r and cmp(s.i, idx) == 0 then return 2 * P.w - r end
  return satsub(mul(add(s.i, 2), P.w), now())
end

-- GCRA: {t = theoretical arrival time, in tokens}.
local gcra = {}
local function tokens_floor(P, ns)
  return add(mul(ns, P.whole), divq(mul(ns, P.fraction), P.den))
end
local function ceil_ns(P, tokens)
  local ns = sat(divq(mul(tokens, P.den), P.num))
  if cmp(tokens_floor(P, ns), tokens) >= 0 then return ns end
  return sat(add(ns, ONE))
end
function gcra.fresh() return { t = ZERO } end
function gcra.load(v) return { t = parse(v[1]) } end
function gcra.save(s) return { "t", str(s.t) } end
function gcra.fields() return { "t" } end
function gcra.check(P, s, cost)
  local most = add(P.burst, P.queue)
  if cmp(cost, most) > 0 then return "R", U64MAX end
  local t = tokens_floor(P, now())
  local tat = add(maxb(s.t, t), mul(cost, TPO))
  local ahead = sub(tat, t)
  local burst = mul(P.burst, TPO)
  if cmp(ahead, burst) <= 0 then
    s.t = tat
    return "A", sat(divq(sub(burst, ahead), TPO))
  end
  local limit = mul(most, TPO)
  if cmp(ahead, limit) <= 0 then
    s.t = tat
    return "D", ceil_ns(P, sub(ahead, burst))
  end
  return "R", ceil_ns(P, sub(ahead, limit))
end
function gcra.settle(P, s, neg, d)
  local t = tokens_floor(P, now())
  local tokens = mul(d, TPO)
  if neg then
    s.t = maxb(satsub(s.t, tokens), minb(t, s.t))
  else
    s.t = add(maxb(s.t, t), tokens)
  end
end
function gcra.standing(P, s)
  local ahead = satsub(s.t, tokens_floor(P, now()))
  local burst = mul(P.burst, TPO)
  return sat(divq(satsub(burst, ahead), TPO)), ceil_ns(P, ahead)
end
function gcra.fresh_in(P, s) return satsub(ceil_ns(P, s.t), now()) end

--@sliding_log
--@token_pool

local policies = { fw = fw, swc = swc, gcra = gcra, sl = sl, tp = tp }

-- The items of one request: `n`, their arguments after ARGV[a0], their
-- keys after KEYS[k0].
local function items_of(n, a0, k0)
  local items = {}
  for i = 1, n do
    local a = a0 + (i - 1) * 9
    local kind, ban = ARGV[a + 1], nil
    local bang = string.find(kind, "!", 1, true)
    if bang then
      kind, ban = string.sub(kind, 1, bang - 1), parse(string.sub(kind, bang + 1))
    end
    local P = {}
    if kind == "gcra" then
      P.burst, P.queue = parse(ARGV[a + 4]), parse(ARGV[a + 5])
      P.whole, P.fraction, P.den = parse(ARGV[a + 6]), parse(ARGV[a + 7]), parse(ARGV[a + 8])
      P.num = add(mul(P.whole, P.den), P.fraction)
    elseif kind == "tp" then
      P.A, P.B, P.cap = parse(ARGV[a + 4]), parse(ARGV[a + 5]), parse(ARGV[a + 6])
      P.num, P.den = parse(ARGV[a + 7]), parse(ARGV[a + 8])
    else
      P.limit, P.w = parse(ARGV[a + 4]), parse(ARGV[a + 5])
      P.log = ARGV[a + 6] == "1"
    end
    local amount = ARGV[a + 3]
    local neg = string.sub(amount, 1, 1) == "-"
    if neg then amount = string.sub(amount, 2) end
    items[i] = {
      key = KEYS[k0 + i], policy = policies[kind], P = P, role = ARGV[a + 2],
      amount = parse(amount), neg = neg, slice = parse(ARGV[a + 9]), ban = ban,
    }
  end
  return items
end

-- The states as Redis holds them, read once per key (two items, or two
-- requests of a batch, may share one) and kept as requests write them.
local states = {}
-- The state Redis holds for `item`, or nil.
local function read(item)
  if item.policy.read then return item.policy.read(item.key) end
  local v = redis.call("HMGET", item.key, unpack(item.policy.fields()))
  if v[1] then return item.policy.load(v) end
end
local function state_of(item)
  local s = states[item.key]
  if s then return s end
  s = read(item) or item.policy.fresh(item.P)
  states[item.key] = s
  return s
end

-- Writes the items' states, each expiring when it decides like a fresh one.
local function save(list)
  for _, item in ipairs(list) do
    local s = states[item.key]
    local ms = add(divq(item.policy.fresh_in(item.P, s), MILLION), ONE)
    if explicit then
      -- A time given by the caller runs apart from Redis' own: keep the
      -- key at least a minute of Redis' time.
      ms = maxb(ms, 60000)
    end
    if item.policy.write then
      item.policy.write(item.key, s, ms)
    else
      redis.call("HSET", item.key, unpack(item.policy.save(s)))
      redis.call("PEXPIRE", item.key, str(ms))
    end
  end
end

-- A rule's ban: a key of its own beside the item's, holding the ban's
-- end, expiring with it. The end while it is after now, else nil.
local function ban_of(item)
  local v = redis.call("GET", item.key .. ":b")
  if not v then return nil end
  local u = parse(v)
  if cmp(u, now()) > 0 then return u end
end
local function ban_until(item, u)
  local ms = add(divq(sub(u, now()), MILLION), ONE)
  if explicit then ms = maxb(ms, 60000) end
  redis.call("SET", item.key .. ":b", str(u), "PX", str(ms))
end

local out = batch_from and batch_from.out or { fast_now }
local function push(...)
  for _, v in ipairs({ ... }) do out[#out + 1] = v end
end

-- A check (or standing) of one request's `items`, its answers pushed: the
-- request is decided whole, writing nothing when an enforced hard limit
-- rejects.
local function decide(op, items)
  -- States this request would write, kept apart until it is admitted.
  local mine = {}
  local results, charged, logged, bans = {}, {}, {}, {}
  -- Token pools by key: the item and its state refilled to now, before
  -- any charge (see below).
  local refilled = {}
  local rejected, hard_admitted = false, false
  for i, item in ipairs(items) do
    if rejected or (item.role == "s" and not hard_admitted) then
      results[i] = { "-", ZERO }
    else
      local s = mine[item.key] or state_of(item)
      local trial = (item.policy.copy or copy)(s)
      local code, value
      -- A banned key is rejected until the ban's end, its limit not
      -- consulted ("B"); a rejection for a cost it could ever pay starts a
      -- ban ("X") until the limit would admit it plus the ban, written
      -- whatever the request's fate.
      local u = item.ban and ban_of(item)
      if u then
        code, value = "B", sub(u, now())
      else
        if item.policy.advance then
          item.policy.advance(item.P, trial)
          if not refilled[item.key] then
            refilled[item.key] = { item = item, s = copy(trial) }
          end
        end
        code, value = item.policy.check(item.P, trial, item.amount)
        if code == "R" and item.policy.advance then mine[item.key] = trial end
        if code == "R" and item.P.log and cmp(value, U64MAX) ~= 0 then
          -- A sliding log that logs rejections keeps them, whatever the
          -- request's fate.
          mine[item.key] = trial
          logged[#logged + 1] = item
        end
        if code == "R" and item.ban and cmp(value, U64MAX) ~= 0 then
          u = sat(add(add(now(), value), item.ban))
          code, value = "X", sub(u, now())
          ban_until(item, u)
        end
      end
      bans[i] = u
      if code == "A" and item.role == "H" and item.policy.take
          and cmp(item.slice, item.amount) > 0 then
        local extra
        extra, value = item.policy.take(item.P, trial, sub(item.slice, item.amount))
        code = "T" .. str(add(item.amount, extra))
      end
      results[i] = { code, value }
      local admitted = code ~= "R" and code ~= "B" and code ~= "X"
      if admitted then
        mine[item.key] = trial
        charged[#charged + 1] = item
      end
      if item.role ~= "s" then hard_admitted = admitted end
      if item.role == "H" and not admitted then rejected = true end
    end
  end
  if not rejected then
    for key, s in pairs(mine) do states[key] = s end
    save(charged)
  end
  if #logged > 0 then
    if rejected then
      for _, item in ipairs(logged) do states[item.key] = mine[item.key] end
    end
    save(logged)
  end
  -- A token pool's check refills it whatever its verdict and the
  -- request's fate, as in memory (where a refund undoes the charge, not
  -- the refill, and a refill split in two moves the burst differently
  -- than one): each is written, and a rejected request leaves it refilled.
  local written = {}
  if not rejected then
    for _, item in ipairs(charged) do written[item.key] = true end
  end
  for key, r in pairs(refilled) do
    if rejected then states[key] = r.s end
    if not written[key] then save({ r.item }) end
  end

  for i, item in ipairs(items) do
    local r = results[i]
    push(r[1], str(r[2]))
    if r[1] == "-" or op ~= "standing" then
      push("0", "0")
    else
      -- Where the key stands after the request: a rejected request
      -- charged nothing, so its keys stand as they stood.
      local s = states[item.key]
      if rejected then
        s = read(item) or item.policy.fresh(item.P)
      end
      local remaining, reset = item.policy.standing(item.P, s)
      if bans[i] then
        remaining, reset = ZERO, maxb(reset, sub(bans[i], now()))
      end
      push(str(remaining), str(reset))
    end
  end
  -- The first item rejected for a cost it could ever pay: its stored
  -- state, from which the caller may answer that key alone for a while.
  if results[1][1] == "R" and cmp(results[1][2], U64MAX) ~= 0
      and not items[1].policy.read and not items[1].policy.advance then
    local item = items[1]
    local v = redis.call("HMGET", item.key, unpack(item.policy.fields()))
    if v[1] then push("S", v[1], v[2] or "0", v[3] or "0") end
  end
end

if ARGV[1] == "batch" then
  -- Several requests, each "check" or "standing": its op, its number of
  -- items and their arguments; their keys in order. Decided in turn, each
  -- on the states the ones before it left.
  local a, k = batch_from.a, batch_from.k
  for _ = batch_from.q, tonumber(ARGV[3]) do
    local op, n = ARGV[a], tonumber(ARGV[a + 1])
    decide(op, items_of(n, a + 1, k))
    a = a + 2 + 9 * n
    k = k + n
  end
  return out
end

local n = tonumber(ARGV[3])
local items = items_of(n, 3, 0)

if ARGV[1] == "settle" then
  for _, item in ipairs(items) do
    local s = state_of(item)
    item.policy.settle(item.P, s, item.neg, item.amount)
  end
  save(items)
  for _ = 1, n do push("-", "0", "0", "0") end
  return out
end

if ARGV[1] == "give" then
  for _, item in ipairs(items) do
    local s = state_of(item)
    if item.policy.take then item.policy.roll(item.P, s) end
    if item.policy.take and cmp(s.i, item.slice) == 0 then
      s.c = satsub(s.c, item.amount)
      save({ item })
    end
  end
  for _ = 1, n do push("-", "0", "0", "0") end
  return out
end

decide(ARGV[1], items)
return out
