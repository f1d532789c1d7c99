//! Reading request bodies and query strings into their types with errors that name every field
//! at fault: serde stops at the first problem, so after each one the faulty field is set aside
//! and the input read again, until it reads or a problem cannot be set aside (a missing field).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, FieldError};

/// Most problems reported for one input.
const MAX_PROBLEMS: usize = 10;

/// The field a serde error is about, and what to say: `path` is where the deserializer was
/// (`budget`, or `.` at the top), `message` serde's text.
fn problem(path: &str, message: &str) -> FieldError {
    let join = |name: &str| if path == "." || path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
    let named =
        |prefix: &str| message.strip_prefix(prefix).and_then(|rest| rest.split('`').next()).filter(|n| !n.is_empty());
    if let Some(name) = named("unknown field `") {
        // The path already ends at the unknown key.
        let field = if path == name || path.ends_with(&format!(".{name}")) { path.to_string() } else { join(name) };
        return FieldError { field, message: "is not a known field".into() };
    }
    if let Some(name) = named("missing field `") {
        return FieldError { field: join(name), message: "is required".into() };
    }
    let field = if path == "." || path.is_empty() { "body".to_string() } else { path.to_string() };
    // serde's "invalid type: string \"x\", expected u32": the value's text stays out of errors.
    let message = match message.split_once(", expected ") {
        Some((what, expected)) => match what.strip_prefix("invalid type: ") {
            Some(found) => format!("must be {expected}, not {}", found.split_whitespace().next().unwrap_or("this")),
            None if what.starts_with("invalid value") => format!("must be {expected}"),
            None => message.to_string(),
        },
        None => message.to_string(),
    };
    FieldError { field, message }
}

/// Removes `field` (a dotted path, `[i]` for array items) from `value`; false when absent.
fn remove(value: &mut Value, field: &str) -> bool {
    let mut parts: Vec<&str> = field.split('.').collect();
    let Some(last) = parts.pop() else { return false };
    let mut at = value;
    for p in parts {
        let next = match at {
            Value::Object(m) => m.get_mut(p),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    match at {
        Value::Object(m) => m.remove(last).is_some(),
        _ => false,
    }
}

fn into_error(problems: Vec<FieldError>, context: &str) -> ApiError {
    if problems.is_empty() {
        return ApiError::Validation(format!("invalid {context}"));
    }
    ApiError::Fields(problems)
}

/// A JSON object as `T`, or every field at fault that the parser can tell.
pub fn json<T: DeserializeOwned>(mut value: Value) -> Result<T, ApiError> {
    let mut problems: Vec<FieldError> = Vec::new();
    // Fields taken out of `value` so the rest can be read.
    let mut set_aside: Vec<String> = Vec::new();
    for _ in 0..MAX_PROBLEMS * 2 {
        let err = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(t) if problems.is_empty() => return Ok(t),
            Ok(_) => break,
            Err(e) => e,
        };
        let p = problem(&err.path().to_string(), &err.inner().to_string());
        if set_aside.contains(&p.field) {
            // Missing now because it was set aside: set aside what holds it, said nothing of.
            match p.field.rsplit_once('.') {
                Some((parent, _)) if remove(&mut value, parent) => set_aside.push(parent.to_string()),
                _ => break,
            }
            continue;
        }
        if problems.len() == MAX_PROBLEMS || !remove(&mut value, &p.field) {
            problems.push(p);
            break;
        }
        set_aside.push(p.field.clone());
        problems.push(p);
    }
    Err(into_error(problems, "JSON body"))
}

/// A query string as `T`, or every parameter at fault.
pub fn query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let mut problems: Vec<FieldError> = Vec::new();
    for _ in 0..MAX_PROBLEMS {
        let encoded = form_urlencoded::Serializer::new(String::new()).extend_pairs(&pairs).finish();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(encoded.as_bytes()));
        let err = match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(t) if problems.is_empty() => return Ok(t),
            Ok(_) => break,
            Err(e) => e,
        };
        let mut p = problem(&err.path().to_string(), &err.inner().to_string());
        if p.field == "body" {
            p.field = "query".into();
        }
        if problems.iter().any(|q| q.field == p.field) {
            break;
        }
        let before = pairs.len();
        pairs.retain(|(k, _)| *k != p.field);
        let removed = pairs.len() < before;
        problems.push(p);
        if !removed {
            break;
        }
    }
    Err(into_error(problems, "query string"))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        amount: u32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        limit: Option<u32>,
        inner: Option<Inner>,
    }

    fn fields(e: ApiError) -> Vec<(String, String)> {
        match e {
            ApiError::Fields(f) => f.into_iter().map(|f| (f.field, f.message)).collect(),
            other => panic!("not field errors: {other:?}"),
        }
    }

    #[test]
    fn every_field_at_fault_is_named() {
        let e = json::<Body>(json!({"name": 5, "limit": "x", "colour": 1, "inner": {"amount": -1}})).unwrap_err();
        let f = fields(e);
        let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"name") && names.contains(&"limit"), "{f:?}");
        assert!(names.contains(&"colour") && names.contains(&"inner.amount"), "{f:?}");
        assert!(f.iter().all(|(_, m)| !m.contains('"')), "values stay out of messages: {f:?}");
    }

    #[test]
    fn a_missing_field_is_named_and_ends_the_search() {
        let f = fields(json::<Body>(json!({"limit": 3})).unwrap_err());
        assert_eq!(f, vec![("name".to_string(), "is required".to_string())]);
        let f = fields(json::<Body>(json!({"inner": {}, "name": "n"})).unwrap_err());
        assert_eq!(f[0].0, "inner.amount");
    }

    #[test]
    fn query_parameters_are_named() {
        let f = fields(query::<Body>("name=a&limit=ten&start=2026").unwrap_err());
        let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 2, "{f:?}");
        assert!(names.contains(&"limit") && names.contains(&"start"), "{f:?}");
        let ok: Body = query("name=a&limit=3").unwrap();
        assert_eq!(ok.limit, Some(3));
    }
}
