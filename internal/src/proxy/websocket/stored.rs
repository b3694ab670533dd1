//! The handshake headers a socket keeps for re-dials (SPEC section 5: a hop replays the original
//! handshake), in one compact heap block instead of a `HeaderMap` (issue 16: memory per idle
//! WebSocket; a map of a dozen owned values costs about 1.3 KiB per socket, the block about the
//! size of the header text).
//!
//! The block holds `name:value\n` per field, in the map's order, repeated names kept. Header names
//! are tokens and values never hold CR or LF (RFC 9110 section 5.5; `http` refuses them), so the
//! block splits back without escaping. The upstream handshake is always HTTP/1.1 (RFC 6455
//! section 4.1), where a value's HPACK "sensitive" flag means nothing, so it is not kept. Pure.

use http::{HeaderMap, HeaderName, HeaderValue};

/// A header map stored as one block; see the module docs.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct StoredHeaders {
    block: Box<[u8]>,
}

impl std::fmt::Debug for StoredHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values may be credentials (cookies, Authorization): names only.
        f.debug_list()
            .entries(self.fields().map(|(n, _)| n))
            .finish()
    }
}

impl StoredHeaders {
    /// Stores `headers` (every field, in order; the values are copied, so nothing of the
    /// connection's read buffer stays alive).
    pub(super) fn new(headers: &HeaderMap) -> Self {
        let len = headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 2)
            .sum();
        let mut block = Vec::with_capacity(len);
        for (name, value) in headers {
            block.extend_from_slice(name.as_str().as_bytes());
            block.push(b':');
            block.extend_from_slice(value.as_bytes());
            block.push(b'\n');
        }
        StoredHeaders {
            block: block.into_boxed_slice(),
        }
    }

    /// The fields as (name, value) byte pairs, in order.
    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.block
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                Some((&line[..colon], &line[colon + 1..]))
            })
    }

    /// The headers as a map again, for a request to a node.
    pub(super) fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.fields().count());
        for (name, value) in self.fields() {
            // Both were valid when stored, so neither fails.
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
                map.append(n, v);
            }
        }
        map
    }

    /// The first value of `name`.
    pub(super) fn get(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        self.fields().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// These headers without any field named `name`.
    pub(super) fn without(&self, name: &HeaderName) -> StoredHeaders {
        let mut map = self.to_map();
        map.remove(name);
        StoredHeaders::new(&map)
    }

    /// Heap bytes held.
    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.block.len()
    }
}

#[cfg(test)]
mod tests {
    use http::header::{COOKIE, HOST, SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_KEY};

    use super::*;

    fn sample() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_static("example.test:8080"));
        h.append(COOKIE, HeaderValue::from_static("a=1"));
        h.append(COOKIE, HeaderValue::from_static("b=2: with colon"));
        h.insert(
            SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        h.insert(
            SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_static("permessage-deflate"),
        );
        h.insert("x-empty", HeaderValue::from_static(""));
        h.insert(
            "x-bytes",
            HeaderValue::from_bytes(b"caf\xc3\xa9\t!").expect("valid"),
        );
        h
    }

    #[test]
    fn stored_headers_come_back_as_the_same_map_in_one_block() {
        let h = sample();
        let s = StoredHeaders::new(&h);
        assert_eq!(s.to_map(), h);
        let order: Vec<_> = s
            .to_map()
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let want: Vec<_> = h.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        assert_eq!(order, want, "order and repeated names kept");
        let text: usize = h.iter().map(|(n, v)| n.as_str().len() + v.len() + 2).sum();
        assert_eq!(s.heap_len(), text);
    }

    #[test]
    fn stored_headers_answer_get_and_without() {
        let s = StoredHeaders::new(&sample());
        assert_eq!(
            s.get(&SEC_WEBSOCKET_KEY),
            Some(&b"dGhlIHNhbXBsZSBub25jZQ=="[..])
        );
        assert_eq!(s.get(&COOKIE), Some(&b"a=1"[..]), "the first value");
        let w = s.without(&SEC_WEBSOCKET_EXTENSIONS);
        assert_eq!(w.get(&SEC_WEBSOCKET_EXTENSIONS), None);
        let mut want = sample();
        want.remove(SEC_WEBSOCKET_EXTENSIONS);
        assert_eq!(w.to_map(), want);
        assert!(!format!("{s:?}").contains("a=1"), "Debug shows no values");
    }
}
