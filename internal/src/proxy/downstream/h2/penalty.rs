//! [`Penalties`]: a growing cost for a source address whose connections keep breaking the HTTP/2
//! abuse limits (SPEC section 4). Ending an abusive connection with GOAWAY bounds the
//! work one connection costs, but a flooder that reconnects at once makes the gateway pay a
//! handshake and a read batch per connection, thousands of times a second, and every honest
//! connection on the same worker waits behind them. So each connection ended for abuse is a
//! strike against its source IP; past [`FREE_STRIKES`] strikes, a new connection from that
//! address is held before its first byte is read, until [`penalty`] after the latest strike
//! (doubling per strike, at most [`MAX_PENALTY`]). A source with no strike for [`FORGIVE_AFTER`]
//! starts again from zero.
//!
//! A source is an IPv4 address, or an IPv6 /64 (one host usually holds a whole /64 and can pick
//! any address in it); IPv4-mapped IPv6 addresses count as their IPv4 address.
//!
//! Only connections the gateway ended for abuse count: an honest client that cancels streams
//! below the reset rate, or gets early answers, is never struck. Clients behind one NAT address
//! share its strikes (they are held too while one of them floods). A held connection keeps its
//! socket and a connection permit, so an address may have at most [`MAX_HELD_PER_SOURCE`] held at
//! once; past that its new connections are refused (closed unread) until the hold passes.
//!
//! Bounded: at most [`MAX_SOURCES`] addresses are remembered; when full, forgiven records are
//! swept, and if none is, the new strike is not recorded. Never holds its mutex across an
//! `.await`; spawns nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Connections an address may have ended for abuse before its next ones are held.
pub const FREE_STRIKES: u32 = 2;
/// The hold after the first strike past [`FREE_STRIKES`]; doubled per further strike.
pub const FIRST_PENALTY: Duration = Duration::from_millis(100);
/// The longest hold.
pub const MAX_PENALTY: Duration = Duration::from_secs(10);
/// A source with no strike for this long is forgotten.
pub const FORGIVE_AFTER: Duration = Duration::from_secs(60);
/// Addresses remembered at most (about 40 bytes each).
pub const MAX_SOURCES: usize = 16_384;
/// Connections of one address held at once at most.
pub const MAX_HELD_PER_SOURCE: u32 = 16;

/// The strikes of one address.
#[derive(Debug, Clone, Copy)]
struct Record {
    strikes: u32,
    last: Instant,
    /// Its connections being held now.
    held: u32,
}

/// The hold that `strikes` strikes earn: zero up to [`FREE_STRIKES`], then [`FIRST_PENALTY`]
/// doubled per strike, capped at [`MAX_PENALTY`].
pub fn penalty(strikes: u32) -> Duration {
    if strikes <= FREE_STRIKES {
        return Duration::ZERO;
    }
    let doublings = (strikes - FREE_STRIKES - 1).min(16);
    FIRST_PENALTY
        .saturating_mul(1 << doublings)
        .min(MAX_PENALTY)
}

/// Strikes per source address; see the module docs.
#[derive(Debug, Default)]
pub struct Penalties {
    sources: Mutex<HashMap<IpAddr, Record>>,
}

/// The source `ip` belongs to: itself for IPv4, the /64 for IPv6 (see the module docs).
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
    }
}

/// The gateway process's penalties, shared by every listener and worker.
pub static SOURCES: LazyLock<Penalties> = LazyLock::new(Penalties::default);

