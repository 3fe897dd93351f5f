//! Shell-style globs for resource template identifiers.
//!
//! # Implementation notes
//!
//! The syntax is Go's `path.Match`, which Doorman uses: `*` matches any run of
//! characters other than `/`, `?` matches one character other than `/`,
//! `[abc]`, `[a-z]` and `[^a-z]` match one character from (or not from) a
//! class, and `\` escapes the next character. (One exception lives in
//! [`ServerConfig::find`](super::config::ServerConfig::find), not here: the catch-all
//! template `*` matches every id, `/` included.) A pattern is parsed once into
//! tokens, so a malformed pattern is rejected when the configuration loads,
//! never while serving.
//!
//! Matching runs the tokens over the set of reachable positions in the name
//! (a small NFA simulation): `O(tokens × name length)` with no backtracking,
//! so no pattern or id can make it blow up. A name of fewer than 128
//! characters (every id the server accepts by default) keeps the set in
//! the bits of one `u128`, so matching allocates nothing: the server
//! matches each resource id of each request.

use std::fmt;

/// A parsed glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `?`: one character other than `/`.
    One,
    /// `*`: any run of characters other than `/`.
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A glob pattern that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobError {
    reason: &'static str,
}

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed glob: {}", self.reason)
    }
}

impl std::error::Error for GlobError {}

