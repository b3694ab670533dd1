//! The retry rule of SPEC section 4 as one pure function: what failed on an attempt, whether the
//! method is idempotent, whether the body can still be sent again, and what earlier attempts
//! spent decide whether the request goes to another node, to the same node on a new connection,
//! or fails. [`super::forward`] carries the decision out; the rule itself has no IO and is unit
//! tested rule by rule below.
//!
//! - nothing was sent (connect failure, request handed back unsent): another node, any method;
//! - the node refused the stream (RST_STREAM(REFUSED_STREAM), RFC 9113 section 8.7): another node,
//!   any method, while the body can be sent again;
//! - a graceful GOAWAY above the stream's id (not processed): the same node on a new connection,
//!   any method, at most `retries.max(1) + 2` times;
//! - a pooled connection the node had closed while idle (CASE-21): the same node on a new
//!   connection, once, idempotent methods only, no passive-health penalty;
//! - any other failure after the request was sent: another node for idempotent methods whose body
//!   is not yet streamed past recall, up to `retries` times; else the request fails.

use super::upstream::request::{is_refused, is_unprocessed, SendError};
use crate::hopper::HopReason;

/// What failed on one attempt, as the retry rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Nothing was sent: connect refused or timed out, TLS handshake failed, request handed back.
    Connect,
    /// The node reset the stream with REFUSED_STREAM before processing it.
    Refused,
    /// A graceful GOAWAY (or a REFUSED_STREAM GOAWAY) above the stream's id: not processed.
    GoAway,
    /// A reused pooled connection the node had closed while idle; the request may have been written.
    Stale,
    /// The node reset or broke the request after it was sent.
    Reset,
}

/// The health penalty a failure costs the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Penalty {
    /// `record_connect_error`: counts toward ejection like a failed probe.
    Connect,
    /// `record_passive_error`: a passive-health failure (SPEC section 6).
    Passive,
    /// None: the node declined cleanly or closed an idle connection.
    None,
}

/// How a request that cannot be retried fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailAs {
    /// `502` naming the connect failure (gRPC 14).
    Connect,
    /// `502` naming the node's failure after sending (gRPC 14).
    Upstream,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Exclude the failed node and try another; `hop` moves a bound id, `retry` labels
    /// `gateway_retries_total{reason}`. Without another node the request fails as `fail`.
    OtherNode {
        hop: HopReason,
        retry: &'static str,
        fail: FailAs,
    },
    /// Send again to the same node on a new connection; `retry` labels the retry.
    SameNode { retry: &'static str },
    /// Give up.
    Fail(FailAs),
}

/// What earlier attempts of the request have spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Spent {
    /// Retries after the request was sent (GOAWAY replays and resets retried elsewhere).
    pub(crate) post_send: u32,
    /// Whether the one stale-connection replay was used.
    pub(crate) stale_replayed: bool,
}

impl Failure {
    /// Classifies an attempt's error.
    pub(crate) fn of(err: &SendError) -> Failure {
        match err {
            SendError::Connect(..) | SendError::NotSent(..) => Failure::Connect,
            SendError::Sent(e) | SendError::Stale(e) if is_unprocessed(&**e) => {
                if is_refused(&**e) {
                    Failure::Refused
                } else {
                    Failure::GoAway
                }
            }
            SendError::Stale(_) => Failure::Stale,
            SendError::Sent(_) => Failure::Reset,
        }
    }

    /// The penalty the node pays for it.
    pub(crate) fn penalty(self) -> Penalty {
        match self {
            Failure::Connect => Penalty::Connect,
            Failure::Reset => Penalty::Passive,
            Failure::Refused | Failure::GoAway | Failure::Stale => Penalty::None,
        }
    }
}

