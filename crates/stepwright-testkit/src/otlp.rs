//! An OTLP/HTTP receiver on loopback: it takes `POST /v1/traces` and `POST /v1/metrics` as
//! a collector does and decodes each request with the official protobuf definitions
//! (`opentelemetry-proto`), so a test checks what a real backend would get.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;
use serde_json::{Value, json};

use crate::http::{FakeServer, Reply};

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// `INTERNAL`, `CLIENT`, ... as the protobuf enum names them, without the prefix.
    pub kind: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, or empty for a root.
    pub parent_span_id: String,
    /// Attributes as JSON values (an array attribute is a JSON array).
    pub attributes: BTreeMap<String, Value>,
    /// Links: the linked trace and span ids, and the link's attributes.
    pub links: Vec<(String, String, BTreeMap<String, Value>)>,
    /// `STATUS_CODE_ERROR`, ... without the prefix (`UNSET`, `OK`, `ERROR`).
    pub status: String,
    /// The status message.
    pub status_message: String,
    /// The resource's `service.name`.
    pub service: String,
}

impl ReceivedSpan {
    /// A string attribute.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }

    /// An integer attribute.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.attributes.get(key).and_then(Value::as_i64)
    }
}

/// The receiver. It lives until the test process ends.
pub struct OtlpReceiver {
    server: FakeServer,
}

impl OtlpReceiver {
    /// Starts it on a free loopback port.
    pub fn start() -> Self {
        let server = FakeServer::responding(|request| {
            assert!(
                request.path == "/v1/traces" || request.path == "/v1/metrics",
                "the receiver takes traces and metrics over OTLP/HTTP, not {}",
                request.path
            );
            assert_eq!(
                request.headers.get("content-type").map(String::as_str),
                Some("application/x-protobuf"),
                "OTLP/HTTP with protobuf bodies"
            );
            // An empty ExportTraceServiceResponse: everything was accepted.
            Reply::bytes(200, "application/x-protobuf", Vec::new())
        });
        Self { server }
    }

    /// `http://127.0.0.1:PORT`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> &str {
        &self.server.url
    }

    /// Every export request's headers, in order.
    pub fn headers(&self) -> Vec<std::collections::HashMap<String, String>> {
        self.server.requests().into_iter().map(|r| r.headers).collect()
    }

    /// Every data point of metric `name` received so far, as `(attributes, value)`: a sum's
    /// or gauge's value, or a histogram's sum (with its count under the key `count`).
    pub fn metric(&self, name: &str) -> Vec<(BTreeMap<String, Value>, f64)> {
        let mut points = Vec::new();
        for request in self.server.requests().into_iter().filter(|r| r.path == "/v1/metrics") {
            let export = ExportMetricsServiceRequest::decode(request.raw.as_slice())
                .unwrap_or_else(|e| panic!("an OTLP metrics export that does not decode: {e}"));
            let metrics = export.resource_metrics.into_iter().flat_map(|r| r.scope_metrics).flat_map(|s| s.metrics);
            for metric in metrics.filter(|m| m.name == name) {
                let number = |p: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match p.value {
                    Some(number_data_point::Value::AsDouble(d)) => d,
                    Some(number_data_point::Value::AsInt(i)) => i as f64,
                    None => 0.0,
                };
                match metric.data {
                    Some(metric::Data::Sum(sum)) => {
                        points.extend(sum.data_points.iter().map(|p| (attributes(&p.attributes), number(p))));
                    }
                    Some(metric::Data::Gauge(gauge)) => {
                        points.extend(gauge.data_points.iter().map(|p| (attributes(&p.attributes), number(p))));
                    }
                    Some(metric::Data::Histogram(histogram)) => {
                        points.extend(histogram.data_points.iter().map(|p| {
                            let mut attributes = attributes(&p.attributes);
                            attributes.insert("count".to_owned(), json!(p.count));
                            (attributes, p.sum.unwrap_or_default())
                        }));
                    }
                    _ => {}
                }
            }
        }
        points
    }

    /// Every span received so far, in the order received.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let mut spans = Vec::new();
        for request in self.server.requests().into_iter().filter(|r| r.path == "/v1/traces") {
            let export = ExportTraceServiceRequest::decode(request.raw.as_slice())
                .unwrap_or_else(|e| panic!("an OTLP export that does not decode: {e}"));
            for resource_spans in export.resource_spans {
                let service = resource_spans
                    .resource
                    .as_ref()
                    .and_then(|r| attributes(&r.attributes).get("service.name").cloned())
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                for scope in resource_spans.scope_spans {
                    for span in scope.spans {
                        let kind = opentelemetry_proto::tonic::trace::v1::span::SpanKind::try_from(span.kind)
                            .map(|k| k.as_str_name().trim_start_matches("SPAN_KIND_").to_owned())
                            .unwrap_or_default();
                        let (status, status_message) = span.status.as_ref().map_or_else(
                            || ("UNSET".to_owned(), String::new()),
                            |s| {
                                let code = opentelemetry_proto::tonic::trace::v1::status::StatusCode::try_from(s.code)
                                    .map(|c| c.as_str_name().trim_start_matches("STATUS_CODE_").to_owned())
                                    .unwrap_or_default();
                                (code, s.message.clone())
                            },
                        );
                        spans.push(ReceivedSpan {
                            name: span.name.clone(),
                            kind,
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent_span_id: hex(&span.parent_span_id),
                            attributes: attributes(&span.attributes),
                            links: span
                                .links
                                .iter()
                                .map(|l| (hex(&l.trace_id), hex(&l.span_id), attributes(&l.attributes)))
                                .collect(),
                            status,
                            status_message,
                            service: service.clone(),
                        });
                    }
                }
            }
        }
        spans
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, Value> {
    attributes.iter().map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Value::Null, value))).collect()
}

fn value(value: &AnyValue) -> Value {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::ArrayValue(array)) => Value::Array(array.values.iter().map(self::value).collect()),
        Some(any_value::Value::KvlistValue(list)) => Value::Object(
            list.values.iter().map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Value::Null, self::value))).collect(),
        ),
        Some(any_value::Value::BytesValue(bytes)) => json!(hex(bytes)),
        _ => Value::Null,
    }
}
