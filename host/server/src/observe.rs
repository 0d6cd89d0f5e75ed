//! Tracing set-up (the one place the OpenTelemetry SDK is configured) and
//! the helpers that turn a finished decision or cycle into spans with the
//! times it really took: spans are built after the fact from measured
//! instants, so the scheduling loop stays free of tracing calls.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::config::{OtelConfig, OtlpProtocol};

/// Longest string attribute value, bytes (values are cut at a character
/// boundary; OTel backends reject or truncate huge attributes anyway).
pub const MAX_ATTRIBUTE_LEN: usize = 1024;

/// Spans buffered for export at most (beyond, new spans are dropped).
pub const MAX_QUEUED_SPANS: usize = 65_536;

/// Trace export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter for {endpoint}: {source}")]
pub struct ObserveError {
    /// The endpoint.
    pub endpoint: String,
    /// Cause.
    pub source: opentelemetry_otlp::ExporterBuildError,
}

/// The tracer provider and the service's tracer.
#[derive(Debug, Clone)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracing {
    /// Spans sampled at `otel.sampling_ratio` (parent-based), exported in
    /// batches over OTLP when an endpoint is set. Call inside a Tokio
    /// runtime (the gRPC client needs one).
    pub fn new(otel: &OtelConfig) -> Result<Self, ObserveError> {
        let resource = Resource::builder()
            .with_service_name(otel.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let mut builder = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(otel.ratio()))))
            .with_resource(resource);
        if let Some(endpoint) = &otel.endpoint {
            let err = |source| ObserveError { endpoint: endpoint.clone(), source };
            let exporter = match otel.protocol() {
                OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .build()
                    .map_err(err)?,
                OtlpProtocol::HttpProtobuf => {
                    // The signal path is appended as the SDKs do for the
                    // generic endpoint variable.
                    let url = if endpoint.ends_with("/v1/traces") {
                        endpoint.clone()
                    } else {
                        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
                    };
                    opentelemetry_otlp::SpanExporter::builder()
                        .with_http()
                        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                        .with_endpoint(url)
                        .build()
                        .map_err(err)?
                }
            };
            // Every decision is a trace of several spans: a queue of the
            // SDK's default 2,048 spans drops some in a burst of
            // arrivals. `OTEL_BSP_*` still override.
            let mut batch = opentelemetry_sdk::trace::BatchConfigBuilder::default();
            if std::env::var_os("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
                batch = batch.with_max_queue_size(MAX_QUEUED_SPANS);
            }
            let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch.build())
                .build();
            builder = builder.with_span_processor(processor);
        }
        let provider = builder.build();
        let tracer = provider.tracer("tessera");
        Ok(Self { provider, tracer })
    }

    /// The tracer.
    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Exports what is buffered now.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    /// Flushes and stops the exporter.
    pub fn shutdown(&self) {
        let _ = self.provider.shutdown();
    }
}

/// Cuts `s` to [`MAX_ATTRIBUTE_LEN`] bytes at a character boundary.
pub fn bounded(s: impl Into<String>) -> String {
    let mut s = s.into();
    if s.len() > MAX_ATTRIBUTE_LEN {
        let mut cut = MAX_ATTRIBUTE_LEN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// A string attribute, bounded.
pub fn attr(key: &'static str, value: impl Into<String>) -> KeyValue {
    KeyValue::new(key, bounded(value))
}

/// A span that began at `start` under `parent` (a new trace when `parent`
/// holds no span).
pub fn start(
    tracer: &SdkTracer,
    name: &'static str,
    parent: &Context,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    links: Vec<SpanContext>,
) -> Context {
    let span = tracer
        .span_builder(Cow::Borrowed(name))
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .with_attributes(attributes)
        .with_links(links.into_iter().map(opentelemetry::trace::Link::with_context).collect())
        .start_with_context(tracer, parent);
    parent.with_span(span)
}

/// A complete child span `[from, to]` under `parent`.
pub fn child(
    tracer: &SdkTracer,
    name: &'static str,
    parent: &Context,
    from: SystemTime,
    to: SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<String>,
) -> SpanContext {
    let cx = start(tracer, name, parent, from, attributes, Vec::new());
    finish(&cx, to, error)
}

/// Ends the span of `cx` at `at`, with an error status if one is given.
pub fn finish(cx: &Context, at: SystemTime, error: Option<String>) -> SpanContext {
    let span = cx.span();
    if let Some(e) = error {
        span.set_status(Status::error(bounded(e)));
    }
    span.end_with_timestamp(at);
    span.span_context().clone()
}

/// W3C hex forms of a span's ids and whether it is sampled.
pub fn ids(sc: &SpanContext) -> (String, String, bool) {
    (sc.trace_id().to_string(), sc.span_id().to_string(), sc.is_sampled())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_bounded_at_a_character_boundary() {
        let long = "é".repeat(MAX_ATTRIBUTE_LEN);
        let b = bounded(long);
        assert!(b.len() <= MAX_ATTRIBUTE_LEN && b.len() >= MAX_ATTRIBUTE_LEN - 1);
        assert!(b.chars().all(|c| c == 'é'));
        assert_eq!(bounded("short"), "short");
    }
}
