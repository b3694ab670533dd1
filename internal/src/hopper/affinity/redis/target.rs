//! Where the Redis store connects: the SPEC section 7 URL forms parsed into a [`RedisTarget`]
//! (connecting to one is `conn.rs`). Pure: no I/O.

use ::redis::IntoConnectionInfo;

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
pub(crate) enum RedisTarget {
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
    pub(crate) fn parse(url: &str) -> Result<RedisTarget, TargetError> {
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
    pub(crate) fn with_ca(mut self, pem: Option<Vec<u8>>) -> RedisTarget {
        if let RedisTarget::Single { url, ca } = &mut self {
            if url.starts_with("rediss://") {
                *ca = pem;
            }
        }
        self
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
