-- tollgate: the GCRA's fast step in the throttler's script, spliced into
-- `decide.lua` at its `--@gcra_fast` line (`script.rs`), before the
-- general path defines anything.
--
-- A GCRA's state is its theoretical arrival time in tokens, about
-- now * num / den (num / den = whole + fraction / den tokens a
-- nanosecond): 2^80 today at an op a nanosecond, far past a double.
-- Only its distance from the time's tokens decides, so this step works
-- in base 10^9 relative to T = floor(now num / den) = q1 10^9 + q2
-- (`gcra.check` computes the same T as tokens_floor(now)): with the
-- stored time t1 10^9 + t2, the lead t - T is a double while t1 - q1 is
-- below 4 * 10^6. Every other value is a bounded product, checked before
-- it is formed: cost, burst and queue below 10^9 (ops of 2^20 tokens, so
-- below 2^50 tokens), num below 2^23 and den below 2^22, so that each
-- remainder times 10^9 stays below 2^52; the time's seconds times num
-- must stay below 2^52 too, every time below 2^51 nanoseconds, and the
-- key's expiry short of 2^64. Where a bound could be passed it returns
-- nil, before it writes, to the general path.

-- The answer values of check `op` of one GCRA, its arguments after
-- ARGV[a0] and its key `key`, as `gcra.check`, `gcra.standing` and
-- `gcra.fresh_in` give them; nil for one the general path decides.
local function fast_gcra(op, a0, key)
  local cs, bs, qs = ARGV[a0 + 3], ARGV[a0 + 4], ARGV[a0 + 5]
  local ws, fs, ds = ARGV[a0 + 6], ARGV[a0 + 7], ARGV[a0 + 8]
  if #cs > 9 or #bs > 9 or #qs > 9 or #ws > 7 or #fs > 7 or #ds > 7 then
    return nil
  end
  local cost, burst, den = tonumber(cs), tonumber(bs), tonumber(ds)
  local most = burst + tonumber(qs)
  local num = tonumber(ws) * den + tonumber(fs)
  if num < 1 or num >= 8388608 or den < 1 or den >= 4194304 then return nil end
  -- x = q d + r with 0 <= r < d, for x below 2^52: the floor of the
  -- quotient of doubles is off by at most one, and q d stays exact.
  local function divmod(x, d)
    local q = math.floor(x / d)
    local r = x - q * d
    if r < 0 then return q - 1, r + d end
    if r >= d then return q + 1, r - d end
    return q, r
  end
  -- now num = (S num + floor(N num / 10^9)) 10^9 + bl, N num below 2^53.
  local hi = fast_S * num
  if hi >= 4503599627370496 then return nil end
  local carry, bl = divmod(fast_N * num, 1000000000)
  local q1, r1 = divmod(hi + carry, den)
  -- r1 10^9 + bl < den 10^9 < 2^52, so q2 < 10^9; rho = now num mod den.
  local q2, rho = divmod(r1 * 1000000000 + bl, den)
  local v = redis.call("HGET", key, "t")
  local lead = 0
  if v then
    -- t1 below 10^16 reads exactly up to 2^53 and rounded, to 2^53 or
    -- more, above: then far above q1 < 2^52 + 2^23.
    if #v > 25 then return nil end
    local t1 = #v > 9 and tonumber(string.sub(v, 1, -10)) or 0
    local dh = t1 - q1
    if dh > 4000000 then return nil end
    if dh >= 0 then
      local d = dh * 1000000000 + tonumber(string.sub(v, -9)) - q2
      if d > 0 then lead = d end
    end
  end
  -- ceil((x den - s) / num), for 0 <= s < den and a result below 2^51:
  -- with x = xq num + xr, xq den + ceil((xr den - s) / num), xr den below
  -- 2^45. The fewest nanoseconds whose tokens are at least x for s = 0.
  local function ceil_ns(x, s)
    if x * den / num >= 2251799813685248 then return nil end
    local xq, xr = divmod(x, num)
    return xq * den + divmod(xr * den - (s or 0) + num - 1, num)
  end
  local TPO = 1048576
  local burst_t, most_t = burst * TPO, most * TPO
  local ahead = lead + cost * TPO
  local code, value, stands
  if cost > most then
    code, value, stands = "R", "18446744073709551615", lead
  elseif ahead <= burst_t then
    local left = burst_t - ahead
    code, value, stands = "A", fmt("%.0f", (left - left % TPO) / TPO), ahead
  elseif ahead <= most_t then
    local ns = ceil_ns(ahead - burst_t)
    if not ns then return nil end
    code, value, stands = "D", fmt("%.0f", ns), ahead
  else
    local ns = ceil_ns(ahead - most_t)
    if not ns then return nil end
    code, value, stands = "R", fmt("%.0f", ns), lead
  end
  local remaining, reset = "0", "0"
  if op == "standing" then
    local ns = ceil_ns(stands)
    if not ns then return nil end
    local left = burst_t > stands and burst_t - stands or 0
    remaining, reset = fmt("%.0f", (left - left % TPO) / TPO), fmt("%.0f", ns)
  end
  if code == "R" then
    if v and value ~= "18446744073709551615" then
      return { code, value, remaining, reset, "S", v, "0", "0" }
    end
    return { code, value, remaining, reset }
  end
  -- Admitted: t = T + ahead, expiring ceil((T + ahead) den / num) - now
  -- = ceil((ahead den - rho) / num) from now, not near 2^64.
  local fresh = ceil_ns(ahead, rho)
  if not fresh then return nil end
  if fresh < 0 then fresh = 0 end
  if fast_S + fresh / 1000000000 + 2 >= 18446744073 then return nil end
  local ms = divmod(fresh, 1000000) + 1
  if ARGV[2] ~= "" and ms < 60000 then ms = 60000 end
  local c, lo = divmod(q2 + ahead, 1000000000)
  local t = q1 + c
  redis.call("HSET", key, "t", t > 0 and fmt("%.0f%09d", t, lo) or fmt("%.0f", lo))
  redis.call("PEXPIRE", key, fmt("%.0f", ms))
  return { code, value, remaining, reset }
end
