//! Small formatting helpers over div-spec's printers.

pub(crate) use div_spec::format_duration;

/// `$1.05` from 105 cents.
pub(crate) fn money(cents: i64) -> String {
    div_spec::Money::from_cents(cents).to_string()
}

/// The API's slug for `name`, or `None` when it has no letters or digits.
pub(crate) fn slugify(name: &str) -> Option<String> {
    div_spec::Slug::slugify(name)
        .ok()
        .map(|s| s.as_str().to_string())
}
