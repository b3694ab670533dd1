//! The zone filter (SPEC section 6): same-zone nodes first when the gateway has a zone; all nodes
//! when none is selectable there. Nodes without a zone never match a zone.

use super::Candidates;

/// Keeps candidates in `zone` if any; otherwise all.
pub(crate) fn filter(all: Candidates, zone: Option<&str>) -> Candidates {
    let Some(zone) = zone else { return all };
    let same: Candidates = all
        .iter()
        .filter(|c| {
            c.node
                .metadata
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("zone") && v == zone)
        })
        .cloned()
        .collect();
    if same.is_empty() {
        all
    } else {
        same
    }
}
