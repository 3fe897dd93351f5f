//! The Lua script's arguments and answers: a limit as the script's
//! parameters, the items of one call, and the verdicts it returns.
//!
//! # Implementation notes
//!
//! Every number crosses as decimal text: the script computes on doubles
//! below 2^48 and on 24-bit limbs above (Redis' Lua numbers are doubles),
//! so it takes and gives back exact integers of any size. A GCRA's meter crosses as the reduced
//! fraction the core's `Meter` holds (`whole + fraction / den` tokens per
//! nanosecond), computed here the same way; a token pool's as one
//! fraction, `(whole * den + fraction) / den`, which meters the same
//! tokens and carries the same remainder.

use crate::policy::{Standing, Verdict};
use crate::rules::Limit;

use super::StoreError;

/// The one script every decision runs.
pub(crate) const SOURCE: &str = include_str!("decide.lua");

/// The sliding log's steps, spliced into [`SOURCE`] at its
/// `--@sliding_log` line (kept apart to keep each file short).
const SLIDING_LOG: &str = include_str!("sliding_log.lua");

/// The token pool's steps, spliced into [`SOURCE`] at its `--@token_pool`
/// line.
const TOKEN_POOL: &str = include_str!("token_pool.lua");

/// The GCRA's fast step, spliced into [`SOURCE`] at its `--@gcra_fast`
/// line.
const GCRA_FAST: &str = include_str!("gcra_fast.lua");

/// The token pool's fast step, spliced into [`SOURCE`] at its
/// `--@token_pool_fast` line.
const TOKEN_POOL_FAST: &str = include_str!("token_pool_fast.lua");

/// The whole script: [`SOURCE`] with the GCRA's and the token pool's
/// fast steps, the sliding log's and the token pool's steps and the
/// service kit's limb library spliced in.
pub(crate) fn source() -> String {
    let policies = SOURCE
        .replacen("--@gcra_fast\n", GCRA_FAST, 1)
        .replacen("--@token_pool_fast\n", TOKEN_POOL_FAST, 1)
        .replacen("--@sliding_log\n", SLIDING_LOG, 1)
        .replacen("--@token_pool\n", TOKEN_POOL, 1);
    tollgate_service::redis_link::with_limbs(&policies)
}

/// A limit as the script's kind, its five parameters and the text that
/// tells it from another limit in a key's name.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) kind: &'static str,
    pub(crate) args: [String; 5],
    pub(crate) id: String,
    /// The limit itself, whose policy decides as the script does.
    pub(crate) limit: Limit,
    /// A rule's ban: a rejection bans the key for this long after the
    /// limit would admit it again. Sent after the kind, as
    /// `KIND!BAN_NS`.
    pub(crate) ban_ns: Option<u64>,
}

impl Params {
    /// The script's parameters for `limit`.
    ///
    /// # Errors
    ///
    /// None today: every limit has its parameters (the `Result` is for a
    /// limit the store could not keep).
    pub(crate) fn of(limit: &Limit) -> Result<Params, StoreError> {
        let dash = || String::from("-");
        match limit {
            Limit::FixedWindow(p) => Ok(Params {
                kind: "fw",
                args: [
                    p.limit.to_string(),
                    p.window_ns.to_string(),
                    dash(),
                    dash(),
                    dash(),
                ],
                id: format!("fw:{}:{}", p.limit, p.window_ns),
                limit: limit.clone(),
                ban_ns: None,
            }),
            Limit::SlidingWindowCounter(p) => Ok(Params {
                kind: "swc",
                args: [
                    p.limit.to_string(),
                    p.window_ns.to_string(),
                    dash(),
                    dash(),
                    dash(),
                ],
                id: format!("swc:{}:{}", p.limit, p.window_ns),
                limit: limit.clone(),
                ban_ns: None,
            }),
            Limit::Gcra(p) => {
                let (whole, fraction, den) = meter(p.nano_ops_per_sec);
                Ok(Params {
                    kind: "gcra",
                    args: [
                        p.burst.to_string(),
                        p.queue.to_string(),
                        whole.to_string(),
                        fraction.to_string(),
                        den.to_string(),
                    ],
                    id: format!("gcra:{}:{}:{}", p.nano_ops_per_sec, p.burst, p.queue),
                    limit: limit.clone(),
                    ban_ns: None,
                })
            }
            Limit::TokenPool(p) => {
                let (nano_ops_per_sec, sizing, backlog_cap) = p.script_parts();
                let (whole, fraction, den) = meter(nano_ops_per_sec);
                Ok(Params {
                    kind: "tp",
                    args: [
                        sizing.active.to_string(),
                        sizing.burst.to_string(),
                        backlog_cap.to_string(),
                        (whole * den + fraction).to_string(),
                        den.to_string(),
                    ],
                    id: format!(
                        "tp:{nano_ops_per_sec}:{}:{}:{backlog_cap}",
                        sizing.active, sizing.burst
                    ),
                    limit: limit.clone(),
                    ban_ns: None,
                })
            }
            Limit::SlidingLog(p) => Ok(Params {
                kind: "sl",
                args: [
                    p.limit.to_string(),
                    p.window_ns.to_string(),
                    String::from(if p.log_rejected { "1" } else { "0" }),
                    dash(),
                    dash(),
                ],
                id: format!(
                    "sl:{}:{}:{}",
                    p.limit,
                    p.window_ns,
                    if p.log_rejected { "r" } else { "a" }
                ),
                limit: limit.clone(),
                ban_ns: None,
            }),
        }
    }
}

