//! The per-request version decision (SPEC section 7 canary): the wanted version from header or
//! query, stable split buckets by key, and metadata keys that differ in case.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::version::{self, wanted, Wanted};
use crate::config::{CanaryConfig, NoMatch, Split, SplitKey};

fn canary(split: Vec<Split>) -> CanaryConfig {
    CanaryConfig {
        version_header: HeaderName::from_static("x-version"),
        version_query: "version".into(),
        metadata_key: "version".into(),
        no_match: NoMatch::FallbackAll,
        split,
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_str(v).expect("valid value"));
    }
    h
}

fn split30() -> Vec<Split> {
    vec![Split {
        by: SplitKey::Header(HeaderName::from_static("x-user-id")),
        percent: 30.0,
        version: "v2".into(),
    }]
}

#[test]
fn wanted_reads_header_then_query() {
    let c = canary(Vec::new());
    let v = |version: Option<&str>| Wanted {
        version: version.map(str::to_string),
        avoid: Vec::new(),
        split_key: None,
    };
    assert_eq!(
        wanted(&c, &headers(&[("x-version", "v2")]), Some("version=v1")),
        v(Some("v2")),
        "header wins"
    );
    assert_eq!(
        wanted(&c, &headers(&[]), Some("a=1&version=v1")),
        v(Some("v1"))
    );
    assert_eq!(
        wanted(&c, &headers(&[("x-version", "")]), Some("version=v1")),
        v(Some("v1")),
        "empty header ignored"
    );
    assert_eq!(wanted(&c, &headers(&[]), Some("versions=v1")), v(None));
    assert_eq!(wanted(&c, &headers(&[]), None), v(None));
    let mut named = canary(Vec::new());
    named.version_header = HeaderName::from_static("x-canary");
    named.version_query = "ver".into();
    assert_eq!(
        wanted(
            &named,
            &headers(&[("x-version", "v9"), ("x-canary", "v2")]),
            None
        ),
        v(Some("v2"))
    );
    assert_eq!(
        wanted(&named, &headers(&[]), Some("version=v9&ver=v3")),
        v(Some("v3"))
    );
}

#[test]
fn split_buckets_are_stable_and_sized() {
    let c = canary(split30());
    let mut in_split = 0;
    for u in 0..10_000 {
        let id = format!("user-{u}");
        let w = wanted(&c, &headers(&[("x-user-id", &id)]), None);
        assert_eq!(
            w,
            wanted(&c, &headers(&[("x-user-id", &id)]), None),
            "stable for {id}"
        );
        match w.version.as_deref() {
            Some("v2") => {
                in_split += 1;
                assert!(w.avoid.is_empty());
            }
            None => assert_eq!(
                w.avoid,
                ["v2"],
                "outside every bucket: avoid the split version"
            ),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        (2_800..=3_200).contains(&in_split),
        "{in_split} of 10000 in a 30 % split"
    );
    // No key: outside every bucket.
    assert_eq!(
        wanted(&c, &headers(&[]), None),
        Wanted {
            version: None,
            avoid: vec!["v2".into()],
            split_key: None,
        }
    );
    // An explicit version beats the split.
    assert_eq!(
        wanted(
            &c,
            &headers(&[("x-user-id", "user-1"), ("x-version", "v1")]),
            None
        )
        .version
        .as_deref(),
        Some("v1")
    );
}

#[test]
fn split_keys_from_cookie_and_query() {
    let by_cookie = canary(vec![Split {
        by: SplitKey::Cookie("uid".into()),
        percent: 100.0,
        version: "v2".into(),
    }]);
    assert_eq!(
        wanted(&by_cookie, &headers(&[("cookie", "a=b; uid=42")]), None)
            .version
            .as_deref(),
        Some("v2")
    );
    assert_eq!(
        wanted(&by_cookie, &headers(&[("cookie", "a=b")]), None).version,
        None
    );
    let by_query = canary(vec![Split {
        by: SplitKey::Query("uid".into()),
        percent: 100.0,
        version: "v3".into(),
    }]);
    assert_eq!(
        wanted(&by_query, &headers(&[]), Some("uid=7"))
            .version
            .as_deref(),
        Some("v3")
    );
    let none = canary(vec![Split {
        by: SplitKey::Query("uid".into()),
        percent: 0.0,
        version: "v3".into(),
    }]);
    assert_eq!(
        wanted(&none, &headers(&[]), Some("uid=7")),
        Wanted {
            version: None,
            avoid: vec!["v3".into()],
            split_key: None,
        }
    );
}

#[test]
fn two_splits_take_disjoint_buckets() {
    let key = || SplitKey::Header(HeaderName::from_static("x-user-id"));
    let c = canary(vec![
        Split {
            by: key(),
            percent: 10.0,
            version: "v2".into(),
        },
        Split {
            by: key(),
            percent: 20.0,
            version: "v3".into(),
        },
    ]);
    let mut counts = [0; 3];
    for u in 0..10_000 {
        let w = wanted(&c, &headers(&[("x-user-id", &format!("u{u}"))]), None);
        counts[match w.version.as_deref() {
            Some("v2") => 0,
            Some("v3") => 1,
            _ => 2,
        }] += 1;
    }
    assert!(
        (800..=1_200).contains(&counts[0]) && (1_800..=2_200).contains(&counts[1]),
        "{counts:?}"
    );
}

#[test]
fn metadata_key_case_mismatch_is_found() {
    let text = crate::config::test_fixtures::two_versions("Version")
        + "  [routes.canary]\n  metadata_key = \"version\"\n";
    let cfg = crate::config::load_str(&text, "t.toml").expect("valid");
    let found = version::metadata_key_case_mismatches(&cfg);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (
            found[0].node.as_str(),
            found[0].found.as_str(),
            found[0].configured.as_str()
        ),
        ("a", "Version", "version")
    );
}

/// A 5 % split by `x-user-id` puts 5 % +- 1.5 % of 10,000 distinct users on v2, and each
/// user gets the same decision on all of 20 requests.
#[test]
fn split_five_percent_of_ten_thousand_users_each_stable_over_twenty_requests() {
    let c = canary(vec![Split {
        by: SplitKey::Header(HeaderName::from_static("x-user-id")),
        percent: 5.0,
        version: "v2".into(),
    }]);
    let mut on_v2 = 0;
    for u in 0..10_000 {
        let h = headers(&[("x-user-id", &format!("user-{u}"))]);
        let first = wanted(&c, &h, None);
        for _ in 1..20 {
            assert_eq!(wanted(&c, &h, None), first, "user-{u} moved");
        }
        on_v2 += usize::from(first.version.as_deref() == Some("v2"));
    }
    assert!(
        (350..=650).contains(&on_v2),
        "{on_v2} of 10000 users on v2, want 500 +- 150"
    );
}
