-- tollgate: natural numbers of any size in Redis' Lua, whose numbers are
-- doubles, exact only below 2^53. Shared by the throttler's and the quota
-- service's scripts (`decide.lua`, `reserve.lua`), which carry it in place
-- of their marker line; see `tollgate_service::redis_link::LIMBS`.

local B = 16777216 -- 2^24
local SMALL = 281474976710656 -- 2^48
local EXACT = 9007199254740992 -- 2^53

-- A natural number below 2^48 is a Lua number; from 2^48 on it is a table
-- of 24-bit limbs (at least three, the top one nonzero). Each operation
-- computes on doubles when its operands are numbers and its result is
-- exact, and on limbs otherwise.

-- The limbs of an integer double.
local function limbs(x)
  local a, n = {}, 0
  while x > 0 do
    local l = x % B
    n = n + 1
    a[n] = l
    x = (x - l) / B
  end
  return a
end

-- The number that limbs `a` hold, in its form above.
local function canon(a)
  local n = #a
  while n > 0 and a[n] == 0 do
    a[n] = nil
    n = n - 1
  end
  if n <= 2 then return (a[1] or 0) + (a[2] or 0) * B end
  return a
end

-- An integer double below 2^53 in the form above.
local function num(x)
  if x < SMALL then return x end
  return limbs(x)
end

local function big(a)
  if type(a) == "number" then return limbs(a) end
  return a
end

local function tod(a)
  if type(a) == "number" then return a end
  local x = 0
  for k = #a, 1, -1 do x = x * B + a[k] end
  return x
end

local function parse(s)
  if #s <= 15 then
    -- Below 10^15 < 2^53: exact as a double.
    return num(tonumber(s))
  end
  local a = {}
  local len = #s
  local pos, chunk = 1, len % 6
  if chunk == 0 then chunk = 6 end
  while pos <= len do
    local carry = tonumber(string.sub(s, pos, pos + chunk - 1))
    local m = 10 ^ chunk
    for k = 1, #a do
      local t = a[k] * m + carry
      carry = math.floor(t / B)
      a[k] = t - carry * B
    end
    while carry > 0 do
      local l = carry % B
      a[#a + 1] = l
      carry = (carry - l) / B
    end
    pos = pos + chunk
    chunk = 6
  end
  return canon(a)
end

-- Limbs `a` divided by a small d: the quotient's limbs and the remainder.
local function divsmall(a, d)
  local q, r = {}, 0
  for k = #a, 1, -1 do
    local t = r * B + a[k]
    local qk = math.floor(t / d)
    q[k] = qk
    r = t - qk * d
  end
  local n = #q
  while n > 0 and q[n] == 0 do
    q[n] = nil
    n = n - 1
  end
  return q, r
end

local function str(a)
  if type(a) == "number" then return string.format("%.0f", a) end
  local parts, r = {}, 0
  while #a > 0 do
    a, r = divsmall(a, 1000000)
    parts[#parts + 1] = r
  end
  local s = string.format("%d", parts[#parts])
  for k = #parts - 1, 1, -1 do
    s = s .. string.format("%06d", parts[k])
  end
  return s
end

local function cmp(a, b)
  local na, nb = type(a) == "number", type(b) == "number"
  if na and nb then
    if a == b then return 0 end
    return a < b and -1 or 1
  end
  if na then return -1 end
  if nb then return 1 end
  if #a ~= #b then return #a < #b and -1 or 1 end
  for k = #a, 1, -1 do
    if a[k] ~= b[k] then return a[k] < b[k] and -1 or 1 end
  end
  return 0
end

local function add(a, b)
  if type(a) == "number" and type(b) == "number" then
    -- Below 2^49: exact.
    return num(a + b)
  end
  a, b = big(a), big(b)
  local r, c = {}, 0
  local n = math.max(#a, #b)
  for k = 1, n do
    local t = (a[k] or 0) + (b[k] or 0) + c
    if t >= B then r[k], c = t - B, 1 else r[k], c = t, 0 end
  end
  if c > 0 then r[n + 1] = c end
  return canon(r)
end

-- a - b, for a >= b.
local function sub(a, b)
  if type(a) == "number" then return a - b end
  b = big(b)
  local r, c = {}, 0
  for k = 1, #a do
    local t = a[k] - (b[k] or 0) - c
    if t < 0 then r[k], c = t + B, 1 else r[k], c = t, 0 end
  end
  return canon(r)
end

local function mul(a, b)
  if type(a) == "number" and type(b) == "number" then
    -- A product below 2^53 is exact; one above it rounds to 2^53 or more.
    local x = a * b
    if x < EXACT then return num(x) end
  end
  if a == 0 or b == 0 then return 0 end
  a, b = big(a), big(b)
  local r = {}
  for k = 1, #a + #b do r[k] = 0 end
  for i = 1, #a do
    local c, ai = 0, a[i]
    for j = 1, #b do
      local t = r[i + j - 1] + ai * b[j] + c
      c = math.floor(t / B)
      r[i + j - 1] = t - c * B
    end
    local k = i + #b
    while c > 0 do
      local t = r[k] + c
      c = math.floor(t / B)
      r[k] = t - c * B
      k = k + 1
    end
  end
  return canon(r)
end

-- floor(a / b) for b > 0: a quotient estimated in doubles, kept below the
-- true one (the margin 2^-40 exceeds the estimate's rounding), subtracted,
-- and again on the remainder until it is below b.
local function divq(a, b)
  if type(a) == "number" then
    -- Below 2^48 the quotient of doubles rounds to no integer above the
    -- true one, so its floor is exact.
    if type(b) ~= "number" then return 0 end
    return math.floor(a / b)
  end
  local q, r = 0, a
  while cmp(r, b) >= 0 do
    local qe = math.floor(tod(r) / tod(b) * (1 - 2 ^ -40))
    if qe < 1 then qe = 1 end
    local qb = qe < SMALL and qe or limbs(qe)
    r = sub(r, mul(qb, b))
    q = add(q, qb)
  end
  return q
end
