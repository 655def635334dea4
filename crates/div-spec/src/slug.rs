//! Project slugs made from directory names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A project name: 1–63 of `a-z`, `0-9` and `-`, not starting or ending with `-`, no `--`.
///
/// Made by [`Slug::slugify`] from a directory name: lowercase, Latin accents transliterated,
/// anything else a separator, separators collapsed to one `-` and trimmed, cut to 63.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Slug(String);

/// The most characters a slug has.
pub const MAX_SLUG_LEN: usize = 63;

/// The error returned by [`Slug::slugify`] and [`Slug::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlugError {
    /// A directory name with nothing to keep.
    #[error(
        "a directory named `{name}` has no letters or digits to make a project name from; pass --project"
    )]
    NoLetters { name: String },
    /// A typed project name with nothing to keep.
    #[error(
        "the project name `{typed}` has no letters or digits; a project name is lowercase letters, digits and `-`"
    )]
    Empty { typed: String },
}

/// The error returned by [`check_project_name`]: a project name as given (by a control
/// plane's client), not as typed at `--project`, which is slugified instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{typed}` is not a project name; a project name is 1 to 63 lowercase letters, digits and `-`, not starting or ending with `-` and with no `--`{}",
    .slug.as_ref().map(|s| format!(" (`{s}` is one)")).unwrap_or_default()
)]
pub struct ProjectNameError {
    /// The name as given.
    pub typed: String,
    /// The slug made of it, when it has letters or digits to make one from.
    pub slug: Option<Slug>,
}

/// Whether `name` is a project name exactly as it stands (what [`Slug`] holds): 1 to
/// [`MAX_SLUG_LEN`] of `a-z`, `0-9` and `-`, not starting or ending with `-`, with no `--`.
/// A name is one exactly when it is its own slug. `div` sends only slugs; a control plane
/// refuses any other project with this.
pub fn check_project_name(name: &str) -> Result<(), ProjectNameError> {
    let ok = (1..=MAX_SLUG_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        return Ok(());
    }
    let text = slug_text(name);
    Err(ProjectNameError {
        typed: name.to_owned(),
        slug: (!text.is_empty()).then_some(Slug(text)),
    })
}

/// The ASCII for a Latin letter with an accent, or `None` to treat it as a separator.
fn transliterate(c: char) -> Option<&'static str> {
    Some(match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ā' | 'ă' | 'ą' => "a",
        'ç' | 'ć' | 'č' | 'ĉ' | 'ċ' => "c",
        'ď' | 'đ' | 'ð' => "d",
        'è' | 'é' | 'ê' | 'ë' | 'ē' | 'ė' | 'ę' | 'ě' => "e",
        'ğ' | 'ģ' | 'ĝ' | 'ġ' => "g",
        'ì' | 'í' | 'î' | 'ï' | 'ī' | 'į' | 'ı' => "i",
        'ł' | 'ľ' | 'ĺ' | 'ļ' => "l",
        'ñ' | 'ń' | 'ň' | 'ņ' => "n",
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'ō' | 'ő' => "o",
        'ŕ' | 'ř' => "r",
        'ś' | 'š' | 'ş' | 'ș' => "s",
        'ť' | 'ţ' | 'ț' => "t",
        'ù' | 'ú' | 'û' | 'ü' | 'ū' | 'ů' | 'ű' | 'ų' => "u",
        'ý' | 'ÿ' => "y",
        'ź' | 'ż' | 'ž' => "z",
        'ß' => "ss",
        'æ' => "ae",
        'œ' => "oe",
        'þ' => "th",
        _ => return None,
    })
}

fn slug_text(name: &str) -> String {
    let mut out = String::new();
    let mut pending_dash = false;
    for c in name.chars().flat_map(char::to_lowercase) {
        let piece: Option<std::borrow::Cow<'static, str>> = if c.is_ascii_alphanumeric() {
            Some(c.to_string().into())
        } else {
            transliterate(c).map(Into::into)
        };
        match piece {
            Some(p) => {
                if pending_dash && !out.is_empty() {
                    out.push('-');
                }
                pending_dash = false;
                out.push_str(&p);
            }
            None => pending_dash = true,
        }
    }
    if out.len() > MAX_SLUG_LEN {
        out.truncate(MAX_SLUG_LEN);
        while out.ends_with('-') {
            out.pop();
        }
    }
    out
}

impl Slug {
    /// The slug for a directory name: `My Project!` -> `my-project`.
    pub fn slugify(name: &str) -> Result<Slug, SlugError> {
        let text = slug_text(name);
        if text.is_empty() {
            return Err(SlugError::NoLetters {
                name: name.to_owned(),
            });
        }
        Ok(Slug(text))
    }

    /// The slug.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Slug {
    type Err = SlugError;

    /// Slugifies what was typed (`--project My Project` is `my-project`).
    fn from_str(typed: &str) -> Result<Slug, SlugError> {
        let text = slug_text(typed);
        if text.is_empty() {
            return Err(SlugError::Empty {
                typed: typed.to_owned(),
            });
        }
        Ok(Slug(text))
    }
}

impl TryFrom<String> for Slug {
    type Error = SlugError;

    fn try_from(text: String) -> Result<Slug, SlugError> {
        text.parse()
    }
}

impl From<Slug> for String {
    fn from(slug: Slug) -> String {
        slug.0
    }
}