impl Glob {
    /// Parses `pattern`.
    ///
    /// # Errors
    ///
    /// Returns an error for a trailing `\`, an unclosed or empty `[` class or
    /// a reversed range such as `[z-a]`.
    pub fn new(pattern: &str) -> Result<Self, GlobError> {
        let mut tokens = Vec::new();
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let token = match c {
                '*' => {
                    if tokens.last() == Some(&Token::Star) {
                        continue;
                    }
                    Token::Star
                }
                '?' => Token::One,
                '\\' => Token::Literal(chars.next().ok_or(GlobError {
                    reason: "trailing backslash",
                })?),
                '[' => parse_class(&mut chars)?,
                c => Token::Literal(c),
            };
            tokens.push(token);
        }
        Ok(Glob {
            pattern: pattern.to_owned(),
            tokens,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        if let [Token::Star] = self.tokens[..] {
            return !name.contains('/');
        }
        match name.chars().count() {
            n if n < 128 => self.matches_short(name, n),
            _ => self.matches_long(name),
        }
    }

    /// [`matches`](Self::matches) for a name of `n < 128` characters: bit
    /// `i` of the set is the position after `i` characters.
    fn matches_short(&self, name: &str, n: usize) -> bool {
        let mut reachable: u128 = 1;
        for token in &self.tokens {
            let mut next: u128 = 0;
            if *token == Token::Star {
                let mut active = false;
                let mut chars = name.chars();
                for i in 0..=n {
                    active |= reachable >> i & 1 == 1;
                    next |= u128::from(active) << i;
                    if chars.next() == Some('/') {
                        active = false;
                    }
                }
            } else {
                for (i, c) in name.chars().enumerate() {
                    if reachable >> i & 1 == 1 && token.matches_one(c) {
                        next |= 1 << (i + 1);
                    }
                }
            }
            if next == 0 {
                return false;
            }
            reachable = next;
        }
        reachable >> n & 1 == 1
    }

    /// [`matches`](Self::matches) for a name of any length.
    fn matches_long(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        let mut reachable = vec![false; name.len() + 1];
        reachable[0] = true;
        let mut next = vec![false; name.len() + 1];
        for token in &self.tokens {
            next.fill(false);
            let mut any = false;
            if *token == Token::Star {
                let mut active = false;
                for i in 0..=name.len() {
                    active |= reachable[i];
                    next[i] = active;
                    if i < name.len() && name[i] == '/' {
                        active = false;
                    }
                }
            } else {
                for i in 0..name.len() {
                    if reachable[i] && token.matches_one(name[i]) {
                        next[i + 1] = true;
                    }
                }
            }
            for (i, &r) in next.iter().enumerate() {
                any |= r;
                reachable[i] = r;
            }
            if !any {
                return false;
            }
        }
        reachable[name.len()]
    }
}

impl Token {
    fn matches_one(&self, c: char) -> bool {
        match self {
            Token::Literal(l) => *l == c,
            Token::One => c != '/',
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
            Token::Star => unreachable!("stars are handled by Glob::matches"),
        }
    }
}

fn parse_class(chars: &mut std::str::Chars<'_>) -> Result<Token, GlobError> {
    const UNCLOSED: GlobError = GlobError {
        reason: "unclosed character class",
    };
    let mut negated = false;
    let mut ranges = Vec::new();
    let mut rest = chars.clone().peekable();
    if rest.peek() == Some(&'^') {
        negated = true;
        chars.next();
    }
    loop {
        let mut lo = chars.next().ok_or(UNCLOSED)?;
        if lo == ']' {
            if ranges.is_empty() {
                return Err(GlobError {
                    reason: "empty character class",
                });
            }
            return Ok(Token::Class { negated, ranges });
        }
        if lo == '\\' {
            lo = chars.next().ok_or(UNCLOSED)?;
        }
        let mut hi = lo;
        if chars.clone().next() == Some('-') {
            chars.next();
            hi = chars.next().ok_or(UNCLOSED)?;
            if hi == '\\' {
                hi = chars.next().ok_or(UNCLOSED)?;
            } else if hi == ']' {
                return Err(GlobError {
                    reason: "unfinished range in character class",
                });
            }
            if hi < lo {
                return Err(GlobError {
                    reason: "reversed range in character class",
                });
            }
        }
        ranges.push((lo, hi));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, n: &str) -> bool {
        Glob::new(p).unwrap().matches(n)
    }

    #[test]
    fn star_does_not_cross_slash() {
        assert!(m("*", "abc"));
        assert!(m("*", ""));
        assert!(!m("*", "a/b"));
        assert!(m("*/*", "a/b"));
        assert!(m("a*c", "abbbc"));
        assert!(!m("a*c", "ab/bc"));
        assert!(m("db-*", "db-🦀"));
    }

    #[test]
    fn single_and_classes() {
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "a/c"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[^a-c]x", "bx"));
        assert!(m("[^a-c]x", "dx"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("fair", "fair"));
        assert!(!m("fair", "fai"));
    }

    #[test]
    fn malformed_patterns_are_rejected() {
        for bad in ["[", "[a", "[]", "a\\", "[z-a]", "[a-]"] {
            assert!(Glob::new(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    proptest::proptest! {
        /// Short names (one `u128` of positions) match exactly as the
        /// general simulation does, over an alphabet that makes matches
        /// and near misses common.
        #[test]
        fn short_and_long_matching_agree(
            pattern in "[ab/*?]{0,8}|[ab]{0,2}\\[\\^?a-b\\][ab*/]{0,4}",
            name in "[ab/]{0,12}",
        ) {
            let glob = Glob::new(&pattern).unwrap();
            let n = name.chars().count();
            proptest::prop_assert_eq!(glob.matches_short(&name, n), glob.matches_long(&name));
            proptest::prop_assert_eq!(glob.matches(&name), glob.matches_long(&name));
        }
    }

    #[test]
    fn names_of_127_and_128_characters_take_either_path_alike() {
        for n in [126, 127, 128, 129] {
            let name = "a".repeat(n - 1) + "b";
            assert!(m("a*b", &name), "{n}");
            assert!(m("*?", &name), "{n}");
            assert!(!m("*a", &name), "{n}");
            assert!(!m("*/*", &name), "{n}");
        }
        assert!(!m("*", &("a".repeat(200) + "/")));
    }

    #[test]
    fn many_stars_stay_linear() {
        let p = "*a".repeat(50);
        let name = "a".repeat(1000) + "b";
        assert!(!m(&p, &name));
    }
}
