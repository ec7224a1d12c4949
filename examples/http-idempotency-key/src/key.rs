//! The `Idempotency-Key` header: where it is, and what makes it valid.

use lambda_http::http::HeaderMap;

/// The header's name (HTTP header names are case-insensitive).
pub const HEADER: &str = "idempotency-key";

/// The longest key accepted, in bytes.
pub const MAX_LEN: usize = 255;

/// Why a request's `Idempotency-Key` is not a key: the API answers `400` with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No `Idempotency-Key` header.
    #[error("the Idempotency-Key header is required")]
    Missing,
    /// The header is there more than once.
    #[error("the Idempotency-Key header is given more than once")]
    Repeated,
    /// The header (unquoted) is empty or blank.
    #[error("the Idempotency-Key header is empty")]
    Empty,
    /// The header is longer than [`MAX_LEN`].
    #[error("the Idempotency-Key header is {len} bytes long; at most {MAX_LEN} are allowed")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// The header holds something other than printable ASCII.
    #[error("the Idempotency-Key header must be printable ASCII")]
    NotPrintable,
}

/// The request's idempotency key: the `Idempotency-Key` header, unquoted when it is sent as a
/// structured-field string (`"8e03978e-..."`, as the IETF draft writes it), or bare.
///
/// ```
/// use http_idempotency_key::key::{KeyError, idempotency_key};
/// use lambda_http::http::{HeaderMap, HeaderValue};
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(idempotency_key(&headers), Err(KeyError::Missing));
/// headers.insert("Idempotency-Key", HeaderValue::from_static("\"order-1\""));
/// assert_eq!(idempotency_key(&headers), Ok("order-1"));
/// headers.insert("Idempotency-Key", HeaderValue::from_static("\"\""));
/// assert_eq!(idempotency_key(&headers), Err(KeyError::Empty));
/// ```
pub fn idempotency_key(headers: &HeaderMap) -> Result<&str, KeyError> {
    let mut values = headers.get_all(HEADER).iter();
    let value = values.next().ok_or(KeyError::Missing)?;
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    // `to_str` accepts visible ASCII (and tabs, refused below) only.
    let text = value.to_str().map_err(|_| KeyError::NotPrintable)?;
    let key = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if key.contains('\t') {
        return Err(KeyError::NotPrintable);
    }
    if key.trim().is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_LEN {
        return Err(KeyError::TooLong { len: key.len() });
    }
    Ok(key)
}
