use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::picker::pick;
use super::version;
use super::*;
use crate::config::{Config, NodeConfig, Picker, Protocol};
use crate::metrics::Metrics;
use crate::registry::{NodeSettings, Registry};

/// Nodes `n0..` with the given configured weights and metadata.
fn nodes(specs: &[(u32, &[(&str, &str)])]) -> Vec<Arc<Node>> {
    let reg = Registry::new(Arc::new(Metrics::new()));
    let health = Config::go_defaults().clusters[0].health.clone();
    let name: Arc<str> = Arc::from("c");
    specs
        .iter()
        .enumerate()
        .map(|(i, (w, meta))| {
            let metadata: BTreeMap<String, String> = meta
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let cfg = NodeConfig {
                id: format!("n{i}"),
                addr: "127.0.0.1:1".into(),
                weight: *w,
                metadata,
            };
            reg.node(
                &name,
                &cfg,
                NodeSettings {
                    health: health.clone(),
                    protocol: Protocol::Http1,
                    tls: None,
                },
            )
            .0
        })
        .collect()
}

fn cluster_of(lb: Picker, nodes: Vec<Arc<Node>>) -> Cluster {
    Cluster {
        name: Arc::from("c"),
        protocol: Protocol::Http1,
        lb,
        nodes,
        cursor: AtomicUsize::new(0),
    }
}

/// A cluster with configured weights and full-health candidates whose weight is the effective one.
fn cluster(lb: Picker, weights: &[u32]) -> (Cluster, Vec<Candidate>) {
    let specs: Vec<(u32, &[(&str, &str)])> = weights.iter().map(|w| (*w, &[][..])).collect();
    let ns = nodes(&specs);
    let cands = ns
        .iter()
        .map(|n| Candidate {
            node: n.clone(),
            weight: crate::registry::weight::effective(n.weight, 100, 100),
        })
        .collect();
    (cluster_of(lb, ns), cands)
}

fn index(node: &Node) -> usize {
    node.id[1..].parse().expect("test ids are n<index>")
}

fn shares_of(c: &Cluster, cands: &[Candidate], n: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut counts = vec![0; c.nodes.len()];
    for _ in 0..n {
        counts[index(&pick(c, cands, &mut rng).expect("non-empty candidates"))] += 1;
    }
    counts
}

fn shares(lb: Picker, weights: &[u32], n: usize) -> Vec<usize> {
    let (c, cands) = cluster(lb, weights);
    shares_of(&c, &cands, n, 7)
}

fn ids(cands: &[Candidate]) -> Vec<String> {
    cands.iter().map(|c| c.node.id.to_string()).collect()
}

// === pickers ===

#[test]
fn round_robin_equal_weights_alternates_exactly() {
    assert_eq!(shares(Picker::RoundRobin, &[100, 100], 10), vec![5, 5]);
    let (c, cands) = cluster(Picker::RoundRobin, &[1, 1, 1]);
    let mut rng = StdRng::seed_from_u64(1);
    let order: Vec<_> = (0..6)
        .map(|_| {
            pick(&c, &cands, &mut rng)
                .expect("non-empty")
                .id
                .to_string()
        })
        .collect();
    assert_eq!(order, ["n0", "n1", "n2", "n0", "n1", "n2"]);
}

#[test]
fn every_picker_follows_weights() {
    for lb in [Picker::RoundRobin, Picker::Weighted, Picker::LeastRequest] {
        let s = shares(lb, &[80, 20], 10_000);
        assert!((7_700..=8_300).contains(&s[0]), "{lb:?}: {s:?}");
    }
    let s = shares(Picker::Random, &[80, 20], 10_000);
    assert!(
        (4_700..=5_300).contains(&s[0]),
        "random ignores configured weight: {s:?}"
    );
    let s = shares(Picker::LeastRequest, &[50, 50], 10_000);
    assert!((4_500..=5_500).contains(&s[0]), "{s:?}");
}

#[test]
fn every_picker_honours_health_and_warmup() {
    // Node 0 degraded to 20 %, node 1 warming at 50 %, node 2 full: effective 20 : 50 : 100 of equal configured weights.
    for lb in [
        Picker::RoundRobin,
        Picker::Random,
        Picker::Weighted,
        Picker::LeastRequest,
    ] {
        let ns = nodes(&[(100, &[]), (100, &[]), (100, &[])]);
        let pct = [(20, 100), (100, 50), (100, 100)];
        let cands: Vec<Candidate> = ns
            .iter()
            .zip(pct)
            .map(|(n, (h, w))| Candidate {
                node: n.clone(),
                weight: crate::registry::weight::effective(n.weight, h, w),
            })
            .collect();
        let c = cluster_of(lb, ns);
        let s = shares_of(&c, &cands, 17_000, 3);
        let want = [2_000.0, 5_000.0, 10_000.0];
        for (got, want) in s.iter().zip(want) {
            assert!((*got as f64 - want).abs() < 400.0, "{lb:?}: {s:?}");
        }
    }
}

#[test]
fn least_request_prefers_the_less_loaded_node() {
    let (c, cands) = cluster(Picker::LeastRequest, &[100, 100]);
    let _busy: Vec<_> = (0..5).map(|_| c.nodes[0].runtime.start_request()).collect();
    let s = shares_of(&c, &cands, 1_000, 5);
    // P2C with two nodes always compares both: the idle one wins every time.
    assert_eq!(s, vec![0, 1_000]);
}

