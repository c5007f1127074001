//! A small JSON-schema checker for tool arguments: `type`, `required`, `properties`,
//! `enum`, `minimum`/`maximum`, `minLength`/`maxLength`, `items`, and
//! `additionalProperties: false`. Errors read like `missing required count`, because they
//! go back to the model as the tool result.

use serde_json::Value;

/// Check `value` against `schema`; the first violation, phrased for the model.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    check(value, schema, "")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn matches_type(v: &Value, ty: &str) -> bool {
    match ty {
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn label(path: &str) -> &str {
    if path.is_empty() { "arguments" } else { path }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn check(v: &Value, schema: &Value, path: &str) -> Result<(), String> {
    match &schema["type"] {
        Value::String(ty) if !matches_type(v, ty) => {
            return Err(format!(
                "{}: expected {ty}, got {}",
                label(path),
                type_name(v)
            ));
        }
        Value::Array(types)
            if !types
                .iter()
                .filter_map(Value::as_str)
                .any(|t| matches_type(v, t)) =>
        {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            return Err(format!(
                "{}: expected {}, got {}",
                label(path),
                names.join(" or "),
                type_name(v)
            ));
        }
        _ => {}
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(v) {
            let list: Vec<String> = options.iter().map(Value::to_string).collect();
            return Err(format!(
                "{}: must be one of {}, got {v}",
                label(path),
                list.join(", ")
            ));
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema["minimum"].as_f64().filter(|m| n < *m) {
            return Err(format!("{}: must be >= {min}, got {v}", label(path)));
        }
        if let Some(max) = schema["maximum"].as_f64().filter(|m| n > *m) {
            return Err(format!("{}: must be <= {max}, got {v}", label(path)));
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema["minLength"].as_u64().filter(|m| len < *m) {
            return Err(format!(
                "{}: must be at least {min} characters",
                label(path)
            ));
        }
        if let Some(max) = schema["maxLength"].as_u64().filter(|m| len > *m) {
            return Err(format!("{}: must be at most {max} characters", label(path)));
        }
    }
    if let (Some(items), Some(schema_items)) = (v.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            check(item, schema_items, &format!("{}[{i}]", label(path)))?;
        }
    }
    if let Some(obj) = v.as_object() {
        for req in schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if obj.get(req).is_none_or(Value::is_null) {
                return Err(format!("missing required {}", join(path, req)));
            }
        }
        let props = schema["properties"].as_object();
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                // An optional argument sent as null counts as absent.
                Some(_) if val.is_null() => {}
                Some(sub) => check(val, sub, &join(path, k))?,
                None if schema["additionalProperties"] == Value::Bool(false) => {
                    return Err(format!("unknown argument {}", join(path, k)));
                }
                None => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "additionalProperties": false, "required": ["count", "mode"],
        "properties": {
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        }})
    }

    #[test]
    fn each_violation_class_is_named() {
        let s = schema();
        assert_eq!(validate(&json!({"count": 3, "mode": "fast"}), &s), Ok(()));
        assert_eq!(
            validate(&json!({"mode": "fast"}), &s).unwrap_err(),
            "missing required count"
        );
        assert_eq!(
            validate(&json!({"count": "3", "mode": "fast"}), &s).unwrap_err(),
            "count: expected integer, got string"
        );
        assert!(
            validate(&json!({"count": 3, "mode": "medium"}), &s)
                .unwrap_err()
                .starts_with("mode: must be one of \"fast\", \"slow\"")
        );
        assert_eq!(
            validate(&json!({"count": 0, "mode": "fast"}), &s).unwrap_err(),
            "count: must be >= 1, got 0"
        );
        assert_eq!(
            validate(&json!({"count": 11, "mode": "fast"}), &s).unwrap_err(),
            "count: must be <= 10, got 11"
        );
        assert_eq!(
            validate(&json!({"count": 1, "mode": "fast", "tags": ["a", 2]}), &s).unwrap_err(),
            "tags[1]: expected string, got integer"
        );
        assert_eq!(
            validate(&json!({"count": 1, "mode": "fast", "x": 1}), &s).unwrap_err(),
            "unknown argument x"
        );
        assert_eq!(
            validate(&json!([1]), &s).unwrap_err(),
            "arguments: expected object, got array"
        );
    }
}
