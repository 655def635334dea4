use div_spec::{
    EnvPair, MAX_ENV_NAME_BYTES, MAX_ENV_TOTAL_BYTES, MAX_ENV_VALUE_BYTES, Slug, VolumeName,
    check_env_name, check_env_total, check_env_value, check_project_name, is_env_key,
    volumes_named,
};
use insta::assert_snapshot;

use crate::refused;

#[test]
fn slugs() {
    let check = |name: &str, expect: &str| {
        let slug = Slug::slugify(name).unwrap_or_else(|e| panic!("`{name}`: {e}"));
        assert_eq!(slug.as_str(), expect, "`{name}`");
        assert_eq!(slug.to_string().parse::<Slug>().unwrap(), slug);
    };
    check("very-cool-classifier", "very-cool-classifier");
    check("My Project!", "my-project");
    check("  --My__Project--  ", "my-project");
    check("my_project", "my-project");
    check("Café Crème", "cafe-creme");
    check("Straße", "strasse");
    check("naïve.bayes", "naive-bayes");
    check("日本 model", "model");
    check("v2.0", "v2-0");
    check("2024", "2024");
    check(&"a".repeat(70), &"a".repeat(63));
    check(&format!("{}-b", "a".repeat(62)), &"a".repeat(62));
    let json = serde_json::to_string(&Slug::slugify("x y").unwrap()).unwrap();
    assert_eq!(json, "\"x-y\"");
}

#[test]
fn slug_refusals() {
    assert_snapshot!(Slug::slugify("!!!").unwrap_err().to_string(), @"a directory named `!!!` has no letters or digits to make a project name from; pass --project");
    assert_snapshot!(Slug::slugify("").unwrap_err().to_string(), @"a directory named `` has no letters or digits to make a project name from; pass --project");
    assert_snapshot!(refused::<Slug>("---"), @"the project name `---` has no letters or digits; a project name is lowercase letters, digits and `-`");
}

#[test]
fn project_names_as_given() {
    for good in ["a", "very-cool-classifier", "v2-0", "2024", &"a".repeat(63)] {
        assert_eq!(check_project_name(good), Ok(()), "`{good}`");
    }
    let refusal = |name: &str| check_project_name(name).unwrap_err().to_string();
    assert_snapshot!(refusal("<img id=x src=x>"), @"`<img id=x src=x>` is not a project name; a project name is 1 to 63 lowercase letters, digits and `-`, not starting or ending with `-` and with no `--` (`img-id-x-src-x` is one)");
    assert_snapshot!(refusal("../../etc"), @"`../../etc` is not a project name; a project name is 1 to 63 lowercase letters, digits and `-`, not starting or ending with `-` and with no `--` (`etc` is one)");
    assert_snapshot!(refusal("---"), @"`---` is not a project name; a project name is 1 to 63 lowercase letters, digits and `-`, not starting or ending with `-` and with no `--`");
    for bad in [
        "",
        "a/b",
        "UPPER",
        "a--b",
        "-a",
        "a-",
        "a_b",
        "café",
        &"a".repeat(64),
        &"a".repeat(300),
    ] {
        assert!(check_project_name(bad).is_err(), "`{bad}` is refused");
    }
}

#[test]
fn env_pairs() {
    let check = |typed: &str, key: &str, value: &str| {
        let pair: EnvPair = typed.parse().unwrap_or_else(|e| panic!("`{typed}`: {e}"));
        assert_eq!((pair.key.as_str(), pair.value.as_str()), (key, value));
        assert_eq!(pair.to_string(), typed);
    };
    check("KEY=value", "KEY", "value");
    check("KEY=", "KEY", "");
    check("URL=a=b=c", "URL", "a=b=c");
    check("_x1=two words", "_x1", "two words");
    check("lower=1", "lower", "1");
}

#[test]
fn env_refusals() {
    assert_snapshot!(refused::<EnvPair>("=x"), @"`=x` has no name before `=`; write `KEY=value`");
    assert_snapshot!(refused::<EnvPair>("KEY"), @"`KEY` has no `=`; write `KEY=value` (`KEY=` for an empty value)");
    assert_snapshot!(refused::<EnvPair>("1KEY=x"), @"`1KEY` is not a variable name: letters, digits and `_`, not starting with a digit");
    assert_snapshot!(refused::<EnvPair>("MY-KEY=x"), @"`MY-KEY` is not a variable name: letters, digits and `_`, not starting with a digit");
    assert_snapshot!(refused::<EnvPair>(""), @"the variable is empty; write `KEY=value`");
}