/// The rule (module docs): takes the failure, whether the method is idempotent (RFC 9110 section
/// 9.2.2), whether the body can be sent again (never polled, or read within the replay limit),
/// what was spent, and the route's `retries`; returns the decision and what is spent after it.
pub(crate) fn decide(
    failure: Failure,
    idempotent: bool,
    replayable: bool,
    spent: Spent,
    retries: u32,
) -> (Decision, Spent) {
    let mut after = spent;
    let decision = match failure {
        // The body was handed back with the request: it is always there to send.
        Failure::Connect => Decision::OtherNode {
            hop: HopReason::ConnectError,
            retry: "connect_error",
            fail: FailAs::Connect,
        },
        Failure::Refused if replayable => Decision::OtherNode {
            hop: HopReason::Reset,
            retry: "refused_stream",
            fail: FailAs::Connect,
        },
        Failure::Refused | Failure::GoAway => {
            if replayable && spent.post_send < retries.max(1) + 2 {
                after.post_send += 1;
                Decision::SameNode { retry: "goaway" }
            } else {
                Decision::Fail(FailAs::Upstream)
            }
        }
        Failure::Stale if replayable && idempotent && !spent.stale_replayed => {
            after.stale_replayed = true;
            Decision::SameNode {
                retry: "stale_connection",
            }
        }
        Failure::Stale | Failure::Reset => {
            if replayable && idempotent && spent.post_send < retries {
                after.post_send += 1;
                Decision::OtherNode {
                    hop: HopReason::Reset,
                    retry: "reset",
                    fail: FailAs::Upstream,
                }
            } else {
                Decision::Fail(FailAs::Upstream)
            }
        }
    };
    (decision, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Spent = Spent {
        post_send: 0,
        stale_replayed: false,
    };

    fn other(hop: HopReason, retry: &'static str, fail: FailAs) -> Decision {
        Decision::OtherNode { hop, retry, fail }
    }

    /// Nothing sent: another node for any method, body or not, however much was spent.
    #[test]
    fn connect_failure_goes_to_another_node_for_any_method() {
        let spent = Spent {
            post_send: 9,
            stale_replayed: true,
        };
        for (idempotent, replayable) in [(true, true), (false, true), (false, false)] {
            let (d, after) = decide(Failure::Connect, idempotent, replayable, spent, 0);
            assert_eq!(
                d,
                other(HopReason::ConnectError, "connect_error", FailAs::Connect)
            );
            assert_eq!(after, spent, "a connect retry spends nothing");
        }
    }

    /// REFUSED_STREAM: another node for any method while the body can be sent; else it fails.
    #[test]
    fn refused_stream_goes_to_another_node_while_the_body_can_be_sent() {
        let (d, after) = decide(Failure::Refused, false, true, NONE, 0);
        assert_eq!(
            d,
            other(HopReason::Reset, "refused_stream", FailAs::Connect)
        );
        assert_eq!(after, NONE);
        let (d, _) = decide(Failure::Refused, true, false, NONE, 3);
        assert_eq!(d, Decision::Fail(FailAs::Upstream));
    }

    /// GOAWAY above the stream: the same node again, any method, up to retries.max(1) + 2 times.
    #[test]
    fn goaway_replays_on_the_same_node_a_bounded_number_of_times() {
        let mut spent = NONE;
        for _ in 0..3 {
            let (d, after) = decide(Failure::GoAway, false, true, spent, 0);
            assert_eq!(d, Decision::SameNode { retry: "goaway" });
            spent = after;
        }
        assert_eq!(spent.post_send, 3);
        let (d, _) = decide(Failure::GoAway, false, true, spent, 0);
        assert_eq!(
            d,
            Decision::Fail(FailAs::Upstream),
            "retries 0: 1 + 2 replays"
        );
        let (d, _) = decide(Failure::GoAway, true, true, spent, 2);
        assert_eq!(
            d,
            Decision::SameNode { retry: "goaway" },
            "retries 2: 4 replays"
        );
        let (d, _) = decide(Failure::GoAway, true, false, NONE, 2);
        assert_eq!(d, Decision::Fail(FailAs::Upstream), "no body to send again");
    }

    /// A stale pooled connection: once on the same node for idempotent methods, then the reset rule.
    #[test]
    fn stale_connection_replays_once_then_follows_the_reset_rule() {
        let (d, after) = decide(Failure::Stale, true, true, NONE, 0);
        assert_eq!(
            d,
            Decision::SameNode {
                retry: "stale_connection"
            }
        );
        assert!(after.stale_replayed);
        let (d, _) = decide(Failure::Stale, true, true, after, 0);
        assert_eq!(d, Decision::Fail(FailAs::Upstream), "retries 0");
        let (d, _) = decide(Failure::Stale, true, true, after, 1);
        assert_eq!(d, other(HopReason::Reset, "reset", FailAs::Upstream));
        let (d, _) = decide(Failure::Stale, false, true, NONE, 3);
        assert_eq!(
            d,
            Decision::Fail(FailAs::Upstream),
            "POST is never replayed"
        );
    }

    /// After sending: another node for idempotent methods with a replayable body, up to retries.
    #[test]
    fn reset_after_sending_retries_idempotent_requests_up_to_retries() {
        let mut spent = NONE;
        for _ in 0..2 {
            let (d, after) = decide(Failure::Reset, true, true, spent, 2);
            assert_eq!(d, other(HopReason::Reset, "reset", FailAs::Upstream));
            spent = after;
        }
        let (d, _) = decide(Failure::Reset, true, true, spent, 2);
        assert_eq!(d, Decision::Fail(FailAs::Upstream), "retries spent");
        let (d, _) = decide(Failure::Reset, false, true, NONE, 2);
        assert_eq!(d, Decision::Fail(FailAs::Upstream), "not idempotent");
        let (d, _) = decide(Failure::Reset, true, false, NONE, 2);
        assert_eq!(
            d,
            Decision::Fail(FailAs::Upstream),
            "body streamed past recall"
        );
    }

    /// Penalties: connect failures and resets count against the node; clean refusals do not.
    #[test]
    fn only_connect_failures_and_resets_cost_the_node() {
        assert_eq!(Failure::Connect.penalty(), Penalty::Connect);
        assert_eq!(Failure::Reset.penalty(), Penalty::Passive);
        for f in [Failure::Refused, Failure::GoAway, Failure::Stale] {
            assert_eq!(f.penalty(), Penalty::None, "{f:?}");
        }
    }
}
