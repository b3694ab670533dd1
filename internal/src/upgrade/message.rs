//! The frames of the handover channel and the versioned handover message (SPEC section 13).
//!
//! Every frame is a 4-byte big-endian length and that many bytes of JSON ([`super::fds`] reads and
//! writes them). The new process speaks first ([`FromNew::Hello`], naming the handover version it
//! reads); the old one answers with the [`Handover`] (its listening sockets follow it as
//! `SCM_RIGHTS` descriptors) or a refusal; the new one ends with [`FromNew::Ready`] or a refusal.
//!
//! JSON (serde_json) because the message is written once per upgrade, so speed does not matter;
//! serde_json is already a dependency; and a handover stays readable in `strace` and a fuzz corpus.
//! The message is a version and a list of [`Item`]s, each tagged with its `kind`: a kind added later
//! (a WebSocket, say, naming its descriptors by index) is a new variant and a new
//! [`HANDOVER_VERSION`]. A version this build cannot read is a refusal, never a panic:
//! [`parse_from_old`] checks the version before it reads the items.
//!
//! After "ready" the old process sends the idle HTTP/1.1 connections ([`FromOld::Connections`],
//! [`Item::Http1`]), a frame and its descriptors per batch, until it closes the channel.
//!
//! The version rule: each side reads every version from [`OLDEST_VERSION`] to its own. The new
//! process says its version in its hello; the old one writes the handover in the lower of the two
//! and sends connections only to a reader of version 2 or later. Version 1 had no connections; a
//! version 1 process neither sends nor reads them (its idle connections close as before).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::metrics::CarriedSample;

/// The handover version this build writes and reads.
pub const HANDOVER_VERSION: u32 = 2;

/// The oldest handover version this build still reads and writes (module docs: the version rule).
pub const OLDEST_VERSION: u32 = 1;

/// The first version that moves idle HTTP/1.1 connections.
pub const CONNECTIONS_VERSION: u32 = 2;

/// What the new process sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromNew {
    /// First frame: the handover version the new process reads, and its pid.
    Hello {
        /// Handover version.
        version: u32,
        /// The new process's pid.
        pid: u32,
    },
    /// Last frame of a successful handover: the new process accepts on every listener it got.
    Ready {
        /// The new process's pid.
        pid: u32,
    },
    /// The new process cannot take the handover (an unknown version, a message it cannot read).
    Refused {
        /// Why, for the old process's log.
        reason: String,
    },
}

/// What the old process sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromOld {
    /// The handover; its descriptors follow the frame.
    Handover(Handover),
    /// After "ready": idle connections; their descriptors follow the frame.
    Connections {
        /// How many descriptors follow the frame (at most [`super::fds::FDS_PER_MESSAGE`]).
        fds: usize,
        /// The connections ([`Item::Http1`]).
        items: Vec<Item>,
    },
    /// The old process will not hand over (another upgrade runs, an unknown version).
    Refused {
        /// Why, for the new process's log.
        reason: String,
    },
}

/// The versioned handover message: what moves to the new process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handover {
    /// [`HANDOVER_VERSION`] of the writer.
    pub version: u32,
    /// The old process's pid (for logs).
    pub from_pid: u32,
    /// How many descriptors follow the frame; items name theirs by index.
    pub fds: usize,
    /// What moves, in order.
    pub items: Vec<Item>,
}

/// One thing that moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Item {
    /// A listening socket: descriptor `fd`, bound to `addr`, serving as `role`.
    Listener {
        /// Which listener it is.
        role: ListenerRole,
        /// Its local address.
        addr: SocketAddr,
        /// Index of its descriptor among those after the frame.
        fd: usize,
    },
    /// Bindings of the in-memory affinity store, least recently used first.
    Bindings {
        /// The bindings.
        bindings: Vec<BindingItem>,
    },
    /// An operator drain of a node.
    Drain {
        /// Node id.
        node: String,
        /// When what is left on the node is closed, in Unix milliseconds.
        deadline_ms: u64,
        /// The drain period asked for, in milliseconds.
        period_ms: u64,
    },
    /// The counters and histograms, so they continue from the old process's values.
    Metrics {
        /// Their samples.
        samples: Vec<CarriedSample>,
    },
    /// An idle HTTP/1.1 keep-alive connection (version 2 and later, [`FromOld::Connections`]).
    Http1 {
        /// Index of its descriptor among those after the frame.
        fd: usize,
        /// The client's address.
        peer: SocketAddr,
        /// True for a TLS connection; none is sent (its session stays in the old process) and
        /// the new process closes one it gets.
        tls: bool,
        /// Bytes read off the connection and not served (a head's start), base64 (standard).
        buffered: String,
    },
}