/// A NUL byte cannot travel in an environment, and a value past 128 KiB less 256 bytes cannot
/// be passed to `execve`: both are refused when typed, naming the variable.
#[test]
fn env_values_with_a_nul_or_too_long_are_refused() {
    assert_snapshot!(refused::<EnvPair>("KEY=a\0b"), @"the value of `KEY` holds a NUL byte (at byte 1), which an environment variable cannot carry");
    let at_limit = format!("BIG={}", "x".repeat(MAX_ENV_VALUE_BYTES));
    assert_eq!(
        at_limit.parse::<EnvPair>().map(|p| p.value.len()),
        Ok(MAX_ENV_VALUE_BYTES)
    );
    let past = format!("BIG={}", "x".repeat(200_000));
    assert_snapshot!(refused::<EnvPair>(&past), @"the value of `BIG` is 200000 bytes; an environment variable holds at most 130816 bytes (128 KiB less 256); put larger data in a file or a volume");
    assert_eq!(check_env_value("TOKEN", "secret"), Ok(()));
    assert!(check_env_value("TOKEN", "se\0cret").is_err());
}

/// A name is at most 255 bytes: refused past it when typed, with its start, its length and
/// the bound; 255 is a name like any other.
#[test]
fn env_names_past_255_bytes_are_refused() {
    let edge = "K".repeat(MAX_ENV_NAME_BYTES);
    assert_eq!(check_env_name(&edge), Ok(()));
    assert!(is_env_key(&edge));
    assert_eq!(
        format!("{edge}=v").parse::<EnvPair>().map(|p| p.key.len()),
        Ok(255)
    );
    let past = format!("{edge}K");
    assert!(!is_env_key(&past));
    assert_snapshot!(refused::<EnvPair>(&format!("{past}=v")), @"the variable name `KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKK…` is 256 bytes; a name holds at most 255 bytes");
    // A long name that is not a name at all is said to be that, shortened.
    assert_snapshot!(refused::<EnvPair>(&format!("{}é-{}=v", "a".repeat(39), "b".repeat(300))), @"`aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…` is not a variable name: letters, digits and `_`, not starting with a digit");
}

/// A run's own variables together are at most 1 MiB, each counted as `KEY=value` and a NUL;
/// a name given twice counts once, with its last value.
#[test]
fn env_totals_past_1_mib_are_refused() {
    let value = "v".repeat(MAX_ENV_TOTAL_BYTES - 3);
    assert_eq!(check_env_total("--env", [("K", value.as_str())]), Ok(()));
    let over = format!("{value}v");
    assert_snapshot!(
        check_env_total("the run's --env variables", [("A", "1"), ("K", over.as_str())]).expect_err("over").to_string(),
        @"the run's --env variables hold 1048581 bytes together (`KEY=value` and a NUL each, the largest `K`); a run's environment holds at most 1048576 bytes (1 MiB); put larger data in a file or a volume"
    );
    assert_eq!(
        check_env_total("--env", [("K", over.as_str()), ("K", "small")]),
        Ok(())
    );
    assert_eq!(check_env_total("--env", []), Ok(()));
}

#[test]
fn volume_names_in_commands() {
    let check = |command: &str, expect: &[&str]| {
        let names: Vec<String> = volumes_named(command)
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(names, expect, "`{command}`");
    };
    check(
        "mkdir -p /mnt/mask-models/base && python download.py",
        &["mask-models"],
    );
    check("cp /mnt/a/x /mnt/b/y && ls /mnt/a", &["a", "b"]);
    check("python train.py --out=/mnt/ckpt", &["ckpt"]);
    check("echo '/mnt/data.v2'", &["data.v2"]);
    check("ls /mnt/", &[]);
    check("ls /mnt/$VOL/x", &[]);
    check("ls /mnt/data$SUFFIX", &[]);
    check("ls /mnt/{a,b}", &[]);
    check("ls /data/mnt/x ~/mnt/y", &[]);
    check("ls /mnt/Models", &[]);
    check("ls /mnt/-x", &[]);
    check("python train.py", &[]);
    check("/mnt/first", &["first"]);
}

#[test]
fn volume_names() {
    for ok in ["mask-models", "a", "v1.2_x", "0data"] {
        assert_eq!(ok.parse::<VolumeName>().unwrap().as_str(), ok);
    }
    assert_snapshot!(refused::<VolumeName>("Models"), @"`Models` is not a volume name: 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit");
    assert_snapshot!(refused::<VolumeName>(""), @"`` is not a volume name: 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit");
    assert_snapshot!(refused::<VolumeName>("-x"), @"`-x` is not a volume name: 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit");
    assert!(!refused::<VolumeName>(&"a".repeat(64)).is_empty());
}

/// What a run planted, as a terminal is shown it.
#[test]
fn terminal_safe_escapes_what_a_terminal_acts_on() {
    assert_eq!(
        div_spec::terminal_safe("a\u{1b}]0;x\u{7}b\u{9b}2J\r\u{202e}c\td\ne"),
        "a\\u001b]0;x\\u0007b\\u009b2J\\u000d\\u202ec\td\ne"
    );
    assert!(matches!(
        div_spec::terminal_safe("plain ünïcode\ttab\n"),
        std::borrow::Cow::Borrowed(_)
    ));
}
