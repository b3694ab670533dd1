//! The handover message parser (SPEC section 13) never panics: any frame is a message or an
//! error (a refusal), and an accepted handover names only descriptors it announces, each once;
//! what it accepts survives a round trip.
#![no_main]
use internal::upgrade::message::{self, FromOld, Item};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = message::parse_from_new(data);
    let Ok(msg) = message::parse_from_old(data) else {
        return;
    };
    if let FromOld::Handover(h) = &msg {
        let mut seen = std::collections::HashSet::new();
        for item in &h.items {
            if let Item::Listener { fd, .. } = item {
                assert!(*fd < h.fds && seen.insert(*fd));
            }
        }
    }
    let again = message::parse_from_old(&message::to_json(&msg)).expect("a round trip parses");
    assert_eq!(again, msg);
});
