use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::config::{Config, NodeConfig, Protocol};
use crate::metrics::Metrics;
use crate::registry::{NodeSettings, Registry};

fn cluster(lb: Picker, weights: &[u32]) -> (Cluster, Vec<Candidate>) {
    let reg = Registry::new(Arc::new(Metrics::new()));
    let health = Config::go_defaults().clusters[0].health.clone();
    let name: Arc<str> = Arc::from("c");
    let nodes: Vec<_> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let cfg = NodeConfig { id: format!("n{i}"), addr: "127.0.0.1:1".into(), weight: *w, metadata: BTreeMap::new() };
            reg.node(&name, &cfg, NodeSettings { health: health.clone(), protocol: Protocol::Http1 }).0
        })
        .collect();
    let cands = nodes.iter().map(|n| Candidate { node: n.clone(), weight: u64::from(n.weight) }).collect();
    (Cluster { name, protocol: Protocol::Http1, lb, nodes, cursor: AtomicUsize::new(0) }, cands)
}

fn shares(lb: Picker, weights: &[u32], n: usize) -> Vec<usize> {
    let (c, cands) = cluster(lb, weights);
    let mut rng = StdRng::seed_from_u64(7);
    let mut counts = vec![0; weights.len()];
    for _ in 0..n {
        let node = pick(&c, &cands, &mut rng).expect("non-empty candidates");
        let i: usize = node.id[1..].parse().expect("test ids are n<index>");
        counts[i] += 1;
    }
    counts
}

#[test]
fn round_robin_equal_weights_alternates_exactly() {
    assert_eq!(shares(Picker::RoundRobin, &[100, 100], 10), vec![5, 5]);
    let (c, cands) = cluster(Picker::RoundRobin, &[1, 1, 1]);
    let mut rng = StdRng::seed_from_u64(1);
    let order: Vec<_> = (0..6).map(|_| pick(&c, &cands, &mut rng).expect("non-empty").id.to_string()).collect();
    assert_eq!(order, ["n0", "n1", "n2", "n0", "n1", "n2"]);
}

#[test]
fn every_picker_follows_weights() {
    for lb in [Picker::RoundRobin, Picker::Weighted] {
        let s = shares(lb, &[80, 20], 10_000);
        assert!((7_700..=8_300).contains(&s[0]), "{lb:?}: {s:?}");
    }
    let s = shares(Picker::Random, &[80, 20], 10_000);
    assert!((4_700..=5_300).contains(&s[0]), "random ignores weight: {s:?}");
    let s = shares(Picker::LeastRequest, &[50, 50], 10_000);
    assert!((4_500..=5_500).contains(&s[0]), "{s:?}");
}

#[test]
fn empty_candidates_pick_nothing() {
    let (c, _) = cluster(Picker::RoundRobin, &[1]);
    assert!(pick(&c, &[], &mut StdRng::seed_from_u64(1)).is_none());
}
