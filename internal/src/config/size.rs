//! Byte sizes in the config file: an integer byte count or a string with a binary unit
//! (`"64KiB"`, `"16MiB"`, `"1GiB"`; also `B`, and SI `kB`/`MB`/`GB` as powers of 1000), used by the
//! `[limits]` keys SPEC sections 4 and 5 write that way. Parsing only; never panics.

use serde::Deserialize;

/// A size as written: `65536` or `"64KiB"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum SizeFile {
    /// A plain byte count.
    Bytes(u64),
    /// A number with a unit.
    Text(String),
}

impl SizeFile {
    /// The size in bytes.
    ///
    /// # Errors
    /// A message naming the accepted forms when the text is not a number with a known unit, or
    /// the value overflows `u64`.
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            SizeFile::Bytes(n) => Ok(*n),
            SizeFile::Text(s) => parse_size(s),
        }
    }
}

/// Parses `"64KiB"`-style text (see the module docs) into bytes.
///
/// # Errors
/// See [`SizeFile::bytes`].
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let bad = || format!("invalid size {text:?} (use a byte count or e.g. \"64KiB\", \"16MiB\")");
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("2 kB"), Ok(2000));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("99999999999GiB").is_err());
        assert_eq!(SizeFile::Bytes(7).bytes(), Ok(7));
    }
}
