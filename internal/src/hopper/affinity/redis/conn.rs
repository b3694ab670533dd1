//! One [`Conn`] type over a single server, a Redis Cluster or a Sentinel-managed master, and how a
//! [`RedisTarget`] connects (SPEC section 7 URL forms; Sentinel resolution of the master).
//!
//! Owns no task; the connection types below spawn the redis crate's own driver tasks, which end
//! when the last clone of the connection is dropped. Never blocks: every connect is async and the
//! caller bounds it with a timeout.

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    Client, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult,
    Value,
};

use super::target::RedisTarget;

impl RedisTarget {
    /// A client for one server at `url`: over TLS verified against `ca` when given (rediss://),
    /// else as the redis crate opens the URL (rediss:// with the system roots).
    fn single_client(url: &str, ca: Option<&Vec<u8>>) -> RedisResult<Client> {
        match ca {
            Some(pem) => Client::build_with_tls(
                url,
                ::redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            None => Client::open(url),
        }
    }

    /// True for Sentinel: a failed connection should be rebuilt, because the master may have moved.
    pub(super) fn resolves_master(&self) -> bool {
        matches!(self, RedisTarget::Sentinel { .. })
    }

    /// Asks the sentinels in turn for the current master's `host:port` (Sentinel client
    /// guidelines, step 1: the first sentinel that answers wins).
    ///
    /// # Errors
    /// The last sentinel's error when none names the master.
    pub(super) async fn sentinel_master_addr(
        sentinels: &[String],
        master: &str,
        timeout: Duration,
    ) -> RedisResult<(String, u16)> {
        let mut last = None;
        for s in sentinels {
            let ask = async {
                let mut c = Client::open(s.as_str())?
                    .get_multiplexed_async_connection()
                    .await?;
                ::redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(master)
                    .query_async::<Option<(String, u16)>>(&mut c)
                    .await
            };
            match tokio::time::timeout(timeout, ask).await {
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => last = Some(no_master(format!("{s} does not know {master:?}"))),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(no_master(format!("{s} did not answer in time"))),
            }
        }
        Err(last.unwrap_or_else(|| no_master("no sentinel configured".into())))
    }

    /// Resolves the master through the sentinels and returns a client for it with its
    /// `host:port`, after checking on a connection that its `ROLE` is master (guidelines, step 2).
    async fn master_client(
        sentinels: &[String],
        master: &str,
        node: &str,
        timeout: Duration,
    ) -> RedisResult<(Client, String)> {
        let (host, port) = Self::sentinel_master_addr(sentinels, master, timeout).await?;
        let mut info = node.into_connection_info()?;
        info.addr = ConnectionAddr::Tcp(host.clone(), port);
        let client = Client::open(info)?;
        let mut c = client.get_multiplexed_async_connection().await?;
        check_master(&mut c).await?;
        Ok((client, format!("{host}:{port}")))
    }

    /// Opens the command connection and, for one server or Sentinel, checks that it speaks to a
    /// master (`ROLE`). Calls are bounded by `timeout`; connecting by `connect_timeout`. Returns the
    /// master's `host:port` for Sentinel (the address a `+switch-master` is compared against).
    ///
    /// # Errors
    /// The redis crate's error when no server answers or the handshake fails; `READONLY` when the
    /// server is a replica.
    pub(super) async fn connect(
        &self,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> RedisResult<(Conn, Option<String>)> {
        let manager = |client: Client| {
            // Few, short retries: the store's own maintainer retries on its interval, and every call
            // is bounded by `timeout` anyway.
            let cfg = ConnectionManagerConfig::new()
                .set_response_timeout(timeout)
                .set_connection_timeout(connect_timeout)
                .set_number_of_retries(1)
                .set_max_delay(100);
            ConnectionManager::new_with_config(client, cfg)
        };
        match self {
            RedisTarget::Single { url, ca } => {
                let mut c = manager(Self::single_client(url, ca.as_ref())?).await?;
                check_master(&mut c).await?;
                Ok((Conn::Manager(c), None))
            }
            RedisTarget::Cluster { nodes } => {
                // Redirects (MOVED, ASK) count as retries: allow a few; the call stays bounded.
                let client = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .response_timeout(timeout)
                    .retries(4)
                    .min_retry_wait(10)
                    .max_retry_wait(100)
                    .build()?;
                Ok((Conn::Cluster(client.get_async_connection().await?), None))
            }
            RedisTarget::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let (client, addr) =
                    Self::master_client(sentinels, master, node, connect_timeout).await?;
                let mut c = manager(client).await?;
                check_master(&mut c).await?;
                Ok((Conn::Manager(c), Some(addr)))
            }
        }
    }

    /// Clients to try, in order, for the pub/sub subscription. In a cluster any node works, since
    /// `PUBLISH` is broadcast to every node over the cluster bus; with Sentinel it is the current
    /// master (re-resolved).
    ///
    /// # Errors
    /// The redis crate's error when the URL is unusable or no sentinel names a master.
    pub(super) async fn pubsub_clients(&self, timeout: Duration) -> RedisResult<Vec<Client>> {
        match self {
            RedisTarget::Single { url, ca } => Ok(vec![Self::single_client(url, ca.as_ref())?]),
            RedisTarget::Cluster { nodes } => {
                nodes.iter().map(|n| Client::open(n.as_str())).collect()
            }
            RedisTarget::Sentinel {
                sentinels,
                master,
                node,
            } => Ok(vec![
                Self::master_client(sentinels, master, node, timeout)
                    .await?
                    .0,
            ]),
        }
    }

    /// A subscription to `+switch-master` on the first sentinel that accepts (Sentinel client
    /// guidelines: react to failovers at once instead of waiting for errors).
    ///
    /// # Errors
    /// The last sentinel's error; an error too for a target that is not Sentinel.
    pub(super) async fn switch_subscription(
        &self,
        timeout: Duration,
    ) -> RedisResult<::redis::aio::PubSub> {
        let RedisTarget::Sentinel { sentinels, .. } = self else {
            return Err(no_master("not a sentinel target".into()));
        };
        let mut last = no_master("no sentinel configured".into());
        for s in sentinels {
            let attempt = async {
                let mut p = Client::open(s.as_str())?.get_async_pubsub().await?;
                p.subscribe("+switch-master").await?;
                Ok::<_, ::redis::RedisError>(p)
            };
            match tokio::time::timeout(timeout, attempt).await {
                Ok(Ok(p)) => return Ok(p),
                Ok(Err(e)) => last = e,
                Err(_) => last = no_master(format!("{s} did not answer in time")),
            }
        }
        Err(last)
    }
}

/// Sentinel resolution failed.
fn no_master(detail: String) -> ::redis::RedisError {
    ::redis::RedisError::from((
        ErrorKind::MasterNameNotFoundBySentinel,
        "no sentinel named a usable master",
        detail,
    ))
}

/// `ROLE` on `c`: `Ok` for a master, a `READONLY` error naming the role otherwise (the server
/// cannot take writes).
///
/// # Errors
/// The call's error, or `ErrorKind::ReadOnly` when the role is not master.
pub(super) async fn check_master(c: &mut impl ConnectionLike) -> RedisResult<()> {
    let role: Vec<Value> = ::redis::cmd("ROLE").query_async(c).await?;
    let name = match role.first() {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        other => format!("{other:?}"),
    };
    if name == "master" {
        Ok(())
    } else {
        Err(::redis::RedisError::from((
            ErrorKind::ReadOnly,
            "the server is not a master",
            format!("ROLE {name}"),
        )))
    }
}

/// A command connection: multiplexed, cheap to clone, reconnects by itself after I/O errors.
#[derive(Clone)]
pub(super) enum Conn {
    /// A single server or the Sentinel-named master.
    Manager(ConnectionManager),
    /// A Redis Cluster (routes each key to its slot's node).
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Manager(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Manager(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Manager(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
