//! Where the Redis store connects: the SPEC section 7 URL forms parsed into a [`RedisTarget`], and
//! one [`Conn`] type over a single server, a Redis Cluster or a Sentinel-managed master.
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

/// Why a Redis URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The URL does not have the shape its scheme needs.
    #[error("invalid redis URL {url:?}: {reason}")]
    Shape {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The redis crate rejected the URL (bad host, port, database, or TLS not compiled in).
    #[error("invalid redis URL {url:?}")]
    Client {
        /// The URL as configured.
        url: String,
        /// The crate's reason.
        #[source]
        source: ::redis::RedisError,
    },
}

/// A parsed `affinity.redis_url` (SPEC section 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `redis://`, `rediss://`, `redis+unix://`, `unix://`: one server, as the redis crate parses it.
    Single {
        /// The URL, unchanged.
        url: String,
        /// `rediss://` only: PEM bytes of the CA that signs the server's certificate
        /// (`affinity.redis_ca`); `None` = the system roots.
        ca: Option<Vec<u8>>,
    },
    /// `redis+cluster://[user[:password]@]h1:p1,h2:p2`: seed nodes of a Redis Cluster, each as a
    /// `redis://[user[:password]@]host:port` URL.
    Cluster {
        /// One `redis://` URL per seed node.
        nodes: Vec<String>,
    },
    /// `redis+sentinel://[user[:password]@]h1:p1[,h2:p2]/master-name[/db]`: sentinels that name the
    /// current master. The credentials and database apply to the master, not to the sentinels.
    Sentinel {
        /// One `redis://host:port` URL per sentinel.
        sentinels: Vec<String>,
        /// The monitored master's name.
        master: String,
        /// `redis://[user[:password]@]x/db`: credentials and database for the master connection.
        node: String,
    },
}

/// Splits `[user[:password]@]h1:p1,h2:p2` into the userinfo (with its `@`) and checked `host:port` items.
fn hosts<'a>(url: &str, rest: &'a str) -> Result<(&'a str, Vec<&'a str>), TargetError> {
    let shape = |reason| TargetError::Shape {
        url: url.to_string(),
        reason,
    };
    let (auth, list) = match rest.rfind('@') {
        Some(i) => rest.split_at(i + 1),
        None => ("", rest),
    };
    let mut out = Vec::new();
    for h in list.split(',') {
        let Some((host, port)) = h.rsplit_once(':') else {
            return Err(shape("every host needs a port (host:port)"));
        };
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(shape(
                "every host needs a name and a numeric port (host:port)",
            ));
        }
        out.push(h);
    }
    Ok((auth, out))
}

impl RedisTarget {
    /// Parses `url` (schemes of SPEC section 7) and checks each resulting URL with the redis crate.
    ///
    /// # Errors
    /// [`TargetError`] for an unknown scheme, a host without a numeric port, a sentinel URL without
    /// a master name, or a URL the redis crate rejects (including `rediss://` in a build without TLS).
    pub fn parse(url: &str) -> Result<RedisTarget, TargetError> {
        let shape = |reason| TargetError::Shape {
            url: url.to_string(),
            reason,
        };
        let check = |u: &str| {
            u.into_connection_info()
                .map(drop)
                .map_err(|source| TargetError::Client {
                    url: url.to_string(),
                    source,
                })
        };
        let target = if let Some(rest) = url.strip_prefix("redis+cluster://") {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            if rest.contains('/') {
                return Err(shape(
                    "a cluster URL has no path (Redis Cluster has only database 0)",
                ));
            }
            let (auth, list) = hosts(url, rest)?;
            RedisTarget::Cluster {
                nodes: list.iter().map(|h| format!("redis://{auth}{h}")).collect(),
            }
        } else if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            let (authority, path) = rest
                .split_once('/')
                .ok_or_else(|| shape("a sentinel URL needs /master-name after the hosts"))?;
            let (auth, list) = hosts(url, authority)?;
            let mut parts = path.split('/').filter(|p| !p.is_empty());
            let master = parts
                .next()
                .ok_or_else(|| shape("a sentinel URL needs /master-name after the hosts"))?;
            let db = parts.next().unwrap_or("0");
            if parts.next().is_some() || db.parse::<i64>().is_err() {
                return Err(shape(
                    "a sentinel URL path is /master-name or /master-name/db",
                ));
            }
            RedisTarget::Sentinel {
                sentinels: list.iter().map(|h| format!("redis://{h}")).collect(),
                master: master.to_string(),
                // The host is a placeholder: only the credentials and database are used.
                node: format!("redis://{auth}placeholder:6379/{db}"),
            }
        } else if ["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|p| url.starts_with(p))
        {
            RedisTarget::Single {
                url: url.to_string(),
                ca: None,
            }
        } else {
            return Err(shape("unsupported scheme: use redis://, rediss://, redis+cluster:// or redis+sentinel://"));
        };
        match &target {
            RedisTarget::Single { url, .. } => check(url)?,
            RedisTarget::Cluster { nodes } => nodes.iter().try_for_each(|n| check(n))?,
            RedisTarget::Sentinel {
                sentinels, node, ..
            } => {
                sentinels.iter().try_for_each(|n| check(n))?;
                check(node)?;
            }
        }
        Ok(target)
    }

