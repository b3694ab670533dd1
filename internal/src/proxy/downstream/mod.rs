//! The client side of the proxy (client -> gateway): request-head checks before anything is
//! forwarded ([`guard`]), the HTTP/1.1 server codec and connection driver ([`http1`]), and the
//! HTTP/2 abuse limits around hyper's h2 server ([`h2`]); and what a connection's driver hands the
//! phases with each request ([`Handover`]). Never imports the node side ([`super::upstream`]);
//! `scripts/check-layers.sh` holds that.

pub mod guard;
pub mod h2;
pub mod http1;

use crate::proxy::http1_codec::head::Present;

/// What the driver that read a request knows of it beside the `Request` itself.
pub struct Handover {
    /// Given by the gateway's own HTTP/1.1 driver for an upgrade head: where a WebSocket takes
    /// the client's socket once the `101` went out ([`http1::upgrade`]); `None` takes hyper's
    /// upgrade.
    pub on_upgrade: Option<http1::upgrade::OnUpgrade>,
    /// Which looked-up fields the request can hold (that driver's parser saw the names).
    pub present: Present,
}

impl Handover {
    /// A request hyper read (HTTP/2): its upgrade is hyper's, any field may be there.
    pub const HYPER: Handover = Handover {
        on_upgrade: None,
        present: Present::UNKNOWN,
    };
}
