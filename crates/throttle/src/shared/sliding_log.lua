-- tollgate: the sliding log's steps in the throttler's script, spliced
-- into `decide.lua` at its `--@sliding_log` line (`script.rs`), where the
-- other policies' steps and the limb library are in scope.

-- The sliding log: a Redis list of runs, oldest first, each "time start
-- end": a request of cost c logs c equal times, one run, and the runs'
-- entries are numbered on, so run j holds end - start entries and the log
-- end(newest) - start(oldest). A decision reads only the runs it needs
-- (the two ends, the ones that leave the window, the oldest k for a
-- retry time) and writes only what changed, so its cost does not grow
-- with the log. The key expires a window after the newest entry. An entry
-- at e is in the window at t while t - e < w.
--
-- In the script a log is a view of that list: runs lo..hi (list index
-- j - 1), T/A/B their time, start and end, read on demand; runs up to
-- `keep` (the list's length when read, or lower once runs were taken from
-- the back) are as Redis holds them unless `dirty`, runs after it new.
local sl = {}
local function sl_run(s, j)
  if not s.T[j] then
    local v = redis.call("LINDEX", s.key, j - 1)
    local t, a, b = string.match(v, "^(%d+) (%d+) (%d+)$")
    s.T[j], s.A[j], s.B[j] = parse(t), parse(a), parse(b)
  end
  return s.T[j], s.A[j], s.B[j]
end
local function sl_count(s)
  if s.hi < s.lo then return 0 end
  local _, a = sl_run(s, s.lo)
  local _, _, b = sl_run(s, s.hi)
  return sub(b, a)
end
function sl.fresh() return { T = {}, A = {}, B = {}, dirty = {}, lo = 1, hi = 0, keep = 0 } end
function sl.read(key)
  local len = redis.call("LLEN", key)
  if len == 0 then return nil end
  local s = sl.fresh()
  s.key, s.hi, s.keep = key, len, len
  return s
end
function sl.copy(s)
  local c = { T = {}, A = {}, B = {}, dirty = {}, lo = s.lo, hi = s.hi, keep = s.keep, key = s.key }
  for j, t in pairs(s.T) do c.T[j], c.A[j], c.B[j] = t, s.A[j], s.B[j] end
  for j in pairs(s.dirty) do c.dirty[j] = true end
  return c
end
function sl.write(key, s, ms)
  if s.hi < s.lo then
    redis.call("DEL", key)
  else
    local first_new
    if s.lo <= s.keep then
      redis.call("LTRIM", key, s.lo - 1, s.keep - 1)
      for j in pairs(s.dirty) do
        if j >= s.lo and j <= s.keep then
          redis.call("LSET", key, j - s.lo, str(s.T[j]) .. " " .. str(s.A[j]) .. " " .. str(s.B[j]))
        end
      end
      first_new = s.keep + 1
    else
      redis.call("DEL", key)
      first_new = s.lo
    end
    local new = {}
    for j = first_new, s.hi do
      new[#new + 1] = str(s.T[j]) .. " " .. str(s.A[j]) .. " " .. str(s.B[j])
    end
    if #new > 0 then redis.call("RPUSH", key, unpack(new)) end
    redis.call("PEXPIRE", key, str(ms))
  end
  -- The view now mirrors the list as written.
  local c = sl.fresh()
  c.key = key
  for j, t in pairs(s.T) do
    if j >= s.lo and j <= s.hi then
      local k = j - s.lo + 1
      c.T[k], c.A[k], c.B[k] = t, s.A[j], s.B[j]
    end
  end
  c.hi = math.max(s.hi - s.lo + 1, 0)
  c.keep = c.hi
  s.T, s.A, s.B, s.dirty, s.lo, s.hi, s.keep, s.key = c.T, c.A, c.B, c.dirty, 1, c.hi, c.hi, key
end
-- Drops the entries out of the window; returns the time decided at (now,
-- or the newest entry's time if the clock went back).
function sl.expire(P, s)
  local t = now()
  if s.hi < s.lo then return t end
  t = maxb(t, (sl_run(s, s.hi)))
  while s.lo <= s.hi and cmp(sub(t, (sl_run(s, s.lo))), P.w) >= 0 do
    s.lo = s.lo + 1
  end
  return t
end
-- Logs `c` entries at `t`, then keeps only the newest `limit`.
function sl.push(P, s, t, c)
  if c == 0 then return end
  local last = s.hi >= s.lo and sl_run(s, s.hi)
  if last and cmp(last, t) == 0 then
    s.B[s.hi] = add(s.B[s.hi], c)
    s.dirty[s.hi] = true
  else
    local base = last and s.B[s.hi] or ZERO
    s.hi = s.hi + 1
    s.T[s.hi], s.A[s.hi], s.B[s.hi] = t, base, add(base, c)
  end
  local n = sl_count(s)
  while n > P.limit do
    local excess = n - P.limit
    local _, a, b = sl_run(s, s.lo)
    local held = sub(b, a)
    if held <= excess then
      s.lo, n = s.lo + 1, n - held
    else
      s.A[s.lo], n = add(a, excess), P.limit
      s.dirty[s.lo] = true
    end
  end
end
function sl.check(P, s, cost)
  if cmp(cost, P.limit) > 0 then return "R", U64MAX end
  local t = sl.expire(P, s)
  local n = sl_count(s)
  if n + cost <= P.limit then
    sl.push(P, s, t, cost)
    return "A", P.limit - n - cost
  end
  if P.log then sl.push(P, s, t, cost) end
  -- The oldest n + cost - limit entries must leave the window.
  local k = sl_count(s) + cost - P.limit
  local _, first = sl_run(s, s.lo)
  for j = s.lo, s.hi do
    local e, _, b = sl_run(s, j)
    if cmp(sub(b, first), k) >= 0 then return "R", sub(add(e, P.w), t) end
  end
  return "R", U64MAX
end
function sl.settle(P, s, neg, d)
  local t = sl.expire(P, s)
  d = minb(d, P.limit)
  if not neg then
    sl.push(P, s, t, d)
    return
  end
  while d > 0 and s.hi >= s.lo do
    local _, a, b = sl_run(s, s.hi)
    local take = math.min(sub(b, a), d)
    s.B[s.hi], d = sub(b, take), d - take
    if cmp(s.B[s.hi], a) == 0 then
      s.hi = s.hi - 1
      if s.hi < s.keep then s.keep = s.hi end
    else
      s.dirty[s.hi] = true
    end
  end
end
function sl.standing(P, s)
  if s.hi < s.lo then return P.limit, ZERO end
  local newest = sl_run(s, s.hi)
  local t = maxb(now(), newest)
  local j = s.lo
  while j <= s.hi and cmp(sub(t, (sl_run(s, j))), P.w) >= 0 do j = j + 1 end
  if j > s.hi then return P.limit, ZERO end
  local held = sub(s.B[s.hi], s.A[j])
  return math.max(P.limit - held, 0), sub(add(newest, P.w), t)
end
function sl.fresh_in(P, s)
  if s.hi < s.lo then return ZERO end
  return satsub(add((sl_run(s, s.hi)), P.w), now())
end
