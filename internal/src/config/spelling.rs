//! The config spellings of the keyword-valued keys (`protocol`, `lb`, `websocket`, ...): one list per
//! enum, read by validation (to parse and to name the accepted values) and by the admin API (to
//! show a value as it is written in the file).

use super::server_tls::TlsVersion;
use super::{IdMode, NoMatch, OnAllDown, Picker, Protocol, WsMode};

/// An enum whose config values are fixed words.
pub trait Spelled: Copy + PartialEq + 'static {
    /// Every value with its spelling, in the order error messages list them.
    const SPELLINGS: &'static [(&'static str, Self)];

    /// The config spelling of `self`.
    fn as_str(self) -> &'static str {
        Self::SPELLINGS
            .iter()
            .find(|(_, v)| *v == self)
            .map(|(name, _)| *name)
            .expect("every value is spelled")
    }
}

impl Spelled for Protocol {
    const SPELLINGS: &'static [(&'static str, Self)] =
        &[("http1", Self::Http1), ("h2c", Self::H2c), ("h2", Self::H2)];
}

impl Spelled for Picker {
    const SPELLINGS: &'static [(&'static str, Self)] = &[
        ("round_robin", Self::RoundRobin),
        ("random", Self::Random),
        ("weighted", Self::Weighted),
        ("least_request", Self::LeastRequest),
    ];
}

impl Spelled for WsMode {
    const SPELLINGS: &'static [(&'static str, Self)] = &[
        ("hop", Self::Hop),
        ("hint", Self::Hint),
        ("close", Self::Close),
    ];
}

impl Spelled for OnAllDown {
    const SPELLINGS: &'static [(&'static str, Self)] =
        &[("fallback", Self::Fallback), ("fail_open", Self::FailOpen)];
}

impl Spelled for NoMatch {
    const SPELLINGS: &'static [(&'static str, Self)] = &[
        ("fallback_all", Self::FallbackAll),
        ("reject", Self::Reject),
    ];
}

impl Spelled for TlsVersion {
    const SPELLINGS: &'static [(&'static str, Self)] = &[("1.2", Self::V1_2), ("1.3", Self::V1_3)];
}

impl Spelled for IdMode {
    const SPELLINGS: &'static [(&'static str, Self)] =
        &[("client", Self::Client), ("signed", Self::Signed)];
}
