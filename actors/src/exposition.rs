//! Answering a scrape in the format its scraper asks for: OpenMetrics, which Prometheus asks
//! for first, or the Prometheus text format 0.0.4, which `promtool check metrics`, older
//! scrapers and a plain `curl` read — as the official client libraries negotiate it.
//!
//! Both the head and the agents encode OpenMetrics (prometheus-client writes nothing else);
//! the text format is derived from it here, in one place.

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type and body that answer a request with `headers`, given the exposition in
/// OpenMetrics.
pub fn answer(headers: &actix_web::http::header::HeaderMap, openmetrics: String) -> (&'static str, String) {
    // Several `Accept` lines mean what one comma-joined line does (RFC 9110, 5.3).
    let lines: Vec<&str> =
        headers.get_all(actix_web::http::header::ACCEPT).filter_map(|value| value.to_str().ok()).collect();
    negotiate((!lines.is_empty()).then(|| lines.join(",")).as_deref(), openmetrics)
}

/// The content type and body that answer a request with `accept`, given the exposition in
/// OpenMetrics.
fn negotiate(accept: Option<&str>, openmetrics: String) -> (&'static str, String) {
    if accept.is_some_and(prefers_openmetrics) {
        (OPENMETRICS, openmetrics)
    } else {
        (PROMETHEUS_TEXT, to_prometheus_text(&openmetrics))
    }
}

/// Whether `accept` ranks OpenMetrics at least as high as the text format (Prometheus sends
/// `application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`).
/// A wildcard alone gets the text format, as from Prometheus's own client libraries, and so
/// does OpenMetrics of a version this does not write (what it writes reads as 0.0.1 too) or
/// with a `q` that is not a number.
fn prefers_openmetrics(accept: &str) -> bool {
    let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: Vec<(String, &str)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().trim_matches('"')))
            .collect();
        let param = |name: &str| params.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let q = param("q").map_or(Some(1.0f32), |q| q.parse().ok().filter(|q: &f32| q.is_finite())).unwrap_or(0.0);
        match media.as_str() {
            "application/openmetrics-text" if param("version").is_none_or(|v| ["1.0.0", "0.0.1"].contains(&v)) => {
                openmetrics = openmetrics.max(q)
            }
            "text/plain" => text = text.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// OpenMetrics as prometheus-client writes it, in the text format: a counter's family is
/// named with its `_total` samples' name (OpenMetrics names it without), and `# UNIT` and
/// `# EOF`, which the text format does not have, are left out. Samples are the same.
fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> =
        openmetrics.lines().filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].into_iter().find_map(|keyword| {
            let rest = line.strip_prefix(keyword)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{keyword}{name}_total {tail}"))
        });
        text.push_str(renamed.as_deref().unwrap_or(line));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
        version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    #[test]
    fn prometheus_gets_openmetrics_and_anyone_else_the_text_format() {
        assert_eq!(negotiate(Some(PROMETHEUS_ACCEPT), String::new()).0, OPENMETRICS);
        assert_eq!(negotiate(Some("application/openmetrics-text"), String::new()).0, OPENMETRICS);
        for accept in [None, Some("*/*"), Some("text/plain;version=0.0.4"), Some("application/openmetrics-text;q=0")] {
            assert_eq!(negotiate(accept, String::new()).0, PROMETHEUS_TEXT, "{accept:?}");
        }
        let text_first = "text/plain;version=0.0.4,application/openmetrics-text;q=0.5";
        assert_eq!(negotiate(Some(text_first), String::new()).0, PROMETHEUS_TEXT);
        // A version this does not write, or a q that is no number: not taken for OpenMetrics.
        for accept in ["application/openmetrics-text;version=2.0.0", "application/openmetrics-text;q=abc"] {
            assert_eq!(negotiate(Some(accept), String::new()).0, PROMETHEUS_TEXT, "{accept}");
        }
        let older = "application/openmetrics-text; version=0.0.1; q=0.9";
        assert_eq!(negotiate(Some(older), String::new()).0, OPENMETRICS);
    }

    /// Two `Accept` lines are read as one comma-joined line.
    #[test]
    fn every_accept_line_counts() {
        let mut headers = actix_web::http::header::HeaderMap::new();
        let accept = actix_web::http::header::ACCEPT;
        assert_eq!(answer(&headers, String::new()).0, PROMETHEUS_TEXT, "no Accept at all");
        headers.append(accept.clone(), "text/plain;q=0.5".parse().unwrap());
        headers.append(accept, "application/openmetrics-text".parse().unwrap());
        assert_eq!(answer(&headers, String::new()).0, OPENMETRICS);
    }

    /// Every sample's family has its HELP and TYPE under the sample's own name (what
    /// `promtool check metrics` asks), counters included.
    #[test]
    fn counters_are_named_by_their_samples_in_the_text_format() {
        use prometheus_client::metrics::{counter::Counter, gauge::Gauge, histogram::Histogram};
        let mut registry = prometheus_client::registry::Registry::with_prefix("ftdrive");
        let counter = Counter::<u64>::default();
        counter.inc();
        registry.register("things", "Things done", counter);
        registry.register("level", "A level", Gauge::<i64>::default());
        let histogram = Histogram::new([0.1, 1.0]);
        histogram.observe(0.5);
        registry.register_with_unit("wait", "Waits", prometheus_client::registry::Unit::Seconds, histogram);
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        let text = to_prometheus_text(&openmetrics);
        assert!(openmetrics.contains("# TYPE ftdrive_things counter\n"), "{openmetrics}");
        assert!(text.contains("# HELP ftdrive_things_total Things done.\n"), "{text}");
        assert!(text.contains("# TYPE ftdrive_things_total counter\nftdrive_things_total 1\n"), "{text}");
        assert!(
            text.contains("# TYPE ftdrive_level gauge\n") && text.contains("# TYPE ftdrive_wait_seconds histogram\n")
        );
        assert!(text.contains("ftdrive_wait_seconds_bucket{le=\"1.0\"} 1\n"), "{text}");
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
    }
}
