//! OTLP log records as the plain JSON the mapping reads: one object per record with its
//! resource's and scope's names, its event name, times, severity, body and attributes, each
//! attribute value as JSON (ints as numbers, bytes as hex).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use serde_json::{Map, Value, json};

/// Nesting of attribute values kept; deeper ones are cut (a hostile exporter cannot make the
/// mapping recurse without end).
const MAX_DEPTH: usize = 8;

/// Every log record of `request`, flattened.
pub fn logs(request: &ExportLogsServiceRequest) -> Vec<Value> {
    let mut out = Vec::new();
    for rl in &request.resource_logs {
        let resource = rl
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for sl in &rl.scope_logs {
            let scope = sl
                .scope
                .as_ref()
                .map(|s| json!({"name": s.name, "version": s.version}))
                .unwrap_or(Value::Null);
            for r in &sl.log_records {
                out.push(json!({
                    "resource": resource,
                    "scope": scope,
                    "event_name": (!r.event_name.is_empty()).then_some(&r.event_name),
                    "time_unix_nano": r.time_unix_nano,
                    "observed_time_unix_nano": r.observed_time_unix_nano,
                    "severity_number": r.severity_number,
                    "severity_text": (!r.severity_text.is_empty()).then_some(&r.severity_text),
                    "body": r.body.as_ref().map(|b| any(b, 0)),
                    "attributes": attributes(&r.attributes),
                }));
            }
        }
    }
    out
}

/// How many data points `request` holds.
pub fn metric_points(request: &ExportMetricsServiceRequest) -> u64 {
    let mut n = 0;
    for rm in &request.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                n += match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.len(),
                    Some(Data::Sum(s)) => s.data_points.len(),
                    Some(Data::Histogram(h)) => h.data_points.len(),
                    Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                    Some(Data::Summary(s)) => s.data_points.len(),
                    None => 0,
                } as u64;
            }
        }
    }
    n
}

fn attributes(kvs: &[KeyValue]) -> Value {
    kv_map(kvs, 0)
}

fn kv_map(kvs: &[KeyValue], depth: usize) -> Value {
    let mut m = Map::new();
    for kv in kvs {
        let v = kv.value.as_ref().map_or(Value::Null, |v| any(v, depth + 1));
        m.insert(kv.key.clone(), v);
    }
    Value::Object(m)
}

fn any(v: &AnyValue, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    match &v.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::BytesValue(b)) => {
            json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        }
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|x| any(x, depth + 1)).collect())
        }
        Some(any_value::Value::KvlistValue(l)) => kv_map(&l.values, depth),
    }
}
