//! `SSCAN`: a cursor that stays valid across concurrent writes and across
//! the engine moving tags, and Redis's glob patterns for `MATCH`.
//!
//! Members are ordered by a fixed 64-bit hash (unseeded xxh3 of the
//! member's bytes), not by where the engine keeps them. A cursor `c` means
//! "the members whose hash is at least `c`": each call walks the whole set,
//! keeps the members at or past the cursor that match the pattern, and
//! returns those with the `COUNT` smallest hashes, plus every other member
//! sharing the last returned hash; the next cursor is that hash plus one,
//! or 0 when nothing is left. So a member present throughout a scan is
//! returned exactly once, and no member is returned twice. The price is
//! O(members) work per call.

use super::keys::{self, Key};
use tagstore::Store;
use xxhash_rust::xxh3::xxh3_64;

/// The scan order of a member.
pub fn order(member: &str) -> u64 {
    xxh3_64(member.as_bytes())
}

/// One page of a scan: the members and the next cursor (0: finished).
pub fn page(
    store: &Store,
    key: &Key,
    cursor: u64,
    pattern: Option<&[u8]>,
    count: usize,
) -> tagstore::Result<(Vec<String>, u64)> {
    let mut found: Vec<(u64, String)> = Vec::new();
    keys::members(store, key, |m| {
        let h = order(m);
        if h >= cursor && pattern.is_none_or(|p| glob(p, m.as_bytes())) {
            found.push((h, m.to_owned()));
        }
    })?;
    found.sort_unstable();
    // A FIND alongside writers could meet a tag twice; a page never repeats one.
    found.dedup();
    let mut end = found.len().min(count.max(1));
    if end == found.len() {
        return Ok((found.into_iter().map(|(_, m)| m).collect(), 0));
    }
    let last = found[end - 1].0;
    while end < found.len() && found[end].0 == last {
        end += 1;
    }
    found.truncate(end);
    let next = last.checked_add(1).unwrap_or(0);
    Ok((found.into_iter().map(|(_, m)| m).collect(), next))
}

/// Redis's `stringmatchlen`: `*`, `?`, `[abc]`, `[^a-z]`, `\x`, on bytes.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: (pattern after it, text position).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            let (matched, next) = match pattern[p] {
                b'*' => {
                    star = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                b'?' => (t < text.len(), p + 1),
                b'[' => class(pattern, p + 1, text.get(t).copied()),
                b'\\' if p + 1 < pattern.len() => (text.get(t) == Some(&pattern[p + 1]), p + 2),
                c => (text.get(t) == Some(&c), p + 1),
            };
            if matched {
                p = next;
                t += 1;
                continue;
            }
        } else if t == text.len() {
            return true;
        }
        // Mismatch: let the last `*` swallow one more byte, if it can.
        match star {
            Some((sp, st)) if st < text.len() => {
                star = Some((sp, st + 1));
                p = sp;
                t = st + 1;
            }
            _ => return false,
        }
    }
}

/// Matches `c` against the class starting after `[` at `p`; returns whether
/// it matched and where the pattern continues after `]`.
fn class(pattern: &[u8], mut p: usize, c: Option<u8>) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            hit |= c == Some(pattern[p + 1]);
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (a, b) = (
                pattern[p].min(pattern[p + 2]),
                pattern[p].max(pattern[p + 2]),
            );
            hit |= c.is_some_and(|c| (a..=b).contains(&c));
            p += 3;
        } else {
            hit |= c == Some(pattern[p]);
            p += 1;
        }
    }
    // An unclosed class ends the pattern (as Redis does).
    let next = (p + 1).min(pattern.len());
    (c.is_some() && hit != negate, next)
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn glob_as_redis() {
        for (p, t, m) in [
            ("*", "", true),
            ("*", "abc", true),
            ("a*", "abc", true),
            ("a*c", "abbbc", true),
            ("a*c", "abcd", false),
            ("?", "", false),
            ("?b", "ab", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-c]llo", "hbllo", true),
            ("h[c-a]llo", "hbllo", true),
            ("h\\*", "h*", true),
            ("h\\*", "hx", false),
            ("*x*y*", "aaxbbyc", true),
            ("*x*y*", "aaybbxc", false),
            ("photo*", "photo1", true),
        ] {
            assert_eq!(glob(p.as_bytes(), t.as_bytes()), m, "{p:?} vs {t:?}");
        }
    }
}