/// Which listener a listening socket is (SPEC sections 2, 10 and 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerRole {
    /// The cleartext data plane (`[server] listen`), one per worker.
    Data,
    /// The TLS data plane (`[server.tls] listen`), one per worker.
    Tls,
    /// The admin API and `/metrics`.
    Admin,
    /// `[server] health_listen`.
    Health,
}

impl ListenerRole {
    /// The role's name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerRole::Data => "data",
            ListenerRole::Tls => "tls",
            ListenerRole::Admin => "admin",
            ListenerRole::Health => "health",
        }
    }
}

/// One binding of the in-memory store with its remaining TTL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingItem {
    /// Conn id.
    pub conn: String,
    /// Node id.
    pub node: String,
    /// Remaining TTL in milliseconds.
    pub ttl_ms: u64,
}

/// Why a frame was not taken.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// Not JSON of the expected shape.
    #[error("unreadable handover frame: {0}")]
    Json(#[from] serde_json::Error),
    /// A handover of a version this build does not read.
    #[error("unknown handover version {0} (this build reads {HANDOVER_VERSION})")]
    Version(u32),
    /// An item names a descriptor that is not there, or one another item names too.
    #[error("handover item names descriptor {fd} of {fds}, or one named twice")]
    Fd {
        /// The index named.
        fd: usize,
        /// How many descriptors the message announces.
        fds: usize,
    },
}

/// Only the fields needed to check a frame's version before reading the rest.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    version: Option<u32>,
}

/// Parses a frame of the old process: checks the version of a handover before its items, and
/// that every descriptor index is announced and named once.
///
/// # Errors
/// [`MessageError`]: not JSON of this shape, an unknown version, a bad descriptor index.
pub fn parse_from_old(frame: &[u8]) -> Result<FromOld, MessageError> {
    let env: Envelope = serde_json::from_slice(frame)?;
    if env.kind == "handover" {
        match env.version {
            Some(v) if (OLDEST_VERSION..=HANDOVER_VERSION).contains(&v) => {}
            Some(v) => return Err(MessageError::Version(v)),
            None => return Err(MessageError::Version(0)),
        }
    }
    let msg: FromOld = serde_json::from_slice(frame)?;
    match &msg {
        FromOld::Handover(h) => check_fds(h.fds, &h.items)?,
        FromOld::Connections { fds, items } => check_fds(*fds, items)?,
        FromOld::Refused { .. } => {}
    }
    Ok(msg)
}

/// Checks that every descriptor index of `items` is below `fds` and named once.
fn check_fds(fds: usize, items: &[Item]) -> Result<(), MessageError> {
    let mut seen = vec![false; fds.min(1 << 16)];
    for item in items {
        if let Item::Listener { fd, .. } | Item::Http1 { fd, .. } = item {
            match seen.get_mut(*fd) {
                Some(s) if !*s && *fd < fds => *s = true,
                _ => return Err(MessageError::Fd { fd: *fd, fds }),
            }
        }
    }
    Ok(())
}

/// Parses a frame of the new process.
///
/// # Errors
/// [`MessageError::Json`] when it is not one of [`FromNew`].
pub fn parse_from_new(frame: &[u8]) -> Result<FromNew, MessageError> {
    Ok(serde_json::from_slice(frame)?)
}

