//! Store messages without item values: [`safe_reason`].
//!
//! A store's refusal can quote the values of the item it refused, and those may be personal
//! data. DynamoDB writes, for example, `1 validation error detected: Value '…' at
//! 'transactItems.1.member.put.item.pk' failed to satisfy constraint: …`, `The parameter cannot
//! be converted to a numeric value: …` or `One or more parameter values were invalid: Input
//! collection [… , …] contains duplicates.`, each with the value itself where the `…` are. A
//! reason, a log line or a stored error must not carry them: [`safe_reason`] keeps the error
//! code, the wording, the names of attributes, placeholders and limits, and cuts what looks like
//! a value. It is pure and cheap, so it can be called on every message on its way to a reason.

/// What a cut value is replaced with.
pub(crate) const REDACTED: &str = "<redacted>";

/// `text` cut to at most `max` bytes on a character boundary, ending in `...` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// `message` (a store's error message, or a reason that quotes one) with what looks like an
/// item's value cut, everything else kept:
///
/// - a quoted fragment, `'…'` or `"…"`, becomes `'<redacted>'`, unless it is a request member
///   path (`at 'transactItems.1.member.put.item'`) or an expression placeholder (`":amount"`,
///   `"#status"`); a quote that is never closed is cut to the end. An apostrophe inside a word
///   (`item's`) opens no quote. Backticks are left alone: this crate's own messages put names in
///   them (tables, attributes);
/// - DynamoDB's `numeric value: X` (`The parameter cannot be converted to a numeric value: X`)
///   loses `X`, to the end of the line;
/// - DynamoDB's `Input collection [X, Y] contains duplicates` loses the collection;
/// - the key and item values this crate lists for a refused transactional write
///   (`Put on table `ledger` (entryId = e-1, amountCents = 500)`) become `name = <redacted>`.
///
/// Codes, sizes and limits are kept: `Item size has exceeded the maximum allowed size`, `Size of
/// hashkey has exceeded the maximum size limit of2048 bytes`, `Type mismatch for key pk expected:
/// S actual: N` pass unchanged.
///
/// ```
/// use lambda_idempotency::redact::safe_reason;
///
/// assert_eq!(
///     safe_reason("ValidationException: Item size has exceeded the maximum allowed size"),
///     "ValidationException: Item size has exceeded the maximum allowed size",
/// );
/// assert_eq!(
///     safe_reason("ValidationException: The parameter cannot be converted to a numeric value: 12ab"),
///     "ValidationException: The parameter cannot be converted to a numeric value: <redacted>",
/// );
/// assert_eq!(
///     safe_reason("1 validation error detected: Value 'jane@example.com' at 'item.email' failed"),
///     "1 validation error detected: Value '<redacted>' at 'item.email' failed",
/// );
/// ```
pub fn safe_reason(message: &str) -> String {
    let text = cut_quotes(message);
    let text = cut_after_phrase(&text, "numeric value: ");
    let text = cut_collections(&text);
    cut_listed_values(&text)
}

/// True for an expression placeholder: `:name` or `#name`.
fn is_placeholder(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some(':' | '#'))
        && text.len() > 1
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Quoted fragments become `'<redacted>'` (see [`safe_reason`]).
fn cut_quotes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((open, quote)) = next_opening_quote(&out, rest) {
        out.push_str(&rest[..open]);
        let inner = &rest[open + 1..];
        let Some(close) = closing_quote(inner, quote) else {
            // Never closed (a cut message): the rest may all be the value.
            out.push(quote);
            out.push_str(REDACTED);
            return out;
        };
        let content = &inner[..close];
        out.push(quote);
        if is_placeholder(content) || out[..out.len() - 1].ends_with(" at ") {
            out.push_str(content);
        } else {
            out.push_str(REDACTED);
        }
        out.push(quote);
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The position of the next quote in `rest` that opens a quoted fragment, and the quote. A `'`
/// right after a letter or digit is an apostrophe (`item's`), not a quote; `before` is the text
/// already written, for the character before `rest`.
fn next_opening_quote(before: &str, rest: &str) -> Option<(usize, char)> {
    let mut previous = before.chars().next_back();
    for (i, c) in rest.char_indices() {
        match c {
            '"' => return Some((i, c)),
            '\'' if !previous.is_some_and(char::is_alphanumeric) => return Some((i, c)),
            _ => {}
        }
        previous = Some(c);
    }
    None
}

/// The position in `inner` (the text after an opening `quote`) of the quote that closes it: for
/// `"`, the next one not escaped with `\`; for `'`, the next one not followed by a letter or
/// digit (`'it's'` closes after `s`).
fn closing_quote(inner: &str, quote: char) -> Option<usize> {
    let mut escaped = false;
    let mut chars = inner.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if quote == '"' {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => return Some(i),
                _ => escaped = false,
            }
        } else if c == '\'' && !chars.peek().is_some_and(|&(_, n)| n.is_alphanumeric()) {
            return Some(i);
        }
    }
    None
}

