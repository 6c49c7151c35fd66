//! Prometheus metrics for every Pontoon daemon.
//!
//! * [`Exposition`]: what one scrape shows. A daemon builds a fresh one per
//!   scrape from its counters and state (no registry lives between scrapes,
//!   so a PG, volume or OSD that went away simply stops being shown) and
//!   [renders](Exposition::render) it through `prometheus-client`'s
//!   [`Collector`] and its Prometheus text format (version 0.0.4), which
//!   `promtool check metrics` and every Prometheus server read.
//! * [`hist`]: counters and fixed-bucket latency histograms of atomics, one
//!   set per data-path thread ([`OpStats`]): recording an operation takes
//!   no lock and allocates nothing; the scrape sums the threads' sets.
//! * [`process`]: the standard `process_*` series from `/proc/self`.
//! * [`server`]: `GET /metrics` over HTTP (axum on tokio), on the daemon's
//!   runtime or on a small thread of its own (the compio gateways).
//! * [`volume`]: a [`pontoon_volume::VolumeCatalog`] wrapper that counts a
//!   gateway's requests, bytes and latency per volume and operation.
//!
//! Names follow Prometheus' conventions: a `pontoon_` prefix, base units
//! (`_seconds`, `_bytes`), `_total` on counters, histograms for latency.

#![warn(missing_docs)]

pub mod hist;
pub mod process;
pub mod server;
pub mod volume;

use std::collections::HashMap;
use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use hist::{HistogramSnapshot, LatencyHistogram, Op, OpStats};
pub use server::{MetricsServer, Render, parse_metrics_addr, render_fn, serve};
pub use volume::{GatewayMetrics, MeteredCatalog, MeteredVolume, OpenVolume};

/// The `Content-Type` of [`Exposition::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Labels of one sample: `(name, value)` pairs.
pub type Labels = Vec<(String, String)>;

/// Builds labels from string pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[derive(Debug, Clone)]
enum Value {
    Int(u64),
    Float(f64),
    Hist(HistogramSnapshot),
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

/// The series one scrape shows, grouped into families (one `HELP` and
/// `TYPE` each, samples in the order added).
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut Family {
        let i = match self.index.get(name) {
            Some(i) => *i,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    kind,
                    samples: Vec::new(),
                });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        &mut self.families[i]
    }

    /// A counter sample. `name` ends in `_total`.
    pub fn counter(&mut self, name: &str, help: &str, labels: Labels, v: u64) {
        debug_assert!(name.ends_with("_total"), "{name}");
        self.family(name, help, MetricType::Counter)
            .samples
            .push((labels, Value::Int(v)));
    }

    /// A counter sample with a fractional value (e.g. CPU seconds).
    pub fn counter_f64(&mut self, name: &str, help: &str, labels: Labels, v: f64) {
        debug_assert!(name.ends_with("_total"), "{name}");
        self.family(name, help, MetricType::Counter)
            .samples
            .push((labels, Value::Float(v)));
    }

    /// A gauge sample.
    pub fn gauge(&mut self, name: &str, help: &str, labels: Labels, v: f64) {
        self.family(name, help, MetricType::Gauge)
            .samples
            .push((labels, Value::Float(v)));
    }

    /// A gauge sample with an integer value (printed exactly).
    pub fn gauge_u64(&mut self, name: &str, help: &str, labels: Labels, v: u64) {
        self.family(name, help, MetricType::Gauge)
            .samples
            .push((labels, Value::Int(v)));
    }

    /// A histogram sample.
    pub fn histogram(&mut self, name: &str, help: &str, labels: Labels, h: HistogramSnapshot) {
        self.family(name, help, MetricType::Histogram)
            .samples
            .push((labels, Value::Hist(h)));
    }

    /// Whether a family of that name has samples.
    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The Prometheus text format (0.0.4) of everything added.
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        for f in &self.families {
            // The encoder appends `_total` to counters itself.
            let base = match f.kind {
                MetricType::Counter => f.name.strip_suffix("_total").unwrap_or(&f.name),
                _ => &f.name,
            };
            let mut metric = encoder.encode_descriptor(base, &f.help, None, f.kind)?;
            for (labels, value) in &f.samples {
                let mut m = metric.encode_family(labels)?;
                match (f.kind, value) {
                    (MetricType::Counter, Value::Int(v)) => {
                        m.encode_counter::<NoLabelSet, _, f64>(v, None)?
                    }
                    (MetricType::Counter, Value::Float(v)) => {
                        m.encode_counter::<NoLabelSet, _, f64>(v, None)?
                    }
                    (_, Value::Int(v)) => m.encode_gauge(v)?,
                    (_, Value::Float(v)) => m.encode_gauge(v)?,
                    (_, Value::Hist(h)) => {
                        m.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let mut e = Exposition::new();
        e.counter(
            "pontoon_test_ops_total",
            "Operations.",
            labels(&[("op", "read")]),
            3,
        );
        e.gauge("pontoon_test_ratio", "A ratio.", Labels::new(), 0.5);
        let h = LatencyHistogram::default();
        h.record(std::time::Duration::from_micros(30));
        h.record(std::time::Duration::from_millis(3));
        e.histogram(
            "pontoon_test_latency_seconds",
            "Latency.",
            labels(&[("op", "read")]),
            h.snapshot(),
        );
        e.counter(
            "pontoon_test_ops_total",
            "Operations.",
            labels(&[("op", "write")]),
            4,
        );
        let text = e.render();
        assert!(
            text.contains("# TYPE pontoon_test_ops_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("pontoon_test_ops_total{op=\"read\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("pontoon_test_ops_total{op=\"write\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("pontoon_test_ratio 0.5\n"), "{text}");
        assert!(
            text.contains("# TYPE pontoon_test_latency_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("pontoon_test_latency_seconds_bucket{op=\"read\",le=\"5e-05\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("pontoon_test_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("pontoon_test_latency_seconds_count{op=\"read\"} 2\n"),
            "{text}"
        );
        // One HELP per family even when samples were added apart.
        assert_eq!(text.matches("# HELP pontoon_test_ops_total").count(), 1);
    }
}