impl Params {
    /// These parameters under a rule that bans for `ban` (see
    /// [`Rule::ban`](crate::Rule::ban)).
    pub(crate) fn with_ban(mut self, ban: Option<std::time::Duration>) -> Params {
        self.ban_ns = ban.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// The kind as sent: with the ban, if any.
    fn kind_arg(&self) -> std::borrow::Cow<'static, str> {
        match self.ban_ns {
            None => self.kind.into(),
            Some(ban) => format!("{}!{ban}", self.kind).into(),
        }
    }
}

/// The core meter's exact rate for `nano_ops_per_sec` (> 0): tokens per
/// nanosecond as `(whole, fraction, den)`.
fn meter(nano_ops_per_sec: u128) -> (u128, u128, u128) {
    tollgate::pool::Meter::new(nano_ops_per_sec).parts()
}

/// What one item of a call is to its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// An enforced hard limit: its rejection rejects the request.
    Hard,
    /// A shadow rule's hard limit: decided, never rejecting.
    Shadow,
    /// The soft limit of the item before it, decided if that one admitted.
    Soft,
}

impl Role {
    fn code(self) -> &'static str {
        match self {
            Role::Hard => "H",
            Role::Shadow => "S",
            Role::Soft => "s",
        }
    }
}

/// One limit on one key in a call.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) key: String,
    pub(crate) params: Params,
    pub(crate) role: Role,
    /// The cost (a check) or the signed delta (a settlement).
    pub(crate) amount: i128,
    /// In a check, the most an admitted enforced item takes (0: its cost
    /// only); in a give, the window index its tokens were taken in.
    pub(crate) slice: u64,
    /// How long this replica may spend a slice (not sent to Redis).
    pub(crate) slice_ns: u64,
}

/// What the script decided for one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// `None`: not decided (an earlier rule rejected, or the soft limit of
    /// a hard limit that rejected).
    pub(crate) verdict: Option<Verdict>,
    pub(crate) standing: Standing,
    /// The tokens an admitted item took for its slice, its cost included
    /// (0: no slice).
    pub(crate) taken: u64,
    /// Rejected because its key was banned: the policy was not consulted.
    pub(crate) banned: bool,
    /// This rejection started a ban of its key.
    pub(crate) ban_started: bool,
}

/// The nine arguments of each of `items`, in order, onto `invocation`
/// (after its op, time and count: `check`, `standing`, `settle` or
/// `give`; the time in nanoseconds, or "" for Redis' `TIME`).
pub(crate) fn push_args(invocation: &mut redis::ScriptInvocation<'_>, items: &[Item]) {
    for item in items {
        invocation
            .arg(item.params.kind_arg().as_ref())
            .arg(item.role.code());
        match i64::try_from(item.amount) {
            Ok(amount) => invocation.arg(amount),
            Err(_) => invocation.arg(item.amount.to_string()),
        };
        for arg in &item.params.args {
            invocation.arg(arg.as_str());
        }
        invocation.arg(item.slice);
    }
}

/// The nine arguments of each of `items`, in order.
pub(crate) fn push_items(args: &mut Vec<String>, items: &[Item]) {
    for item in items {
        args.push(item.params.kind_arg().into_owned());
        args.push(item.role.code().to_owned());
        args.push(item.amount.to_string());
        args.extend(item.params.args.iter().cloned());
        args.push(item.slice.to_string());
    }
}

fn number(s: &str) -> Result<u64, StoreError> {
    s.parse().map_err(|_| {
        StoreError::Redis((format!("the script answered \"{s}\", not a number")).into())
    })
}

/// What one script call answered.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The time it decided at.
    pub(crate) now: u64,
    /// One answer per item.
    pub(crate) answers: Vec<Answer>,
    /// The first item's stored fields, when a check rejected it for a cost
    /// it could ever pay ("0" after the last field).
    pub(crate) state: Option<[String; 3]>,
}

/// The script's answer: the time it decided at, one answer per item and
/// the first item's state if it was rejected.
pub(crate) fn answers(reply: &[String], items: usize) -> Result<Reply, StoreError> {
    let now = number(reply.first().map_or("", String::as_str))?;
    let (one, end) = request(reply, 1, items, now)?;
    if end != reply.len() {
        return Err(StoreError::Redis(
            (format!(
                "the script answered {} values for {items} items",
                reply.len()
            ))
            .into(),
        ));
    }
    Ok(one)
}

