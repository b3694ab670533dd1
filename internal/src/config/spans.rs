//! Where each key of a TOML document sits, so errors can name a line and column.
//!
//! Paths use the SPEC section 3 error syntax: `routes[2].cluster`, `server.listen`.

use std::collections::HashMap;
use std::ops::Range;

use toml::de::{DeTable, DeValue};

/// Byte ranges of every key path in one document.
#[derive(Debug, Default)]
pub(crate) struct SpanIndex {
    spans: HashMap<String, Range<usize>>,
    line_starts: Vec<usize>,
}

impl SpanIndex {
    /// Indexes `text`; a document that does not parse yields an index with line starts only.
    pub(crate) fn new(text: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        let mut index = SpanIndex {
            spans: HashMap::new(),
            line_starts,
        };
        if let Ok(doc) = DeTable::parse(text) {
            index.walk_table("", doc.get_ref());
        }
        index
    }

    fn walk_table(&mut self, prefix: &str, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            // Point at the key itself: that is where an operator looks first.
            self.spans.insert(path.clone(), key.span());
            self.walk_value(&path, value.get_ref());
        }
    }

    fn walk_value(&mut self, path: &str, value: &DeValue<'_>) {
        match value {
            DeValue::Table(t) => self.walk_table(path, t),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    self.spans.insert(item_path.clone(), item.span());
                    self.walk_value(&item_path, item.get_ref());
                }
            }
            _ => {}
        }
    }

    /// Line and column (both 1-based) of `path`, or of its nearest indexed ancestor; `(1, 1)` if none.
    pub(crate) fn locate(&self, path: &str) -> (usize, usize) {
        let mut p = path;
        loop {
            if let Some(span) = self.spans.get(p) {
                return self.line_col(span.start);
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return (1, 1),
            }
        }
    }

    /// Line and column (1-based) of byte `offset`.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let col = offset - self.line_starts[line - 1] + 1;
        (line, col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_nested_keys_and_array_items() {
        let text = "[server]\nlisten = \"x\"\n\n[[routes]]\nid = \"a\"\n\n[[routes]]\nid = \"b\"\ncluster = \"c\"\n";
        let idx = SpanIndex::new(text);
        assert_eq!(idx.locate("server.listen"), (2, 1));
        assert_eq!(idx.locate("routes[1].cluster"), (9, 1));
        assert_eq!(idx.locate("routes[1].missing"), (7, 1));
        assert_eq!(idx.locate("nothing"), (1, 1));
    }
}
