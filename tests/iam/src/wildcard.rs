//! IAM's wildcard matching of actions, resources and `StringLike` values.

/// Whether `text` matches `pattern`, where `*` matches any run of characters (`:` and `/`
/// included) and `?` exactly one, as IAM matches actions, resources and `StringLike` values.
pub(crate) fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let fold = |s: &str| -> Vec<char> {
        if ignore_case {
            s.chars().flat_map(char::to_lowercase).collect()
        } else {
            s.chars().collect()
        }
    };
    let (p, t) = (fold(pattern), fold(text));
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it was tried at, to backtrack to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("dynamodb:Get*", "dynamodb:GetItem", true));
        assert!(wildcard_match("DynamoDB:get*", "dynamodb:GetItem", true));
        assert!(!wildcard_match("DynamoDB:get*", "dynamodb:GetItem", false));
        assert!(wildcard_match("*", "", false));
        assert!(wildcard_match("a*b*c", "a-x-b-y-c", false));
        assert!(!wildcard_match("a*b*c", "a-x-b-y-d", false));
        assert!(wildcard_match(
            "table/t/index/*",
            "table/t/index/by-date",
            false
        ));
        assert!(!wildcard_match("table/t/index/*", "table/t", false));
        assert!(wildcard_match("payments-api#*", "payments-api#", false));
        assert!(!wildcard_match("payments-api#*", "other#x", false));
        assert!(wildcard_match("a?c", "abc", false));
        assert!(!wildcard_match("a?c", "ac", false));
        assert!(wildcard_match("**x", "yyx", false));
    }
}