/// After each `phrase`, the rest of its line becomes [`REDACTED`].
fn cut_after_phrase(text: &str, phrase: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(phrase) {
        let value_start = at + phrase.len();
        out.push_str(&rest[..value_start]);
        let line_end = rest[value_start..]
            .find('\n')
            .map_or(rest.len(), |n| value_start + n);
        if line_end > value_start {
            out.push_str(REDACTED);
        }
        rest = &rest[line_end..];
    }
    out.push_str(rest);
    out
}

/// `Input collection [X, Y] contains duplicates`: the collection becomes [`REDACTED`].
fn cut_collections(text: &str) -> String {
    const OPEN: &str = "collection [";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let start = at + OPEN.len();
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        // The values may hold `]`: the collection ends where DynamoDB's wording resumes.
        let end = ["] contains", "]of type", "] of type"]
            .iter()
            .filter_map(|marker| tail.find(marker))
            .min()
            .or_else(|| tail.find(']'))
            .unwrap_or(tail.len());
        out.push_str(REDACTED);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// In this crate's description of a write, `on table `T` (name = value, ...)`, each value becomes
/// [`REDACTED`]; the names stay.
fn cut_listed_values(text: &str) -> String {
    const TABLE: &str = "on table `";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(TABLE) {
        let name_start = at + TABLE.len();
        let Some(name_len) = rest[name_start..].find('`') else {
            break;
        };
        let after_name = name_start + name_len + 1;
        out.push_str(&rest[..after_name]);
        rest = &rest[after_name..];
        let Some(list) = rest.strip_prefix(" (") else {
            continue;
        };
        // The list ends at `)` closing the description: the end of the text, or the `)` of a
        // rejection's `(... (list)) was refused`.
        let end = list
            .find(")) ")
            .or_else(|| list.strip_suffix("))").map(|l| l.len()))
            .or_else(|| list.strip_suffix(')').map(|l| l.len()))
            .unwrap_or(list.len());
        out.push_str(" (");
        out.push_str(&names_only(&list[..end]));
        rest = &list[end..];
    }
    out.push_str(rest);
    out
}

/// `a = 1, b = x, y` as `a = <redacted>, b = <redacted>`: a pair starts at the text's start or
/// after `, ` with a name followed by ` = `; everything up to the next pair is its value.
fn names_only(list: &str) -> String {
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '#' | ':'))
    };
    let mut starts: Vec<(usize, &str)> = Vec::new();
    let mut search = 0;
    while let Some(eq) = list[search..].find(" = ").map(|e| search + e) {
        let name_start = list[..eq].rfind(", ").map_or(0, |c| c + 2);
        let name = &list[name_start..eq];
        if is_name(name) && (name_start == 0 || starts.last().is_none_or(|&(s, _)| s < name_start))
        {
            starts.push((name_start, name));
        }
        search = eq + 3;
    }
    if starts.first().is_none_or(|&(s, _)| s != 0) {
        // Not a list of pairs: nothing to recognise, so nothing is kept.
        return if list.is_empty() {
            String::new()
        } else {
            REDACTED.to_owned()
        };
    }
    starts
        .iter()
        .map(|(_, name)| format!("{name} = {REDACTED}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages DynamoDB (and moto) answer with, as found in bug reports and SDK issues: the
    /// ones without values pass unchanged.
    #[test]
    fn messages_without_values_are_kept_whole() {
        for message in [
            "ValidationException: Item size has exceeded the maximum allowed size",
            "ValidationException: Item size to update has exceeded the maximum allowed size",
            "ValidationException: One or more parameter values were invalid: Size of hashkey has \
             exceeded the maximum size limit of2048 bytes",
            "ValidationException: One or more parameter values were invalid: Aggregated size of \
             all range keys has exceeded the size limit of 1024 bytes",
            "One or more parameter values were invalid: Size limit exceeded for Index Key \
             componentId Actual Size: 2175 bytes Max Size: 2048 bytes IndexName: work-sets-index",
            "One or more parameter values were invalid: Type mismatch for key pk expected: S \
             actual: N",
            "One or more parameter values were invalid: Missing the key RideID in the item",
            "ExpressionAttributeValues contains invalid value: One or more parameter values were \
             invalid: An AttributeValue may not contain an empty string for key :v0",
            "One or more parameter values are not valid. A value specified for a secondary index \
             key is not supported. The AttributeValue for a key attribute cannot contain an empty \
             string value. IndexName: Name, IndexKey: name",
            "TransactionCanceledException: Transaction cancelled, please refer cancellation \
             reasons for specific reasons [None, ConditionalCheckFailed]",
            "ConditionalCheckFailed: The conditional request failed",
            "ValidationError: Transaction request cannot include multiple operations on one item",
            "A value provided cannot be converted into a number",
            "Invalid ConditionExpression: An expression attribute value used in expression is not \
             defined; attribute value: :now",
            "handler failed: the payment's account is closed",
            "permanent failure: amount -5 is not positive",
            "idempotency key `p-1` was already used with a different payload",
        ] {
            assert_eq!(safe_reason(message), message);
        }
    }

    #[test]
    fn quoted_values_are_cut_member_paths_and_placeholders_kept() {
        assert_eq!(
            safe_reason(
                "ValidationException: 1 validation error detected: Value '[]' at 'keySchema' \
                 failed to satisfy constraint: Member must have length greater than or equal to 1"
            ),
            "ValidationException: 1 validation error detected: Value '<redacted>' at 'keySchema' \
             failed to satisfy constraint: Member must have length greater than or equal to 1"
        );
        assert_eq!(
            safe_reason(
                "1 validation error detected: Value 'Jane Doe, 1 Main St' at \
                 'transactItems.2.member.put.item.name.member.s' failed to satisfy constraint"
            ),
            "1 validation error detected: Value '<redacted>' at \
             'transactItems.2.member.put.item.name.member.s' failed to satisfy constraint"
        );
        assert_eq!(
            safe_reason(
                r#"One or more parameter values were invalid: Type mismatch, value: "4111 1111 1111 1111""#
            ),
            r#"One or more parameter values were invalid: Type mismatch, value: "<redacted>""#
        );
        assert_eq!(
            safe_reason(
                r##"ExpressionAttributeNames contains invalid key: Syntax error; key: "#status""##
            ),
            r##"ExpressionAttributeNames contains invalid key: Syntax error; key: "#status""##
        );
        assert_eq!(
            safe_reason(r#"value: "a \"quoted\" name", then more"#),
            r#"value: "<redacted>", then more"#
        );
        // A quote cut by truncation: the rest may all be the value.
        assert_eq!(safe_reason("Value 'jane@exam..."), "Value '<redacted>");
        // An apostrophe inside a word opens nothing; one inside the value does not close it.
        assert_eq!(
            safe_reason("the item's value 'O'Brien' was refused"),
            "the item's value '<redacted>' was refused"
        );
    }

    #[test]
    fn numeric_values_and_collections_are_cut() {
        assert_eq!(
            safe_reason(
                "ValidationException: The parameter cannot be converted to a numeric value: NaN"
            ),
            "ValidationException: The parameter cannot be converted to a numeric value: <redacted>"
        );
        assert_eq!(
            safe_reason(
                "ValidationException: One or more parameter values were invalid: Input collection \
                 [jane@example.com, jane@example.com] contains duplicates."
            ),
            "ValidationException: One or more parameter values were invalid: Input collection \
             [<redacted>] contains duplicates."
        );
        assert_eq!(
            safe_reason("Input collection [a]b, a]b]of type SS contains duplicates."),
            "Input collection [<redacted>]of type SS contains duplicates."
        );
    }

    #[test]
    fn a_refused_writes_key_values_are_cut_and_its_names_kept() {
        assert_eq!(
            safe_reason(
                "write 1 of the transaction (Put on table `ledger` (accountId = acct-42, \
                 amountCents = 500, entryId = e-1)) was refused: ValidationError: Item size has \
                 exceeded the maximum allowed size (failed attempt 2)"
            ),
            "write 1 of the transaction (Put on table `ledger` (accountId = <redacted>, \
             amountCents = <redacted>, entryId = <redacted>)) was refused: ValidationError: Item \
             size has exceeded the maximum allowed size (failed attempt 2)"
        );
        // A write over the item limit, found before the request (LimitError::ItemTooLarge).
        assert_eq!(
            safe_reason(
                "permanent failure: write 0 (Put on table `receipts` (email = jane@example.com)) \
                 holds at least 409600 bytes; an item holds at most 409600"
            ),
            "permanent failure: write 0 (Put on table `receipts` (email = <redacted>)) holds at \
             least 409600 bytes; an item holds at most 409600"
        );
        assert_eq!(
            safe_reason("Update on table `balances` (accountId = Jane, Doe)"),
            "Update on table `balances` (accountId = <redacted>)"
        );
        assert_eq!(
            safe_reason("Put on table `ledger`"),
            "Put on table `ledger`",
            "no list, nothing to cut"
        );
    }

    #[test]
    fn text_is_never_lost_around_the_cuts() {
        let message =
            "ValidationException: Value 'x' at 'item' failed; numeric value: 1e999\nnext line";
        assert_eq!(
            safe_reason(message),
            "ValidationException: Value '<redacted>' at 'item' failed; numeric value: <redacted>\nnext line"
        );
        assert_eq!(safe_reason(""), "");
        assert_eq!(safe_reason("Zoë's \"é\""), "Zoë's \"<redacted>\"");
    }
}