    /// Sets the CA (PEM bytes of `affinity.redis_ca`) that a `rediss://` server's certificate must
    /// chain to; other targets and schemes ignore it.
    pub fn with_ca(mut self, pem: Option<Vec<u8>>) -> RedisTarget {
        if let RedisTarget::Single { url, ca } = &mut self {
            if url.starts_with("rediss://") {
                *ca = pem;
            }
        }
        self
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_server_urls_pass_through() {
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://:secret@h:1/2",
            "redis+unix:///tmp/r.sock",
            "unix:///tmp/r.sock",
        ] {
            assert_eq!(
                RedisTarget::parse(url).expect(url),
                RedisTarget::Single {
                    url: url.to_string(),
                    ca: None,
                }
            );
        }
    }

    #[test]
    fn cluster_url_lists_seed_nodes() {
        let t = RedisTarget::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7001").expect("valid");
        assert_eq!(
            t,
            RedisTarget::Cluster {
                nodes: vec![
                    "redis://10.0.0.1:7000".into(),
                    "redis://10.0.0.2:7001".into()
                ]
            }
        );
        let t = RedisTarget::parse("redis+cluster://u:p@a:1,b:2/").expect("valid");
        assert_eq!(
            t,
            RedisTarget::Cluster {
                nodes: vec!["redis://u:p@a:1".into(), "redis://u:p@b:2".into()]
            }
        );
        assert!(!t.resolves_master());
    }

    #[test]
    fn sentinel_url_names_the_master() {
        let t = RedisTarget::parse("redis+sentinel://s1:26379,s2:26380/mymaster").expect("valid");
        assert_eq!(
            t,
            RedisTarget::Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26380".into()],
                master: "mymaster".into(),
                node: "redis://placeholder:6379/0".into(),
            }
        );
        assert!(t.resolves_master());
        let RedisTarget::Sentinel { node, .. } =
            RedisTarget::parse("redis+sentinel://:pw@s1:26379/m/3").expect("valid")
        else {
            panic!("sentinel")
        };
        let info = node.as_str().into_connection_info().expect("node info");
        assert_eq!(
            (info.redis.db, info.redis.password.as_deref()),
            (3, Some("pw"))
        );
    }

    #[test]
    fn malformed_urls_are_refused() {
        for url in [
            "http://h:1",
            "redis+cluster://h1,h2:2",
            "redis+cluster://h1:x",
            "redis+cluster://h1:1/0",
            "redis+cluster://:1",
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel://s1:26379/m/x",
            "redis+sentinel://s1:26379/m/0/extra",
            "redis://h:notaport",
        ] {
            assert!(RedisTarget::parse(url).is_err(), "{url} should be refused");
        }
    }
}
