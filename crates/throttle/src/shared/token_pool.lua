-- tollgate: the token pool's steps in the throttler's script, spliced
-- into `decide.lua` at its `--@token_pool` line (`script.rs`), where the
-- other policies' steps and the limb library are in scope.

-- The token pool (`policy/token_pool.rs`): {a = the active level P,
-- w = the backlog W, c = the meter's carry, t = the time of the last
-- fill, d = debt}, all in tokens but t. Parameters: A (active pool), B
-- (burst headroom), cap (the backlog's cap) and the meter as num / den
-- tokens per nanosecond. Tokens are nanosecond-denominated: a key's
-- values reach 2^64, so every step computes on the limb library.
local tp = {}
function tp.fresh(P)
  return { a = add(P.A, P.B), w = P.cap, c = ZERO, t = now(), d = ZERO }
end
function tp.load(v)
  return { a = parse(v[1]), w = parse(v[2]), c = parse(v[3]), t = parse(v[4]), d = parse(v[5]) }
end
function tp.save(s)
  return { "a", str(s.a), "w", str(s.w), "c", str(s.c), "t", str(s.t), "d", str(s.d) }
end
function tp.fields() return { "a", "w", "c", "t", "d" } end

-- The tokens of `ns` nanoseconds, rounded down.
local function tp_floor(P, ns) return divq(mul(ns, P.num), P.den) end
-- The fewest nanoseconds whose tokens are at least `tokens`, saturating.
local function tp_ceil_ns(P, tokens)
  local ns = sat(divq(mul(tokens, P.den), P.num))
  if cmp(tp_floor(P, ns), tokens) >= 0 then return ns end
  return sat(add(ns, ONE))
end

-- The core's `Pool::fill` of `f` tokens, then `cap_waiting`.
local function tp_fill(P, s, f)
  local to_active = minb(f, satsub(P.A, s.a))
  s.a = add(s.a, to_active)
  s.w = add(s.w, sub(f, to_active))
  local allowed
  if cmp(f, P.A) >= 0 then
    allowed = P.B
  else
    allowed = divq(mul(f, P.B), P.A)
  end
  local burst = minb(minb(allowed, satsub(add(P.A, P.B), s.a)), s.w)
  s.w = sub(s.w, burst)
  s.a = add(s.a, burst)
  s.w = minb(s.w, P.cap)
end

-- Fills the state with the time since its last fill: the meter's
-- tokens, floor((elapsed num + carry) / den) with the remainder carried,
-- repay the debt first, the rest fill the pool.
function tp.advance(P, s)
  local t = now()
  if cmp(t, s.t) <= 0 then return end
  local scaled = add(mul(sub(t, s.t), P.num), s.c)
  s.t = t
  local tokens = divq(scaled, P.den)
  s.c = sub(scaled, mul(tokens, P.den))
  local repaid = minb(tokens, s.d)
  s.d = sub(s.d, repaid)
  tokens = sub(tokens, repaid)
  if cmp(tokens, ZERO) > 0 then tp_fill(P, s, tokens) end
end

-- Ops above this never fit in 63 bits of tokens (`MAX_OPS_PER_ACQUIRE`).
local TP_MAX_OPS = 8796093022207 -- 2^43 - 1

function tp.check(P, s, cost)
  tp.advance(P, s)
  if cmp(cost, TP_MAX_OPS) > 0 then return "R", U64MAX end
  local need = mul(cost, TPO)
  if cmp(need, add(P.A, P.B)) > 0 then return "R", U64MAX end
  if cmp(s.a, need) >= 0 then
    s.a = sub(s.a, need)
    return "A", divq(s.a, TPO)
  end
  -- Within A: when the direct fill alone covers it; above A: one fill
  -- long enough to move the whole burst headroom.
  local tokens
  if cmp(need, P.A) <= 0 then
    tokens = sub(need, s.a)
  else
    tokens = maxb(P.A, add(sub(P.A, minb(s.a, P.A)), P.B))
  end
  return "R", tp_ceil_ns(P, add(tokens, s.d))
end

function tp.settle(P, s, neg, delta)
  tp.advance(P, s)
  local tokens = sat(mul(delta, TPO))
  if not neg then
    local taken = minb(tokens, s.a)
    s.a = sub(s.a, taken)
    s.d = sat(add(s.d, sub(tokens, taken)))
  else
    local repaid = minb(tokens, s.d)
    s.d = sub(s.d, repaid)
    s.a = minb(sat(add(s.a, sub(tokens, repaid))), add(P.A, P.B))
  end
end

function tp.standing(P, s0)
  local s = copy(s0)
  tp.advance(P, s)
  local remaining = ZERO
  if cmp(s.d, ZERO) == 0 then remaining = divq(s.a, TPO) end
  return remaining, tp_ceil_ns(P, add(satsub(add(P.A, P.B), s.a), s.d))
end

-- The nanoseconds from now until the key decides like a fresh one: until
-- one fill repays the debt and brings the pool to A + B and the backlog
-- to its cap. With f0 the tokens missing from both, a fill of f >= f0
-- does it once it also moves the burst headroom left after the direct
-- fill: any f >= A when P < A (below A the burst moved is under B), and
-- f >= ceil((A + B - P) A / B) when P >= A.
function tp.fresh_in(P, s)
  local top = add(P.A, P.B)
  local f = add(satsub(top, s.a), satsub(P.cap, s.w))
  if cmp(P.B, ZERO) > 0 then
    if cmp(s.a, P.A) < 0 then
      f = maxb(f, P.A)
    else
      local h = sub(top, s.a)
      f = maxb(f, divq(sub(add(mul(h, P.A), P.B), ONE), P.B))
    end
  end
  local need = add(f, s.d)
  if cmp(need, ZERO) == 0 then return satsub(s.t, now()) end
  -- The fewest ns e with floor((e num + carry) / den) >= need.
  local x = sub(mul(need, P.den), s.c)
  local e = divq(sub(add(x, P.num), ONE), P.num)
  return satsub(sat(add(s.t, e)), now())
end
