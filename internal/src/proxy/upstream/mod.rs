//! The node side of the proxy (gateway -> node): the client every attempt goes through
//! ([`client`]: HTTP/1.1 pools and one multiplexed h2 connection per node), the request to a node
//! and how sending it fails ([`request`]), the HTTP/1.1 client codec ([`http1`]), upstream HTTP/2
//! ([`h2`]), and gRPC over it ([`grpc`], [`grpc_call`]). Never imports the client side
//! ([`super::downstream`]); `scripts/check-layers.sh` holds that.

pub mod client;
pub(crate) mod grpc;
pub(crate) mod grpc_call;
pub(crate) mod h2;
pub mod http1;
pub mod request;
