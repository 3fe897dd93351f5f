-- tollgate: the token pool's fast step in the throttler's script,
-- spliced into `decide.lua` at its `--@token_pool_fast` line
-- (`script.rs`), before the general path defines anything.
--
-- A check of a token pool (`token_pool.lua`: `tp.advance`, `tp.check`,
-- `tp.standing`, `tp.fresh_in`) on doubles alone. Its levels stay below
-- A + B + cap, held below 2^51; its time is the nanoseconds since the
-- epoch, so this step takes the time since the last fill, in base 10^9,
-- as (S - t1) 10^9 + N - t2 with S - t1 below 4 * 10^6 seconds (a fill
-- of a longer time, or one whose tokens pass 2^52, is taken only where it
-- fills any pool whatever its exact size). Every
-- product (the time since the last fill times num, and the parts of a
-- value times den / num, of a fill times B / A and of the headroom times
-- A / B) is checked below 2^52 before it is formed, and so is each level
-- and debt:
-- where a bound could be passed it returns nil, before it writes, to the
-- general path.

-- The answer values of check `op` of one token pool, its arguments after
-- ARGV[a0] and its key `key`, with its state written as the general path
-- writes it; nil for one the general path decides.
local function fast_tp(op, a0, key)
  local cs, As, Bs, caps = ARGV[a0 + 3], ARGV[a0 + 4], ARGV[a0 + 5], ARGV[a0 + 6]
  local ns_, ds = ARGV[a0 + 7], ARGV[a0 + 8]
  -- Below 10^16, each reads exactly up to 2^53 and rounded, to 2^53 or
  -- more, above: then its sum is far from 2^51.
  if #cs > 9 or #As > 16 or #Bs > 16 or #caps > 16 or #ns_ > 7 or #ds > 7 then
    return nil
  end
  local cost, A, B, cap = tonumber(cs), tonumber(As), tonumber(Bs), tonumber(caps)
  local num, den = tonumber(ns_), tonumber(ds)
  local top = A + B
  if top + cap >= 2251799813685248 or num < 1 or den < 1 then return nil end
  local LIM = 4503599627370496 -- 2^52
  -- x = q d + r with 0 <= r < d, for x below 2^52: the floor of the
  -- quotient of doubles is off by at most one, and q d stays exact.
  local function divmod(x, d)
    local q = math.floor(x / d)
    local r = x - q * d
    if r < 0 then return q - 1, r + d end
    if r >= d then return q + 1, r - d end
    return q, r
  end
  -- floor(x n / d) and x n mod d, for a quotient below 2^51: x qn +
  -- x rn / d with n = qn d + rn, and where x rn reaches 2^52, rn / d in
  -- lowest terms, r2 / d2 (a burst ratio of 1.1 makes B / A 1 / 10; a
  -- meter's den / num has d2 below 10^7), with x's quotient and remainder
  -- by d2 apart; nil for d2 of 2^26 or more.
  local function muldiv(x, n, d)
    if x * n / d >= 2251799813685248 then return nil end
    local qn, rn = divmod(n, d)
    local base, y = x * qn, x * rn
    if y < LIM then
      local q, r = divmod(y, d)
      return base + q, r
    end
    local g, h = d, rn
    while h > 0 do
      local _, r = divmod(g, h)
      g, h = h, r
    end
    local d2, r2 = d / g, rn / g
    if d2 >= 67108864 then return nil end
    local xq, xr = divmod(x, d2)
    local q, r = divmod(xr * r2, d2)
    return base + xq * r2 + q, r * g
  end
  local v = redis.call("HMGET", key, "a", "w", "c", "t", "d")
  -- The state, and since: the nanoseconds from its fill to now (0 for a
  -- fresh one, negative for a time that went back).
  local a, w, c, t, d, since
  local e1, e2 = 0, 0
  if v[1] then
    for k = 1, 5 do
      if #v[k] > 16 and k ~= 4 then return nil end
    end
    a, w, c, d = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[5])
    if a >= LIM or w >= LIM or c >= LIM or d >= LIM then return nil end
    t = v[4]
    if #t > 20 then return nil end
    local t1 = #t > 9 and tonumber(string.sub(t, 1, -10)) or 0
    e1, e2 = fast_S - t1, fast_N - tonumber(string.sub(t, -9))
    if e1 < -4000000 then return nil end
    -- Exact within 4 * 10^6 s; beyond, only as far as a fill far past
    -- any pool.
    since = e1 <= 4000000 and e1 * 1000000000 + e2 or math.huge
  else
    a, w, c, t, d, since = top, cap, 0, fast_now, 0, 0
  end
  -- tp.advance: the meter's tokens for the time since the fill, the debt
  -- repaid first, the rest filling the pool (the core's `Pool::fill`).
  local scaled = since * num + c
  if since > 0 and scaled >= LIM then
    -- A fill of at least L tokens: where that repays the debt and fills
    -- the pool to A + B and the backlog to its cap whatever its size
    -- (from d + A + B + cap + A on), only the carry needs the exact
    -- time: ((since mod den) num + c) mod den.
    local L = (e1 - 1) * 1000000000 * num / den * (1 - 2 ^ -30) - 1
    if L <= (d + top + cap + A) * (1 + 2 ^ -30) + 2 then return nil end
    local _, r1 = divmod(e1, den)
    local _, b9 = divmod(1000000000, den)
    local _, sm = divmod(r1 * b9 + e2, den)
    local _, c2 = divmod(sm * num + c, den)
    a, w, c, d, t = top, cap, c2, 0, fast_now
  elseif since > 0 then
    local f
    f, c = divmod(scaled, den)
    t = fast_now
    local repaid = f < d and f or d
    d, f = d - repaid, f - repaid
    if f > 0 then
      local to_active = A > a and A - a or 0
      if f < to_active then to_active = f end
      a, w = a + to_active, w + f - to_active
      local allowed = B
      if f < A then
        allowed = muldiv(f, B, A)
        if not allowed then return nil end
      end
      local room = top > a and top - a or 0
      if room < allowed then allowed = room end
      if w < allowed then allowed = w end
      w, a = w - allowed, a + allowed
      if w > cap then w = cap end
    end
  end
  -- The fewest nanoseconds whose tokens are at least x: ceil(x den / num).
  local function ceil_ns(x)
    local q, r = muldiv(x, den, num)
    if not q then return nil end
    return r > 0 and q + 1 or q
  end
  local TPO = 1048576
  local need = cost * TPO
  local code, value
  if need > top then
    code, value = "R", "18446744073709551615"
  elseif a >= need then
    a = a - need
    code, value = "A", fmt("%.0f", (a - a % TPO) / TPO)
  else
    local tokens
    if need <= A then
      tokens = need - a
    else
      tokens = A - (a < A and a or A) + B
      if tokens < A then tokens = A end
    end
    local ns = ceil_ns(tokens + d)
    if not ns then return nil end
    code, value = "R", fmt("%.0f", ns)
  end
  local remaining, reset = "0", "0"
  if op == "standing" then
    local ns = ceil_ns((top > a and top - a or 0) + d)
    if not ns then return nil end
    if d == 0 then remaining = fmt("%.0f", (a - a % TPO) / TPO) end
    reset = fmt("%.0f", ns)
  end
  -- tp.fresh_in: one fill that repays the debt and brings the pool to
  -- A + B and the backlog to its cap, from the fill's time.
  local f = (top > a and top - a or 0) + (cap > w and cap - w or 0)
  if B > 0 then
    if a < A then
      if f < A then f = A end
    else
      local g, r = muldiv(top - a, A, B)
      if not g then return nil end
      if r > 0 then g = g + 1 end
      if f < g then f = g end
    end
  end
  -- ceil(((f + d) den - c) / num) = q + ceil((r - c) / num).
  local e = 0
  if f + d > 0 then
    local q, r = muldiv(f + d, den, num)
    if not q then return nil end
    e = q + divmod(r - c + num - 1, num)
  end
  -- The fill's time is now, or later than now where the time went back.
  local fresh = e + (since < 0 and -since or 0)
  if fast_S + fresh / 1000000000 + 2 >= 18446744073 then return nil end
  local ms = divmod(fresh, 1000000) + 1
  if ARGV[2] ~= "" and ms < 60000 then ms = 60000 end
  redis.call("HSET", key, "a", fmt("%.0f", a), "w", fmt("%.0f", w), "c", fmt("%.0f", c),
    "t", t, "d", fmt("%.0f", d))
  redis.call("PEXPIRE", key, fmt("%.0f", ms))
  return { code, value, remaining, reset }
end
