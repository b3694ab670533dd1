//! The text format's field formatter ([`TextFields`]): the same bytes as tracing-subscriber's
//! `DefaultFields` (SPEC section 8: "structured fields are written `key=value`, tracing's
//! default"), without its `write!` of three formatted arguments per field (the access
//! line's fields were ~17,000 instructions, about as much as the proxying of the request it logs).
//!
//! Rule by rule, as `DefaultFields` 0.3 writes them (`fmt/format/mod.rs`, `DefaultVisitor`):
//! - fields are separated by one space, the first has none;
//! - a field is `name=` and its value's `Debug` form: a string quoted and escaped (`str`'s
//!   `Debug`), an integer or bool as `Debug` writes it, a `%` value as its `Display`;
//! - the `message` field is written without a name, as its `Debug` form with the terminal
//!   control characters tracing-subscriber 0.3.20+ sanitises (`fmt/format/escape.rs`: ESC, BEL,
//!   BS, FF, DEL as `\xNN`, C1 controls U+0080..U+009F as `\u{NN}`) escaped the same way, but a
//!   run of safe characters is written at once instead of character by character (it cost
//!   ~5,000 instructions of every hop's INFO line);
//! - what `DefaultVisitor` treats specially is left to it: raw identifiers (`r#` names), `log.`
//!   metadata fields of tracing-log, errors with their sources, floats, 128-bit integers, byte
//!   slices, and every field when the writer paints ANSI styles.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// The text format's [`tracing_subscriber::fmt::FormatFields`] (module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct TextFields;

impl<'a> MakeVisitor<Writer<'a>> for TextFields {
    type Visitor = TextVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> TextVisitor<'a> {
        TextVisitor {
            writer: target,
            is_empty: true,
            result: Ok(()),
        }
    }
}

/// The visitor [`TextFields`] writes one event's or span's fields with.
#[derive(Debug)]
pub struct TextVisitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl TextVisitor<'_> {
    /// True if `field` is written here rather than by `DefaultVisitor` (module docs).
    fn plain(&self, field: &Field) -> bool {
        let name = field.name();
        self.result.is_ok()
            && !self.writer.has_ansi_escapes()
            && name != "message"
            && !name.starts_with("r#")
            && !name.starts_with("log.")
    }

    /// Writes the separator and `name=`.
    fn key(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::replace(&mut self.is_empty, false) {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(field.name())?;
        self.writer.write_char('=')
    }

    /// Writes `field` as `name=text` (`text` is the value's `Debug` form already).
    fn value(&mut self, field: &Field, text: &str) {
        self.result = self.key(field).and_then(|()| self.writer.write_str(text));
    }

    /// Hands `field` to `DefaultVisitor` through `record`, keeping the separator state.
    fn delegate(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut v = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut v);
        self.result = v.finish();
        // A `log.` field is skipped by DefaultVisitor, separator included.
        if !field.name().starts_with("log.") {
            self.is_empty = false;
        }
    }
}

/// A writer that passes text on with tracing-subscriber's terminal control characters escaped
/// (module docs), each run of other characters in one `write_str`.
struct Sanitized<'w, 'a>(&'w mut Writer<'a>);

impl fmt::Write for Sanitized<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // ESC, BEL, BS, FF and DEL are single bytes; a C1 control is 0xC2 0x80..=0x9F in UTF-8.
        let special = |b: u8| matches!(b, 0x1b | 0x07 | 0x08 | 0x0c | 0x7f | 0xc2);
        if !s.bytes().any(special) {
            return self.0.write_str(s);
        }
        let mut run = 0;
        for (i, ch) in s.char_indices() {
            let escaped = match ch {
                '\x1b' => Some("\\x1b"),
                '\x07' => Some("\\x07"),
                '\x08' => Some("\\x08"),
                '\x0c' => Some("\\x0c"),
                '\x7f' => Some("\\x7f"),
                '\u{80}'..='\u{9f}' => None,
                _ => continue,
            };
            self.0.write_str(&s[run..i])?;
            match escaped {
                Some(e) => self.0.write_str(e)?,
                None => write!(self.0, "\\u{{{:x}}}", ch as u32)?,
            }
            run = i + ch.len_utf8();
        }
        self.0.write_str(&s[run..])
    }
}

/// `s` as `str`'s `Debug` writes it: quoted, with `\"` and `\\` escaped (and any other character
/// that is not printable ASCII left to `Debug` itself).
fn write_quoted(w: &mut Writer<'_>, s: &str) -> fmt::Result {
    if s.bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    {
        w.write_char('"')?;
        w.write_str(s)?;
        w.write_char('"')
    } else {
        write!(w, "{s:?}")
    }
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.plain(field) {
            return self.delegate(field, |v| v.record_str(field, value));
        }
        self.result = self
            .key(field)
            .and_then(|()| write_quoted(&mut self.writer, value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if !self.plain(field) {
            return self.delegate(field, |v| v.record_u64(field, value));
        }
        self.value(field, itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if !self.plain(field) {
            return self.delegate(field, |v| v.record_i64(field, value));
        }
        self.value(field, itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if !self.plain(field) {
            return self.delegate(field, |v| v.record_bool(field, value));
        }
        self.value(field, if value { "true" } else { "false" });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.delegate(field, |v| v.record_f64(field, value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.delegate(field, |v| v.record_i128(field, value));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.delegate(field, |v| v.record_u128(field, value));
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        self.delegate(field, |v| v.record_bytes(field, value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" && self.result.is_ok() && !self.writer.has_ansi_escapes() {
            if !std::mem::replace(&mut self.is_empty, false) {
                self.result = self.writer.write_char(' ');
            }
            let sanitize = self.writer.sanitizes_ansi_escapes();
            self.result = self.result.and_then(|()| {
                if sanitize {
                    fmt::Write::write_fmt(
                        &mut Sanitized(&mut self.writer),
                        format_args!("{value:?}"),
                    )
                } else {
                    write!(self.writer, "{value:?}")
                }
            });
            return;
        }
        if !self.plain(field) {
            return self.delegate(field, |v| v.record_debug(field, value));
        }
        self.result = self
            .key(field)
            .and_then(|()| write!(self.writer, "{value:?}"));
    }
}

impl VisitOutput<fmt::Result> for TextVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for TextVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
#[path = "fields_tests.rs"]
mod tests;
