//! Conversions between `google.protobuf.Struct`/`Value` and `serde_json::Value`, and reading a
//! tool argument as a command line.

use prost_types::{ListValue, Struct, Value as PbValue, value::Kind};
use serde_json::{Map, Number, Value};

/// A tool argument as the command line it holds: a string as it is, a list of strings joined
/// with spaces (`["git", "log"]`); `None` for anything else.
pub fn command_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// A JSON object as a protobuf `Struct`; other JSON values are wrapped as `{"value": ...}`.
pub fn to_struct(v: &Value) -> Struct {
    match v {
        Value::Object(map) => Struct {
            fields: map.iter().map(|(k, v)| (k.clone(), to_pb(v))).collect(),
        },
        other => Struct {
            fields: [("value".to_owned(), to_pb(other))].into_iter().collect(),
        },
    }
}

/// A protobuf `Struct` as a JSON object.
pub fn from_struct(s: &Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), from_pb(v)))
            .collect::<Map<_, _>>(),
    )
}

/// Any JSON value as a protobuf `Value`.
pub fn to_pb(v: &Value) -> PbValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_pb).collect(),
        }),
        Value::Object(_) => Kind::StructValue(to_struct(v)),
    };
    PbValue { kind: Some(kind) }
}

/// A protobuf `Value` as JSON.
pub fn from_pb(v: &PbValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(from_pb).collect()),
        Some(Kind::StructValue(s)) => from_struct(s),
    }
}

/// Whole numbers come back as JSON integers, so `{"maximum": 20}` survives a round trip.
fn number(n: f64) -> Value {
    #[allow(clippy::cast_possible_truncation)]
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_survive_a_round_trip() {
        let v = json!({"a": 1, "b": [true, null, "x", 1.5], "c": {"d": -3}});
        assert_eq!(from_struct(&to_struct(&v)), v);
    }
}
