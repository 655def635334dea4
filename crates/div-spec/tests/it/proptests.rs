use div_spec::{Check, Entrypoint, EnvPair, MemoryGib, Money, Sku, Slug, VolumeName};
use proptest::prelude::*;

proptest! {
    /// `d.cc` parses to exactly `d * 100 + cc` cents, for every dollar and cent count: the
    /// digits are read, never a float.
    #[test]
    fn proptest_money_reads_digits(d in 0i64..=92_233_720_368_547_757, c in 0i64..100) {
        let typed = format!("{d}.{c:02}");
        let expect = d * 100 + c;
        prop_assume!(expect > 0);
        prop_assert_eq!(typed.parse::<Money>().map(Money::cents), Ok(expect));
        prop_assert_eq!(format!("${typed}").parse::<Money>().map(Money::cents), Ok(expect));
    }

    /// A third decimal rounds half up.
    #[test]
    fn proptest_money_third_decimal_rounds_half_up(d in 0i64..1_000_000, m in 0i64..1000) {
        let typed = format!("{d}.{m:03}");
        let expect = d * 100 + m / 10 + i64::from(m % 10 >= 5);
        prop_assume!(expect > 0);
        prop_assert_eq!(typed.parse::<Money>().map(Money::cents), Ok(expect));
    }

    /// Every positive amount displays as something that parses back to it.
    #[test]
    fn proptest_money_round_trips(cents in 1i64..=i64::MAX) {
        let money = Money::from_cents(cents);
        prop_assert_eq!(money.to_string().parse::<Money>(), Ok(money));
    }

    /// Memory displays as something that parses back to it.
    #[test]
    fn proptest_memory_round_trips(gib in 1u32..) {
        let memory = MemoryGib::new(gib);
        prop_assert_eq!(memory.to_string().parse::<MemoryGib>(), Ok(memory));
    }

    /// A check's canonical form parses back to the same check.
    #[test]
    fn proptest_check_round_trips(
        path in "[a-z_][a-z0-9_-]{0,8}(\\.[a-z0-9_-]{1,8}){0,3}",
        op in prop::sample::select(vec![">=", "<=", ">", "<", "==", "!="]),
        number in "-?[0-9]{1,6}(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,3})?",
        string in "[^'\"]{0,12}",
        which in 0u8..3,
    ) {
        let value = match (which, op) {
            (0, _) | (_, ">=" | "<=" | ">" | "<") => number,
            (1, _) => "true".to_owned(),
            _ => format!("'{string}'"),
        };
        let typed = format!("{path}{op}{value}");
        let check: Check = typed.parse().map_err(|e| TestCaseError::fail(format!("{typed}: {e}")))?;
        prop_assert_eq!(check.to_string().parse::<Check>(), Ok(check));
    }

    /// Whatever a refused check proposes instead is itself a valid check.
    #[test]
    fn proptest_check_suggestions_parse(
        typed in "[a-z.]{1,4}[<>=!]{1,2}[ a-zA-Z0-9.+\\-'\"=<>]{0,10}",
    ) {
        if let Err(e) = typed.parse::<Check>()
            && let Some(suggestion) = e.suggestion()
        {
            prop_assert!(suggestion.parse::<Check>().is_ok(), "`{}` suggests `{}`", typed, suggestion);
        }
    }

    /// Checks on a number compare the decimals written: the same as comparing integers
    /// scaled by a power of ten, for any spelling (exponents, trailing zeros) of either side.
    #[test]
    fn proptest_checks_compare_numbers_exactly(
        a in -10_000_000i64..10_000_000, a_scale in 0u32..25, a_zeros in 0usize..3,
        b in -10_000_000i64..10_000_000, b_scale in 0u32..25,
        op in prop::sample::select(vec![">=", "<=", ">", "<", "==", "!="]),
        exp_form in any::<bool>(),
    ) {
        // `a / 10^a_scale`, written plainly (with trailing zeros) or as `<a>e-<a_scale>`.
        let plain = |n: i64, scale: u32, zeros: usize| {
            let digits = format!("{:0>width$}", n.unsigned_abs(), width = scale as usize + 1);
            let (whole, frac) = digits.split_at(digits.len() - scale as usize);
            let sign = if n < 0 { "-" } else { "" };
            if frac.is_empty() && zeros == 0 {
                format!("{sign}{whole}")
            } else {
                format!("{sign}{whole}.{frac}{}", "0".repeat(zeros))
            }
        };
        let a_text = if exp_form { format!("{a}e-{a_scale}") } else { plain(a, a_scale, a_zeros) };
        let b_text = plain(b, b_scale, 0);
        // Exact: a·10^(s−a_scale) vs b·10^(s−b_scale), in i128.
        let s = a_scale.max(b_scale);
        let x = i128::from(a) * 10i128.pow(s - a_scale);
        let y = i128::from(b) * 10i128.pow(s - b_scale);
        let holds = match op { ">=" => x >= y, "<=" => x <= y, ">" => x > y, "<" => x < y, "==" => x == y, _ => x != y };
        let check: Check = format!("v{op}{b_text}").parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let verdict = check.evaluate_json(&format!("{{\"v\": {a_text}}}"));
        prop_assert_eq!(verdict.passed(), holds, "{} {} {}", a_text, op, b_text);
        prop_assert_eq!(verdict.found_text.as_deref(), Some(a_text.as_str()));
    }

    /// Judging any text, JSON or not, never panics; a number found is shown as written.
    #[test]
    fn proptest_evaluate_json_never_panics(
        result in "[{}\\[\\]\":,a-c0-9.eE+\\- ntrufl]{0,40}",
        check in prop::sample::select(vec!["a>0", "a.b==1e5", "a.0!=x", "a<=-0.5", "a==true"]),
    ) {
        let check: Check = check.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let verdict = check.evaluate_json(&result);
        if let Some(text) = &verdict.found_text {
            prop_assert!(result.contains(text.as_str()), "{} not in {}", text, result);
        }
    }

    /// Escaped text holds nothing a terminal acts on; text without such characters is left
    /// as it is; and a JSON document escaped is the same JSON value.
    #[test]
    fn proptest_terminal_safe_escapes_every_control(
        text in "(\\PC|[\u{0}-\u{1f}\u{7f}-\u{9f}\u{202a}-\u{202e}\u{2066}-\u{2069}\\\\\"])*",
    ) {
        let safe = div_spec::terminal_safe(&text);
        prop_assert!(!safe.chars().any(div_spec::is_terminal_control), "{:?}", safe);
        if !text.chars().any(div_spec::is_terminal_control) {
            prop_assert_eq!(&*safe, text.as_str());
        }
        let json = serde_json::to_string(&serde_json::json!({"s": text, "n": [1, text]}))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: serde_json::Value = serde_json::from_str(&div_spec::terminal_safe(&json))
            .map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        prop_assert_eq!(back, serde_json::json!({"s": text, "n": [1, text]}));
    }

    /// No parser panics on any string, and whatever parses round-trips through Display.
    #[test]
    fn proptest_parsers_never_panic(typed in any::<String>()) {
        if let Ok(m) = typed.parse::<Money>() { prop_assert_eq!(m.to_string().parse::<Money>(), Ok(m)); }
        if let Ok(m) = typed.parse::<MemoryGib>() { prop_assert_eq!(m.to_string().parse::<MemoryGib>(), Ok(m)); }
        if let Ok(c) = typed.parse::<Check>() { prop_assert_eq!(c.to_string().parse::<Check>(), Ok(c)); }
        if let Ok(e) = typed.parse::<Entrypoint>() { prop_assert_eq!(e.to_string().parse::<Entrypoint>(), Ok(e)); }
        if let Ok(s) = typed.parse::<Slug>() { prop_assert_eq!(s.to_string().parse::<Slug>(), Ok(s)); }
        if let Ok(s) = typed.parse::<Sku>() { prop_assert_eq!(s.to_string().parse::<Sku>(), Ok(s)); }
        if let Ok(p) = typed.parse::<EnvPair>() { prop_assert_eq!(p.to_string().parse::<EnvPair>(), Ok(p)); }
        if let Ok(v) = typed.parse::<VolumeName>() { prop_assert_eq!(v.to_string().parse::<VolumeName>(), Ok(v)); }
        let _ = Money::parse_amount(&typed);
        let _ = div_spec::volumes_named(&typed);
    }

    /// A project name is one exactly when it is its own slug: what `--project` and a folder's
    /// name become is always taken, and nothing else is.
    #[test]
    fn proptest_a_project_name_is_its_own_slug(typed in "[a-zA-Z0-9 ._/<>-]{0,70}") {
        let slug = typed.parse::<Slug>().ok();
        let own = slug.as_ref().is_some_and(|s| s.as_str() == typed);
        prop_assert_eq!(div_spec::check_project_name(&typed).is_ok(), own, "{:?}", typed);
        if let Some(s) = slug {
            prop_assert_eq!(div_spec::check_project_name(s.as_str()), Ok(()));
        }
    }

    /// `KEY=value` never panics on any text (names of any length, `=`, NULs, any Unicode),
    /// and what it accepts is within the bounds and round-trips.
    #[test]
    fn proptest_env_pairs_stay_within_their_bounds(
        key in "[A-Za-z_0-9=\0é-]{0,300}",
        value in "[a-z=\0é]{0,40}",
    ) {
        let typed = format!("{key}={value}");
        match typed.parse::<EnvPair>() {
            Ok(p) => {
                prop_assert!(p.key.len() <= div_spec::MAX_ENV_NAME_BYTES, "{}", p.key.len());
                prop_assert!(div_spec::is_env_key(&p.key));
                prop_assert!(!p.value.contains('\0'));
                prop_assert!(p.value.len() <= div_spec::MAX_ENV_VALUE_BYTES);
                prop_assert_eq!(p.to_string().parse::<EnvPair>(), Ok(p));
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        prop_assert_eq!(div_spec::check_env_name(&key).is_ok(), div_spec::is_env_key(&key));
    }

    /// The total never panics nor overflows, and refuses exactly past 1 MiB of `KEY=value\0`
    /// (the last value of a name counting).
    #[test]
    fn proptest_env_totals_are_counted_as_the_kernel_counts(
        vars in prop::collection::vec(("[A-C]{1,2}", 0usize..400_000), 0..8),
    ) {
        let values: Vec<(String, String)> =
            vars.iter().map(|(k, n)| (k.clone(), "x".repeat(*n))).collect();
        let mut last = std::collections::BTreeMap::new();
        for (k, v) in &values {
            last.insert(k.as_str(), v.len());
        }
        let bytes: usize = last.iter().map(|(k, n)| k.len() + n + 2).sum();
        let judged = div_spec::check_env_total(
            "--env",
            values.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        prop_assert_eq!(judged.is_ok(), bytes <= div_spec::MAX_ENV_TOTAL_BYTES, "{}", bytes);
    }

    /// Parsers never panic on strings made of the characters they care about.
    #[test]
    fn proptest_parsers_never_panic_on_near_misses(typed in "[0-9a-zA-Z.:$,+\\-=<>!'\" /_eEGM]{0,16}") {
        let _ = typed.parse::<Money>();
        let _ = typed.parse::<MemoryGib>();
        if let Ok(c) = typed.parse::<Check>() { prop_assert_eq!(c.to_string().parse::<Check>(), Ok(c)); }
        if let Ok(e) = typed.parse::<Entrypoint>() { prop_assert_eq!(e.to_string().parse::<Entrypoint>(), Ok(e)); }
        let _ = Entrypoint::from_words(&typed.split(' ').map(str::to_owned).collect::<Vec<_>>());
    }

    /// Several words quoted for `sh` read back as the same words (checked with a tiny
    /// single-quote reader, the only quoting `shell_quote` produces).
    #[test]
    fn proptest_words_quote_back(words in prop::collection::vec("[ -~]{0,8}", 2..5)) {
        let entry = Entrypoint::from_words(&words).unwrap();
        prop_assert_eq!(split_sh(entry.command()), words);
    }
}

/// Splits a command of bare and single-quoted words, as `sh` would.
fn split_sh(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                in_word = false;
            }
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}