/// `msg` as a frame's JSON.
pub fn to_json<T: Serialize>(msg: &T) -> Vec<u8> {
    serde_json::to_vec(msg).expect("the handover frames hold only strings, numbers and lists")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Handover {
        Handover {
            version: HANDOVER_VERSION,
            from_pid: 41,
            fds: 2,
            items: vec![
                Item::Listener {
                    role: ListenerRole::Data,
                    addr: "127.0.0.1:8000".parse().expect("addr"),
                    fd: 0,
                },
                Item::Listener {
                    role: ListenerRole::Admin,
                    addr: "[::1]:9901".parse().expect("addr"),
                    fd: 1,
                },
                Item::Bindings {
                    bindings: vec![BindingItem {
                        conn: "c-1 \"quoted\"".into(),
                        node: "node-1".into(),
                        ttl_ms: 3_599_000,
                    }],
                },
                Item::Drain {
                    node: "node-2".into(),
                    deadline_ms: 1_765_000_000_000,
                    period_ms: 30_000,
                },
                Item::Metrics {
                    samples: vec![CarriedSample {
                        family: "gateway_requests".into(),
                        name: "gateway_requests_total".into(),
                        labels: "route=\"api\",node=\"node-1\",code=\"200\"".into(),
                        value: 12.0,
                    }],
                },
            ],
        }
    }

    #[test]
    fn every_field_survives_a_round_trip() {
        let h = full();
        let back = parse_from_old(&to_json(&FromOld::Handover(h.clone()))).expect("parses");
        assert_eq!(back, FromOld::Handover(h));
        for m in [
            FromNew::Hello { version: 1, pid: 7 },
            FromNew::Ready { pid: 7 },
            FromNew::Refused { reason: "x".into() },
        ] {
            assert_eq!(parse_from_new(&to_json(&m)).expect("parses"), m);
        }
        let r = FromOld::Refused {
            reason: "busy".into(),
        };
        assert_eq!(parse_from_old(&to_json(&r)).expect("parses"), r);
    }

    #[test]
    fn connections_survive_a_round_trip_and_bad_ones_are_errors() {
        let http1 = |fd| Item::Http1 {
            fd,
            peer: "[2001:db8::1]:50123".parse().expect("addr"),
            tls: false,
            buffered: "R0VUIC8gSFRU".into(),
        };
        let c = FromOld::Connections {
            fds: 2,
            items: vec![http1(0), http1(1)],
        };
        assert_eq!(parse_from_old(&to_json(&c)).expect("parses"), c);
        for (fds, items) in [(1, vec![http1(0), http1(1)]), (2, vec![http1(0), http1(0)])] {
            let bad = FromOld::Connections { fds, items };
            assert!(matches!(
                parse_from_old(&to_json(&bad)),
                Err(MessageError::Fd { .. })
            ));
        }
        let junk = br#"{"type":"connections","fds":1,"items":[{"kind":"http1","fd":0}]}"#;
        assert!(parse_from_old(junk).is_err());
        // A version 1 handover is still read.
        let mut h = full();
        h.version = OLDEST_VERSION;
        let back = parse_from_old(&to_json(&FromOld::Handover(h.clone()))).expect("parses");
        assert_eq!(back, FromOld::Handover(h));
    }

    #[test]
    fn an_unknown_version_is_refused_before_its_items_are_read() {
        let frame = br#"{"type":"handover","version":99,"items":[{"kind":"teleport"}]}"#;
        assert!(matches!(
            parse_from_old(frame),
            Err(MessageError::Version(99))
        ));
    }

    #[test]
    fn bad_descriptor_indexes_and_garbage_are_errors() {
        let mut h = full();
        h.fds = 1;
        let e = parse_from_old(&to_json(&FromOld::Handover(h)));
        assert!(matches!(e, Err(MessageError::Fd { fd: 1, fds: 1 })));
        let mut h = full();
        h.items.push(h.items[0].clone());
        let e = parse_from_old(&to_json(&FromOld::Handover(h)));
        assert!(matches!(e, Err(MessageError::Fd { fd: 0, .. })));
        for junk in [&b""[..], b"{", b"[]", b"{\"type\":\"handover\"}", b"\xff"] {
            assert!(parse_from_old(junk).is_err());
            assert!(parse_from_new(junk).is_err());
        }
    }
}
