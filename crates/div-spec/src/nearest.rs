//! The word a user most likely meant, among those that exist: a function, a file, a path
//! in a run's result.

/// The candidate closest to `word` when it is close enough to be what was meant: an edit
/// (a letter added, removed, changed, or two swapped) per three letters, at least one, or
/// the same letters in another case.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let most = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            let d = if c.eq_ignore_ascii_case(word) {
                0
            } else {
                edit_distance(word, c)
            };
            (d, c)
        })
        .filter(|(d, _)| *d <= most)
        .min()
        .map(|(_, c)| c)
}

/// The optimal string alignment distance: insertions, deletions, substitutions and swaps of
/// two neighbours.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn the_nearest_name() {
        let names = ["main", "train", "evaluate"];
        assert_eq!(did_you_mean("mian", names), Some("main"));
        assert_eq!(did_you_mean("Main", names), Some("main"));
        assert_eq!(did_you_mean("trian", names), Some("train"));
        assert_eq!(did_you_mean("evalute", names), Some("evaluate"));
        assert_eq!(did_you_mean("serve", names), None);
        assert_eq!(
            did_you_mean("trains.py", ["train.py", "tests/test_x.py"]),
            Some("train.py")
        );
    }
}