impl Penalties {
    fn sources(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Record>> {
        self.sources
            .lock()
            .expect("penalty mutex is never poisoned: no panics while held")
    }

    /// Records that a connection from `ip` was ended for abuse at `now`; returns the address's
    /// strikes (0 if it could not be recorded: the table is full of unforgiven addresses).
    pub fn strike(&self, ip: IpAddr, now: Instant) -> u32 {
        let ip = source_of(ip);
        let mut sources = self.sources();
        if sources.len() >= MAX_SOURCES && !sources.contains_key(&ip) {
            sources
                .retain(|_, r| r.held > 0 || now.saturating_duration_since(r.last) < FORGIVE_AFTER);
            if sources.len() >= MAX_SOURCES {
                return 0;
            }
        }
        let r = sources.entry(ip).or_insert(Record {
            strikes: 0,
            last: now,
            held: 0,
        });
        if now.saturating_duration_since(r.last) >= FORGIVE_AFTER {
            r.strikes = 0;
        }
        r.strikes = r.strikes.saturating_add(1);
        r.last = now;
        r.strikes
    }

    /// Until when a connection from `ip` accepted at `now` is held before it is read, if it is.
    pub fn held_until(&self, ip: IpAddr, now: Instant) -> Option<Instant> {
        let ip = source_of(ip);
        let sources = self.sources();
        let r = sources.get(&ip)?;
        if now.saturating_duration_since(r.last) >= FORGIVE_AFTER {
            return None;
        }
        let until = r.last + penalty(r.strikes);
        (until > now).then_some(until)
    }

    /// The strikes recorded against `ip` (0 if none).
    pub fn strikes(&self, ip: IpAddr) -> u32 {
        self.sources().get(&source_of(ip)).map_or(0, |r| r.strikes)
    }

    /// Counts one more held connection of `ip` until the returned slot is dropped; `None` if
    /// `ip` has [`MAX_HELD_PER_SOURCE`] held already (or is not recorded).
    pub fn hold_slot(&'static self, ip: IpAddr) -> Option<HeldSlot> {
        let ip = source_of(ip);
        let mut sources = self.sources();
        let r = sources.get_mut(&ip)?;
        if r.held >= MAX_HELD_PER_SOURCE {
            return None;
        }
        r.held += 1;
        Some(HeldSlot { ip, of: self })
    }
}

/// One held connection of an address, counted until dropped ([`Penalties::hold_slot`]).
#[derive(Debug)]
pub struct HeldSlot {
    ip: IpAddr,
    of: &'static Penalties,
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        if let Some(r) = self.of.sources().get_mut(&self.ip) {
            r.held = r.held.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strikes_past_the_free_ones_hold_only_that_address() {
        let p = Penalties::default();
        let t0 = Instant::now();
        let bad: IpAddr = "127.0.0.2".parse().expect("test value");
        let good: IpAddr = "127.0.0.1".parse().expect("test value");
        assert_eq!(p.strike(bad, t0), 1);
        assert_eq!(p.strike(bad, t0), 2);
        assert_eq!(p.held_until(bad, t0), None, "the free strikes cost nothing");
        assert_eq!(p.strike(bad, t0), 3);
        assert_eq!(p.held_until(bad, t0), Some(t0 + FIRST_PENALTY));
        assert_eq!(p.strike(bad, t0), 4);
        assert_eq!(p.held_until(bad, t0), Some(t0 + 2 * FIRST_PENALTY));
        assert_eq!(p.held_until(good, t0), None);
        assert_eq!(
            p.held_until(bad, t0 + 2 * FIRST_PENALTY),
            None,
            "served once it passed"
        );
        for _ in 0..100 {
            p.strike(bad, t0);
        }
        assert_eq!(p.held_until(bad, t0), Some(t0 + MAX_PENALTY));
        // Forgiven after a quiet minute: the next strike is the first again.
        let later = t0 + FORGIVE_AFTER;
        assert_eq!(p.held_until(bad, later), None);
        assert_eq!(p.strike(bad, later), 1);
    }

    #[test]
    fn held_connections_per_source_are_bounded() {
        static P: LazyLock<Penalties> = LazyLock::new(Penalties::default);
        let ip: IpAddr = "10.0.0.9".parse().expect("test value");
        assert!(P.hold_slot(ip).is_none(), "an address with no strike");
        P.strike(ip, Instant::now());
        let slots: Vec<HeldSlot> = (0..MAX_HELD_PER_SOURCE)
            .map(|_| P.hold_slot(ip).expect("below the bound"))
            .collect();
        assert!(P.hold_slot(ip).is_none(), "past the bound");
        drop(slots);
        assert!(P.hold_slot(ip).is_some(), "released with the slots");
    }

    #[test]
    fn ipv6_sources_are_64s_and_mapped_ipv4_is_ipv4() {
        let ip = |s: &str| -> IpAddr { s.parse().expect("test value") };
        assert_eq!(source_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(source_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(source_of(ip("192.0.2.7")), ip("192.0.2.7"));
        let p = Penalties::default();
        let t0 = Instant::now();
        for i in 0..3 {
            p.strike(ip(&format!("2001:db8:1:2::{i}")), t0);
        }
        assert!(
            p.held_until(ip("2001:db8:1:2:ffff::9"), t0).is_some(),
            "same /64"
        );
        assert_eq!(p.held_until(ip("2001:db8:1:3::1"), t0), None, "another /64");
    }

    #[test]
    fn penalty_doubles_and_is_capped() {
        assert_eq!(penalty(0), Duration::ZERO);
        assert_eq!(penalty(FREE_STRIKES), Duration::ZERO);
        assert_eq!(penalty(FREE_STRIKES + 1), FIRST_PENALTY);
        assert_eq!(penalty(FREE_STRIKES + 3), 4 * FIRST_PENALTY);
        assert_eq!(penalty(u32::MAX), MAX_PENALTY);
    }
}
