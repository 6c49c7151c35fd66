//! The REST API's OpenAPI 3 description: hand-written JSON in one file
//! (`openapi.json` beside this one), served at [`PATH`] without a token.
//! A test checks that it names exactly the endpoints of
//! [`super::api::routes`].

use std::sync::LazyLock;

use axum::Json;
use serde_json::Value;

/// Where the description is served.
pub const PATH: &str = "/api/v1/openapi.json";

/// The description's text.
pub const TEXT: &str = include_str!("openapi.json");

/// The description, with this build's version.
pub fn spec() -> &'static Value {
    static SPEC: LazyLock<Value> = LazyLock::new(|| {
        let mut v: Value = serde_json::from_str(TEXT).expect("openapi.json is valid JSON");
        v["info"]["version"] = Value::String(env!("CARGO_PKG_VERSION").into());
        v
    });
    &SPEC
}

/// Serves [`spec`].
pub async fn serve() -> Json<&'static Value> {
    Json(spec())
}

/// The `(METHOD, path)` pairs the description has, sorted.
pub fn operations(spec: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    if let Some(paths) = spec["paths"].as_object() {
        for (path, item) in paths {
            for method in ["get", "put", "post", "delete", "patch", "head", "options"] {
                if item.get(method).is_some() {
                    ops.push((method.to_ascii_uppercase(), path.clone()));
                }
            }
        }
    }
    ops.sort();
    ops
}