/// Property: over many random weight vectors, every picker's shares follow the weights (random: uniform).
#[test]
fn picker_shares_follow_random_weight_vectors() {
    let mut gen = StdRng::seed_from_u64(0x5eed);
    const PICKS: usize = 20_000;
    for case in 0..40 {
        let len = gen.random_range(2..=6);
        let weights: Vec<u32> = (0..len).map(|_| gen.random_range(1..=1_000)).collect();
        let sum: u32 = weights.iter().sum();
        for lb in [
            Picker::RoundRobin,
            Picker::Random,
            Picker::Weighted,
            Picker::LeastRequest,
        ] {
            let (c, cands) = cluster(lb, &weights);
            let s = shares_of(&c, &cands, PICKS, case);
            for (i, got) in s.iter().enumerate() {
                let want = match lb {
                    Picker::Random => 1.0 / len as f64,
                    _ => f64::from(weights[i]) / f64::from(sum),
                };
                let got = *got as f64 / PICKS as f64;
                assert!((got - want).abs() < 0.02, "case {case} {lb:?} weights {weights:?}: node {i} got {got:.4}, want {want:.4} ({s:?})");
            }
        }
    }
}

#[test]
fn empty_candidates_pick_nothing() {
    let (c, _) = cluster(Picker::RoundRobin, &[1]);
    assert!(pick(&c, &[], &mut StdRng::seed_from_u64(1)).is_none());
}

// === filters ===

fn canary_nodes() -> Candidates {
    let ns = nodes(&[
        (100, &[("version", "v1"), ("zone", "hz")]),
        (100, &[("Version", "v1"), ("zone", "sh")]),
        (100, &[("version", "v2"), ("zone", "hz")]),
        (100, &[]),
    ]);
    ns.into_iter()
        .map(|n| Candidate { node: n, weight: 1 })
        .collect()
}

fn criteria<'a>(version: Option<&'a str>, avoid: &'a [String]) -> Criteria<'a> {
    Criteria {
        key: None,
        version,
        metadata_key: "version",
        avoid_versions: avoid,
        exclude: &[],
        zone: None,
    }
}

#[test]
fn version_filter_table() {
    let v2 = vec!["v2".to_string()];
    let v1v2 = vec!["v1".to_string(), "v2".to_string(), "v3".to_string()];
    // (version, avoid, kept ids, miss)
    type Case<'a> = (
        Option<&'a str>,
        &'a [String],
        Vec<&'a str>,
        Option<VersionMiss>,
    );
    let cases: Vec<Case<'_>> = vec![
        (Some("v1"), &[], vec!["n0", "n1"], None),
        (Some("v2"), &[], vec!["n2"], None),
        (
            Some("V2"),
            &[],
            vec!["n0", "n1", "n2", "n3"],
            Some(VersionMiss {
                candidates: 4,
                matched: 0,
            }),
        ),
        (
            Some("v3"),
            &[],
            vec!["n0", "n1", "n2", "n3"],
            Some(VersionMiss {
                candidates: 4,
                matched: 0,
            }),
        ),
        (None, &[], vec!["n0", "n1", "n2", "n3"], None),
        (None, &v2, vec!["n0", "n1", "n3"], None),
        (None, &v1v2, vec!["n3"], None),
    ];
    for (version, avoid, want, miss) in cases {
        let (kept, got_miss) = version::filter(canary_nodes(), &criteria(version, avoid));
        assert_eq!(ids(&kept), want, "version {version:?} avoid {avoid:?}");
        assert_eq!(got_miss, miss, "version {version:?}");
    }
}

#[test]
fn avoided_versions_serve_when_nothing_else_is_left() {
    let only_v2: Candidates = canary_nodes()
        .into_iter()
        .filter(|c| &*c.node.id == "n2")
        .collect();
    let avoid = vec!["v2".to_string()];
    let (kept, miss) = version::filter(only_v2, &criteria(None, &avoid));
    assert_eq!(ids(&kept), ["n2"]);
    assert_eq!(miss, None);
}

#[test]
fn metadata_key_matches_case_insensitively() {
    let cands = canary_nodes();
    let mut c = criteria(Some("v1"), &[]);
    c.metadata_key = "VERSION";
    let (kept, _) = version::filter(cands.clone(), &c);
    assert_eq!(ids(&kept), ["n0", "n1"]);
    assert!(satisfies(&cands[1].node, &c));
    assert!(!satisfies(&cands[2].node, &c));
    assert!(
        !satisfies(&cands[3].node, &c),
        "no version metadata never satisfies a version"
    );
    assert!(satisfies(&cands[3].node, &criteria(None, &[])));
}

#[test]
fn zone_filter_table() {
    // (zone, kept ids)
    let cases: Vec<(Option<&str>, Vec<&str>)> = vec![
        (None, vec!["n0", "n1", "n2", "n3"]),
        (Some("hz"), vec!["n0", "n2"]),
        (Some("sh"), vec!["n1"]),
        (Some("bj"), vec!["n0", "n1", "n2", "n3"]),
        (Some(""), vec!["n0", "n1", "n2", "n3"]),
    ];
    for (zone, want) in cases {
        assert_eq!(
            ids(&zone::filter(canary_nodes(), zone)),
            want,
            "zone {zone:?}"
        );
    }
    // Falls back to all when the zone's nodes are gone (e.g. not selectable, so not candidates).
    let no_hz: Candidates = canary_nodes()
        .into_iter()
        .filter(|c| !["n0", "n2"].contains(&&*c.node.id))
        .collect();
    assert_eq!(ids(&zone::filter(no_hz, Some("hz"))), ["n1", "n3"]);
}

#[test]
fn version_then_zone_compose() {
    let (kept, _) = version::filter(canary_nodes(), &criteria(Some("v1"), &[]));
    assert_eq!(ids(&zone::filter(kept, Some("sh"))), ["n1"]);
}