/// The answers of a `batch` call, one reply per request of `items[k]`
/// items each, in order.
pub(crate) fn batch_answers(reply: &[String], items: &[usize]) -> Result<Vec<Reply>, StoreError> {
    let now = number(reply.first().map_or("", String::as_str))?;
    let mut at = 1;
    let mut out = Vec::with_capacity(items.len());
    for &n in items {
        let (one, end) = request(reply, at, n, now)?;
        out.push(one);
        at = end;
    }
    if at != reply.len() {
        return Err(StoreError::Redis(
            (format!(
                "the script answered {} values for {} requests",
                reply.len(),
                items.len()
            ))
            .into(),
        ));
    }
    Ok(out)
}

/// One request's answers in `reply` from `at`: `items` answers of four
/// values, then, if the next value is "S", that key's three stored fields.
/// Returns the reply and where the next request's answers begin.
fn request(
    reply: &[String],
    at: usize,
    items: usize,
    now: u64,
) -> Result<(Reply, usize), StoreError> {
    let end = at + 4 * items;
    let Some(values) = reply.get(at..end) else {
        return Err(StoreError::Redis(
            (format!(
                "the script answered {} values for {items} items",
                reply.len()
            ))
            .into(),
        ));
    };
    let mut out = Vec::with_capacity(items);
    for chunk in values.chunks(4) {
        let value = number(&chunk[1])?;
        let mut taken = 0;
        let (banned, ban_started) = (chunk[0] == "B", chunk[0] == "X");
        let verdict = match chunk[0].as_str() {
            "A" => Some(Verdict::Admit { remaining: value }),
            t if t.starts_with('T') => {
                taken = number(&t[1..])?;
                Some(Verdict::Admit { remaining: value })
            }
            "D" => Some(Verdict::Delay { delay_ns: value }),
            "R" | "B" | "X" => Some(Verdict::Reject {
                retry_after_ns: value,
            }),
            "-" => None,
            other => {
                return Err(StoreError::Redis(
                    (format!("the script answered the verdict \"{other}\"")).into(),
                ))
            }
        };
        out.push(Answer {
            verdict,
            standing: Standing {
                remaining: number(&chunk[2])?,
                reset_ns: number(&chunk[3])?,
            },
            taken,
            banned,
            ban_started,
        });
    }
    let (state, end) = match reply.get(end..end + 4) {
        Some([s, a, b, c]) if s == "S" => (Some([a.clone(), b.clone(), c.clone()]), end + 4),
        _ => (None, end),
    };
    Ok((
        Reply {
            now,
            answers: out,
            state,
        },
        end,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::pool::Meter;

    #[test]
    fn the_limb_library_comes_once_after_the_fast_path() {
        let source = tollgate_service::redis_link::with_limbs(SOURCE);
        assert_eq!(SOURCE.matches("--@limbs\n").count(), 1);
        assert_eq!(source.matches("local function divq(").count(), 1);
        let fast_path_end = source
            .find("local r = fast(ARGV[1], 3, KEYS[1])")
            .expect("the fast path's single check");
        let library = source.find("local function limbs(").expect("the library");
        assert!(fast_path_end < library);
    }

    #[test]
    fn the_policies_steps_are_spliced_in_once() {
        let source = source();
        assert_eq!(source.matches("function sl.check(").count(), 1);
        assert_eq!(source.matches("function tp.check(").count(), 1);
        assert!(!source.lines().any(|l| l.starts_with("--@")));
        // Defined before the table of policies that names them.
        let table = source.find("local policies = {").expect("the table");
        assert!(source.find("local tp = {}").expect("the token pool") < table);
    }

    #[test]
    fn a_token_pools_meter_as_one_fraction_carries_as_the_core_does() {
        for nano in [
            1_000_000u128,
            5_000_000_000,
            123_456_789_000,
            10_000_000 * 1_000_000_000,
            1_000_000_000_000 * 1_000_000_000,
        ] {
            let (whole, fraction, den) = meter(nano);
            let num = whole * den + fraction;
            let core = Meter::new(nano);
            // The script's step: floor((ns num + carry) / den), the
            // remainder carried.
            let (mut carry, mut core_carry) = (0u128, 0u128);
            for ns in [1u64, 999, 7, 1_000_000_007, u64::MAX / 3, 0, 12_345] {
                let scaled = u128::from(ns) * num + carry;
                carry = scaled % den;
                assert_eq!(
                    scaled / den,
                    core.tokens_for(ns, &mut core_carry),
                    "{nano} at {ns}"
                );
                assert_eq!(carry, core_carry, "{nano} at {ns}");
            }
        }
    }

    #[test]
    fn the_meter_crosses_as_the_cores_exact_fraction() {
        for nano in [
            1_000_000u128,
            10_000_000_000,
            7_000_000_001,
            300_000_000 * 1_000_000_000,
        ] {
            let (whole, fraction, den) = meter(nano);
            let core = Meter::new(nano);
            for ns in [0u64, 1, 999, 1_000_000_007, u64::MAX / 3] {
                let ns128 = u128::from(ns);
                assert_eq!(
                    ns128 * whole + ns128 * fraction / den,
                    core.tokens_floor(ns),
                    "{nano} at {ns}"
                );
            }
        }
    }
}
