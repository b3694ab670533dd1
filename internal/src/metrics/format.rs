//! The two exposition formats of `GET /metrics` (SPEC section 8) and the choice between them.
//!
//! The registry encodes OpenMetrics text (`# EOF`, counter families named without `_total`, samples
//! with it). Prometheus' 0.0.4 text format, which `promtool check metrics`, curl users and older
//! scrapers read, names a family exactly as its samples and knows no `# EOF`, `# UNIT` or `info`
//! type: [`to_prometheus_text`] rewrites the one into the other. [`negotiate`] picks OpenMetrics only
//! when `Accept` asks for `application/openmetrics-text` (as Prometheus itself does), else 0.0.4.

/// `Content-Type` of the Prometheus 0.0.4 text format.
pub(crate) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of OpenMetrics 1.0 text.
pub(crate) const OPENMETRICS_TEXT: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

/// The format for a request's `Accept` value (`None` = no header): OpenMetrics when a media range
/// `application/openmetrics-text` with a non-zero `q` is listed, else Prometheus 0.0.4.
pub(crate) fn negotiate(accept: Option<&str>) -> Format {
    let asks = accept.is_some_and(|a| {
        a.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let q_zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
        })
    });
    if asks {
        Format::OpenMetrics
    } else {
        Format::Prometheus
    }
}

/// Rewrites OpenMetrics text as Prometheus 0.0.4 text: counter families take their samples'
/// `_total` name, `info` families become gauges named `<name>_info`, `unknown` becomes
/// `untyped`; `# UNIT`, `# EOF` and counters' `_created` samples are dropped.
pub(crate) fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // HELP comes before TYPE; it is held until TYPE says which name the family takes.
    let mut help: Option<(&str, &str)> = None;
    let mut counter: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (family, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            counter = (kind == "counter").then_some(name);
            if let Some((_, text)) = help.take().filter(|(h, _)| *h == name) {
                out.push_str(&format!("# HELP {family} {text}\n"));
            }
            out.push_str(&format!("# TYPE {family} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some(c) = counter {
            let created = line
                .strip_prefix(c)
                .is_some_and(|r| r.starts_with("_created"));
            if created {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_picks_openmetrics_only_when_asked() {
        assert_eq!(negotiate(None), Format::Prometheus);
        assert_eq!(negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(negotiate(Some("text/plain")), Format::Prometheus);
        assert_eq!(
            negotiate(Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text; q=0, */*")),
            Format::Prometheus
        );
    }

    #[test]
    fn counters_info_and_eof_are_rewritten() {
        let om = "# HELP hopping_count Hops.\n# TYPE hopping_count counter\nhopping_count_total{reason=\"ejected\"} 2\nhopping_count_created{reason=\"ejected\"} 1.0\n# HELP b Build.\n# TYPE b info\nb_info{version=\"1\"} 1\n# HELP g A gauge.\n# TYPE g gauge\n# UNIT g seconds\ng 3\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP hopping_count_total Hops.\n# TYPE hopping_count_total counter\nhopping_count_total{reason=\"ejected\"} 2\n# HELP b_info Build.\n# TYPE b_info gauge\nb_info{version=\"1\"} 1\n# HELP g A gauge.\n# TYPE g gauge\ng 3\n"
        );
    }
}
