//! Tests of the spec grammar, the error messages and the exact decimals.

use std::error::Error;

use super::*;
use proptest::prelude::*;

fn parse(s: &str) -> RateSpec {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn err(s: &str) -> String {
    match s.parse::<RateSpec>() {
        Ok(spec) => panic!("{s:?} should not parse, got {spec:?}"),
        Err(e) => e.to_string(),
    }
}

fn spec(nano: u128, ppm: u64, verb: Verb) -> RateSpec {
    RateSpec { nano, ppm, verb }
}

const E9: u128 = 1_000_000_000;

#[test]
fn spec_examples_parse() {
    assert_eq!(parse("200"), spec(200 * E9, 1_100_000, Verb::Start));
    assert_eq!(parse("3.6,2"), spec(3_600_000_000, 2_000_000, Verb::Start));
    assert_eq!(
        parse("1000,1.05,restart"),
        spec(1000 * E9, 1_050_000, Verb::Restart)
    );
    assert_eq!(
        parse("10M,1.1"),
        spec(10_000_000 * E9, 1_100_000, Verb::Start)
    );
}

#[test]
fn rate_forms() {
    let cases: &[(&str, u128)] = &[
        ("12000", 12_000 * E9),
        ("1.5K", 1_500 * E9),
        ("10M", 10_000_000 * E9),
        ("1E6", 1_000_000 * E9),
        ("2.5e-3", 2_500_000),
        ("0.5", 500_000_000),
        ("10K/s", 10_000 * E9),
        ("10k/S", 10_000 * E9),
        ("100/s", 100 * E9),
        ("2g", 2_000_000_000 * E9),
        ("2B", 2_000_000_000 * E9),
        ("1T", 1_000_000_000_000 * E9),
        ("1e3K", 1_000_000 * E9),
        ("+5", 5 * E9),
        ("5.", 5 * E9),
        (".5", 500_000_000),
        ("1e+3", 1_000 * E9),
        ("0.001", 1_000_000),
        ("1e-3", 1_000_000),
        ("1e12", 1_000_000_000_000 * E9),
        ("0.000001M", E9),
    ];
    for &(text, nano) in cases {
        assert_eq!(parse(text).nano_ops_per_sec(), nano, "{text}");
    }
}

#[test]
fn decimals_are_exact() {
    assert_eq!(parse("0.1").nano_ops_per_sec(), 100_000_000);
    assert_eq!(parse("1.5K").nano_ops_per_sec(), 1_500_000_000_000);
    assert_eq!(
        parse("333333.333333333").nano_ops_per_sec(),
        333_333_333_333_333
    );
    assert_eq!(parse("1.000000001").nano_ops_per_sec(), 1_000_000_001);
    assert_eq!(
        parse("999999999999.999999999").nano_ops_per_sec(),
        10u128.pow(21) - 1
    );
    // Zeros beyond the resolution are not extra precision.
    assert_eq!(
        parse("0.1000000000000000000000000000000000000000000").nano_ops_per_sec(),
        100_000_000
    );
    let padded = format!("{}7", "0".repeat(60));
    assert_eq!(parse(&padded).nano_ops_per_sec(), 7 * E9);
    assert_eq!(parse("100,1.000001").burst_ppm(), 1_000_001);
    assert_eq!(parse("100,1000").burst_ppm(), 1_000_000_000);
    assert_eq!(parse("100,1e1").burst_ppm(), 10_000_000);
}

#[test]
fn separators_whitespace_and_verb_position() {
    let want = spec(10_000 * E9, 2_000_000, Verb::Configure);
    assert_eq!(parse(" 10K : 2 ; configure "), want);
    assert_eq!(parse("10K;2,CONFIGURE"), want);
    assert_eq!(parse("10K\t,\n2:Configure"), want);
    assert_eq!(
        parse("100,restart"),
        spec(100 * E9, 1_100_000, Verb::Restart)
    );
    assert_eq!(parse("100 : Start"), spec(100 * E9, 1_100_000, Verb::Start));
}

#[test]
fn display_is_canonical() {
    let cases = [
        ("10M", "10M,1.1"),
        ("1500", "1.5K,1.1"),
        ("0.001", "0.001,1.1"),
        ("333333.333333333", "333333.333333333,1.1"),
        ("200,2", "200,2"),
        ("1000,1.05,restart", "1K,1.05,restart"),
        ("1000 ; 1.05 ; start", "1K,1.05"),
        ("12000,1.5,configure", "12K,1.5,configure"),
        ("1e12", "1T,1.1"),
        ("1e9", "1G,1.1"),
        ("1B", "1G,1.1"),
        ("2500000", "2.5M,1.1"),
        ("1234", "1234,1.1"),
        ("123456", "123456,1.1"),
        ("0.5", "0.5,1.1"),
        ("100K", "100K,1.1"),
        ("100000000", "100M,1.1"),
        ("3.6,2", "3.6,2"),
        ("100,1.000001", "100,1.000001"),
        ("100,1000", "100,1000"),
    ];
    for (input, shown) in cases {
        assert_eq!(parse(input).to_string(), shown, "{input}");
        assert_eq!(parse(shown), parse(input), "{shown}");
    }
}

#[test]
fn accessors() {
    let s = parse("3.6,2,configure");
    assert_eq!(s.ops_per_sec(), 3.6);
    assert_eq!(s.burst_ratio(), 2.0);
    assert_eq!(s.verb(), Verb::Configure);
    assert_eq!(parse("200").burst_ratio(), RateSpec::DEFAULT_BURST_RATIO);
    assert_eq!(parse("200").verb(), Verb::Start);
}

#[test]
fn same_schedule_ignores_only_the_verb() {
    let base = parse("100");
    assert!(base.same_schedule(&parse("100,1.1,configure")));
    assert!(base.same_schedule(&parse("0.1K:restart")));
    assert_ne!(base, parse("100,restart"));
    assert!(!base.same_schedule(&parse("100,1.2")));
    assert!(!base.same_schedule(&parse("100.000000001")));
    assert!(base.same_schedule(&RateSpec::new(100.0).unwrap()));
}

#[test]
fn verbs() {
    assert_eq!(Verb::default(), Verb::Start);
    for (text, verb) in [
        ("configure", Verb::Configure),
        ("START", Verb::Start),
        ("ReStArT", Verb::Restart),
    ] {
        assert_eq!(text.parse::<Verb>(), Ok(verb));
        assert_eq!(verb.to_string(), text.to_ascii_lowercase());
    }
    assert_eq!(
        "go".parse::<Verb>().unwrap_err().to_string(),
        "unknown verb \"go\": expected configure, start or restart"
    );
}

#[test]
fn constructors() {
    assert_eq!(RateSpec::new(0.1).unwrap(), parse("0.1"));
    assert_eq!(RateSpec::new(1500.0).unwrap(), parse("1.5K"));
    assert_eq!(RateSpec::new(0.001).unwrap().nano_ops_per_sec(), 1_000_000);
    assert_eq!(
        RateSpec::new(1e12).unwrap().nano_ops_per_sec(),
        10u128.pow(21)
    );
    assert_eq!(
        RateSpec::new(1.0 / 3.0).unwrap().nano_ops_per_sec(),
        333_333_333
    );
    // Rounded to the nearest nano-op/s, not truncated.
    assert_eq!(
        RateSpec::new(1.0000000006).unwrap().nano_ops_per_sec(),
        1_000_000_001
    );
    let s = RateSpec::new(100.0)
        .unwrap()
        .with_burst_ratio(1.05)
        .unwrap()
        .with_verb(Verb::Restart);
    assert_eq!(s, parse("100,1.05,restart"));
    assert_eq!(s.with_burst_ratio(1.0).unwrap().burst_ppm(), 1_000_000);
    assert_eq!(
        s.with_burst_ratio(1000.0).unwrap().burst_ppm(),
        1_000_000_000
    );
    assert_eq!(
        s.with_burst_ratio(1.0000004).unwrap().burst_ppm(),
        1_000_000
    );
    assert_eq!(
        s.with_burst_ratio(1.0000006).unwrap().burst_ppm(),
        1_000_001
    );
}

#[test]
fn constructor_errors() {
    let new_err = |x: f64| RateSpec::new(x).unwrap_err().to_string();
    let ratio_err = |x: f64| {
        RateSpec::new(1.0)
            .unwrap()
            .with_burst_ratio(x)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        new_err(0.0),
        "rate 0 is out of range: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        new_err(-1.0),
        "rate -1 is out of range: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        new_err(1e13),
        "rate 10000000000000 is out of range: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        new_err(1e300),
        "rate 1e300 is out of range: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        new_err(0.000999),
        "rate 0.000999 is out of range: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        new_err(f64::NAN),
        "rate NaN is not finite: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        new_err(f64::INFINITY),
        "rate inf is not finite: must be between 0.001 and 1e12 ops/s"
    );
    assert_eq!(
        ratio_err(0.5),
        "burst ratio 0.5 is below 1.0: must be between 1.0 and 1000"
    );
    assert_eq!(
        ratio_err(1000.5),
        "burst ratio 1000.5 is above 1000: must be between 1.0 and 1000"
    );
    assert_eq!(
        ratio_err(f64::NEG_INFINITY),
        "burst ratio -inf is not finite: must be between 1.0 and 1000"
    );
    assert!(ratio_err(f64::NAN).contains("not finite"));
}

#[test]
fn error_messages() {
    let cases = [
        (
            "abc",
            "rate \"abc\" at byte 0 is not a number: expected e.g. 1000, 1.5K, 10M or 1E6",
        ),
        (
            "0",
            "rate 0 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
        ),
        (
            "100,0.5",
            "burst ratio 0.5 at byte 4 is below 1.0: must be between 1.0 and 1000",
        ),
        (
            "100,2,go",
            "unknown verb \"go\" at byte 6: expected configure, start or restart",
        ),
        (
            "100,go",
            "unknown verb \"go\" at byte 4: expected configure, start or restart \
             (or a burst ratio such as 1.1)",
        ),
        (
            "1,2,start,4",
            "too many parts: \"4\" at byte 10 is a fourth part; \
             expected <rate>[,<burst ratio>][,<verb>]",
        ),
        (
            "100,start,2",
            "too many parts: \"2\" at byte 10 follows the verb, which must come last",
        ),
        (
            "",
            "empty spec: expected <rate>[,<burst ratio>][,<verb>], e.g. 10K,1.1,start",
        ),
        (
            "100,,start",
            "empty burst ratio at byte 4: expected e.g. 1.1, 1.5 or 2",
        ),
        (
            "100,",
            "empty part at byte 4: expected a burst ratio (e.g. 1.1) \
             or a verb (configure, start or restart)",
        ),
        (
            "100,2, ",
            "empty verb at byte 6: expected configure, start or restart",
        ),
        (
            " ,5",
            "empty rate at byte 0: expected e.g. 1000, 1.5K, 10M or 1E6",
        ),
        (
            "10Mx",
            "rate \"10Mx\" at byte 0 is not a number (unexpected \"x\" at byte 3): \
             expected e.g. 1000, 1.5K, 10M or 1E6",
        ),
        (
            "  1e",
            "rate \"1e\" at byte 2 is not a number (missing exponent digits at byte 4): \
             expected e.g. 1000, 1.5K, 10M or 1E6",
        ),
        (
            "10K/",
            "rate \"10K/\" at byte 0 is not a number (missing \"s\" at byte 4): \
             expected e.g. 1000, 1.5K, 10M or 1E6",
        ),
        (
            "100,abc,start",
            "burst ratio \"abc\" at byte 4 is not a number: expected e.g. 1.1, 1.5 or 2",
        ),
        (
            "100,2K",
            "burst ratio \"2K\" at byte 4 is not a number (unexpected \"K\" at byte 5): \
             expected e.g. 1.1, 1.5 or 2",
        ),
        (
            "-5",
            "rate -5 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
        ),
        (
            "1e13",
            "rate 1e13 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
        ),
        (
            "1e999999999",
            "rate 1e999999999 at byte 0 is out of range: must be between 0.001 and 1e12 ops/s",
        ),
        (
            "1e-999999999",
            "rate 1e-999999999 at byte 0 is out of range: \
             must be between 0.001 and 1e12 ops/s",
        ),
        (
            "1.0000000001",
            "rate 1.0000000001 at byte 0 is too precise: \
             the resolution is 0.000000001 ops/s (9 decimal places)",
        ),
        (
            "100, 1.0000001",
            "burst ratio 1.0000001 at byte 5 is too precise: \
             the resolution is 0.000001 (6 decimal places)",
        ),
        (
            "100,1001",
            "burst ratio 1001 at byte 4 is above 1000: must be between 1.0 and 1000",
        ),
        (
            "100,-2,start",
            "burst ratio -2 at byte 4 is below 1.0: must be between 1.0 and 1000",
        ),
    ];
    for (input, message) in cases {
        assert_eq!(err(input), message, "{input:?}");
    }
}

#[test]
fn junk_is_rejected() {
    for input in [
        "   ",
        "inf",
        "NaN",
        "-inf",
        "0e5",
        "-0",
        "1..5",
        "1.5.5",
        "e5",
        "1e5.5",
        "1KK",
        "1K/s/s",
        "10 K",
        "1_000",
        "0x10",
        "１００",
        "100é",
        "100,1.1,start,",
        "100;;",
        ":",
        "1ee5",
        "1e--5",
        "10Mx,2",
    ] {
        let e = input.parse::<RateSpec>().unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    assert!(err("１００").contains("\"１００\" at byte 0 is not a number"));
    assert!(err("100é").contains("unexpected \"é\" at byte 3"));
    assert!(err("inf").starts_with("rate \"inf\" at byte 0 is not a number"));
    let long = "9".repeat(500);
    assert!(
        err(&long).ends_with("... at byte 0 is out of range: must be between 0.001 and 1e12 ops/s")
    );
}

#[test]
fn spec_error_is_an_error() {
    fn is_error<E: Error + Send + Sync + 'static>() {}
    is_error::<SpecError>();
    for input in ["x", "", "0", "100,0.5", "1,2,3,4", "100,go", "100,,start"] {
        let message = err(input);
        assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
        assert!(!message.ends_with('.'), "{message}");
    }
    assert!("x".parse::<RateSpec>().unwrap_err().source().is_none());
}

/// Any valid spec: uniform over the fixed-point ranges, or "round"
/// numbers (few significant digits) that exercise the suffixes.
fn any_spec() -> impl Strategy<Value = RateSpec> {
    let nano = prop_oneof![
        10u128.pow(RATE.min_pow)..=10u128.pow(RATE.max_pow),
        (1u128..1000, 0u32..=21)
            .prop_map(|(m, p)| m * 10u128.pow(p))
            .prop_filter("in range", |n| (1_000_000..=10u128.pow(21)).contains(n)),
    ];
    let ppm = prop_oneof![
        1_000_000u64..=1_000_000_000,
        (1u64..1000, 0u32..=9)
            .prop_map(|(m, p)| m * 10u64.pow(p))
            .prop_filter("in range", |n| (1_000_000..=1_000_000_000).contains(n)),
    ];
    let verb = prop_oneof![
        Just(Verb::Configure),
        Just(Verb::Start),
        Just(Verb::Restart)
    ];
    (nano, ppm, verb).prop_map(|(nano, ppm, verb)| spec(nano, ppm, verb))
}

proptest! {
    #[test]
    fn display_round_trips(s in any_spec()) {
        let shown = s.to_string();
        prop_assert_eq!(shown.parse::<RateSpec>(), Ok(s), "{}", shown);
    }

    #[test]
    fn separators_and_spaces_do_not_matter(
        s in any_spec(),
        seps in proptest::collection::vec(prop_oneof![Just(','), Just(':'), Just(';')], 2),
        pad in proptest::collection::vec("[ \t]{0,2}", 6),
    ) {
        let canonical = s.to_string();
        let fields: Vec<&str> = canonical.split(',').collect();
        let mut text = String::new();
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                text.push(seps[i - 1]);
            }
            text.push_str(&pad[2 * i]);
            text.push_str(field);
            text.push_str(&pad[2 * i + 1]);
        }
        prop_assert_eq!(text.parse::<RateSpec>(), Ok(s), "{:?}", text);
    }

    #[test]
    fn plain_decimals_parse_exactly(nano in 1_000_000u128..=10u128.pow(21)) {
        let text = fixed_to_string(nano, 9);
        prop_assert_eq!(parse(&text).nano_ops_per_sec(), nano);
    }

    #[test]
    fn integers_with_suffixes_parse_exactly(n in 1u128..=1_000_000_000) {
        prop_assert_eq!(parse(&format!("{n}")).nano_ops_per_sec(), n * E9);
        prop_assert_eq!(parse(&format!("{n}K/s")).nano_ops_per_sec(), n * E9 * 1000);
        prop_assert_eq!(parse(&format!("{n}e-3")).nano_ops_per_sec(), n * 1_000_000);
    }

    #[test]
    fn new_inverts_ops_per_sec(nano in 1_000_000u128..(1 << 50), ppm in 1_000_000u64..=1_000_000_000) {
        let s = spec(nano, ppm, Verb::Start);
        let again = RateSpec::new(s.ops_per_sec())
            .and_then(|r| r.with_burst_ratio(s.burst_ratio()));
        prop_assert_eq!(again, Ok(s));
    }

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        let _ = text.parse::<RateSpec>();
        let _ = text.parse::<Verb>();
    }

    #[test]
    fn spec_like_strings_never_panic(text in "[-+0-9.eEkKmMgGbBtT/sS,:; a-z]{0,24}") {
        if let Ok(s) = text.parse::<RateSpec>() {
            prop_assert_eq!(s.to_string().parse::<RateSpec>(), Ok(s));
        }
    }
}
