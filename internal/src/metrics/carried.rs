//! Counter and histogram values carried over an upgrade (SPEC section 13: every counter and
//! histogram continues from the old process's values).
//!
//! The old process reads its own exposition ([`samples_of`]): every sample of a `counter` or
//! `histogram` family (counters' `_total`, histograms' `_bucket`, `_sum` and `_count`, all of them
//! additive). The new process keeps them ([`Carried`]) and adds them to its own values each time it
//! encodes ([`Carried::merge`]); a sample it has not made yet is written after its family's own.
//! Working on the exposition text covers every counter and histogram, present and future, without
//! reaching into prometheus-client's types (whose histograms cannot be set). Gauges are not
//! carried: they describe the process (open connections, node weights) and the new one sets its own.
//! Labels are kept as written between the braces: both processes encode them the same way.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// One counter or histogram sample of the old process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CarriedSample {
    /// The family's name (its `# TYPE` line).
    pub family: String,
    /// The sample's name (`<family>_total`, `<family>_bucket`, ...).
    pub name: String,
    /// The labels as written between the braces; empty without labels.
    pub labels: String,
    /// Its value.
    pub value: f64,
}

/// A sample line split: (name, labels, value).
fn split_sample(line: &str) -> Option<(&str, &str, f64)> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let (labels, rest) = if line[name_end..].starts_with('{') {
        let close = closing_brace(&line[name_end..])? + name_end;
        (&line[name_end + 1..close], &line[close + 1..])
    } else {
        ("", &line[name_end..])
    };
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    // JSON has no NaN or infinity: such a sample is not carried.
    value.is_finite().then_some((name, labels, value))
}

/// Index of the `}` closing the label set `s` opens, skipping quoted values and their escapes.
fn closing_brace(s: &str) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// The family a `# TYPE <name> <type>` line opens, if it is a counter or histogram one;
/// `Some(None)` for any other family, `None` for a line that is no `# TYPE` line.
fn type_line(line: &str) -> Option<Option<&str>> {
    let mut it = line.strip_prefix("# TYPE ")?.split_whitespace();
    let (name, kind) = (it.next()?, it.next()?);
    Some(matches!(kind, "counter" | "histogram").then_some(name))
}

/// The counter and histogram samples of an OpenMetrics exposition.
pub(super) fn samples_of(exposition: &str) -> Vec<CarriedSample> {
    let mut family: Option<&str> = None;
    let mut out = Vec::new();
    for line in exposition.lines() {
        if let Some(f) = type_line(line) {
            family = f;
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let Some(fam) = family else { continue };
        if let Some((name, labels, value)) = split_sample(line) {
            out.push(CarriedSample {
                family: fam.to_string(),
                name: name.to_string(),
                labels: labels.to_string(),
                value,
            });
        }
    }
    out
}

/// Values carried from the old process, by family, then by (sample name, labels).
#[derive(Debug, Default)]
pub(super) struct Carried(HashMap<String, Vec<CarriedSample>>);

/// `v` as the exposition writes it: an integer when it is one (counters, bucket counts).
fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Carried {
    /// Carries `samples` (from [`samples_of`] of the old process).
    pub(super) fn new(samples: Vec<CarriedSample>) -> Self {
        let mut by_family: HashMap<String, Vec<CarriedSample>> = HashMap::new();
        for s in samples {
            by_family.entry(s.family.clone()).or_default().push(s);
        }
        Carried(by_family)
    }

    /// True when nothing is carried.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `own` (an OpenMetrics exposition) with the carried values added: to the samples it has,
    /// and as new lines at the end of their family for those it has not. Families `own` lacks
    /// are left out (a metric the new build no longer has).
    pub(super) fn merge(&self, own: &str) -> String {
        let mut out = String::with_capacity(own.len() + 256);
        let mut open: Option<(&Vec<CarriedSample>, Vec<bool>)> = None;
        for line in own.lines() {
            let starts_family = line.starts_with("# HELP ") || line.starts_with("# EOF");
            if starts_family {
                if let Some((samples, used)) = open.take() {
                    flush_unused(&mut out, samples, &used);
                }
            }
            if let Some(f) = type_line(line) {
                open = f
                    .and_then(|f| self.0.get(f))
                    .map(|s| (s, vec![false; s.len()]));
            }
            let carried = open.as_mut().and_then(|(samples, used)| {
                let (name, labels, value) = split_sample(line)?;
                let i = samples
                    .iter()
                    .position(|s| s.name == name && s.labels == labels)?;
                used[i] = true;
                Some((name, labels, value + samples[i].value))
            });
            match carried {
                Some((name, "", v)) => {
                    out.push_str(&format!("{name} {}\n", fmt_value(v)));
                }
                Some((name, labels, v)) => {
                    out.push_str(&format!("{name}{{{labels}}} {}\n", fmt_value(v)));
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        if let Some((samples, used)) = open {
            flush_unused(&mut out, samples, &used);
        }
        out
    }
}

/// Writes the carried samples of one family that its own lines did not have.
fn flush_unused(out: &mut String, samples: &[CarriedSample], used: &[bool]) {
    for (s, _) in samples.iter().zip(used).filter(|(_, u)| !**u) {
        if s.labels.is_empty() {
            out.push_str(&format!("{} {}\n", s.name, fmt_value(s.value)));
        } else {
            out.push_str(&format!(
                "{}{{{}}} {}\n",
                s.name,
                s.labels,
                fmt_value(s.value)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "# HELP hops Hops.\n# TYPE hops counter\nhops_total{reason=\"a}\\\"b\"} 3\nhops_total{reason=\"x\"} 1\n# HELP lat Latency.\n# TYPE lat histogram\nlat_sum 0.5\nlat_count 2\nlat_bucket{le=\"+Inf\"} 2\n# HELP conns Open.\n# TYPE conns gauge\nconns 7\n# EOF\n";
    const NEW: &str = "# HELP hops Hops.\n# TYPE hops counter\nhops_total{reason=\"x\"} 2\n# HELP lat Latency.\n# TYPE lat histogram\nlat_sum 0.25\nlat_count 1\nlat_bucket{le=\"+Inf\"} 1\n# HELP conns Open.\n# TYPE conns gauge\nconns 1\n# EOF\n";

    #[test]
    fn counters_and_histograms_continue_gauges_do_not() {
        let samples = samples_of(OLD);
        assert_eq!(samples.len(), 5, "{samples:?}");
        assert_eq!(samples[0].labels, "reason=\"a}\\\"b\"");
        let merged = Carried::new(samples).merge(NEW);
        assert_eq!(
            merged,
            "# HELP hops Hops.\n# TYPE hops counter\nhops_total{reason=\"x\"} 3\nhops_total{reason=\"a}\\\"b\"} 3\n# HELP lat Latency.\n# TYPE lat histogram\nlat_sum 0.75\nlat_count 3\nlat_bucket{le=\"+Inf\"} 3\n# HELP conns Open.\n# TYPE conns gauge\nconns 1\n# EOF\n"
        );
        // A second upgrade carries the sums on.
        let again = Carried::new(samples_of(&merged)).merge(NEW);
        assert!(again.contains("hops_total{reason=\"x\"} 5\n"), "{again}");
    }
}
