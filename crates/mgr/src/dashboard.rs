//! The web dashboard: a single page (HTML, CSS, JavaScript and the
//! vendored uPlot chart library, all in `crates/mgr/assets/` and embedded
//! in the binary) that the manager's HTTP server serves at `/`, with its
//! files under `/assets/`. Nothing comes from elsewhere: the page works on
//! machines without internet access.
//!
//! The files are public (no token): the page asks for the API token (or
//! takes it from the URL fragment, `http://ADDR/#token=TOKEN`, which
//! browsers never send to the server) and sends it with every REST call
//! as `Authorization: Bearer TOKEN`. It polls the API every 2 s and
//! updates itself in place.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file.
struct Asset {
    name: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

/// The page.
const INDEX: &[u8] = include_bytes!("../assets/index.html");

/// Every file under `/assets/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "dashboard.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/dashboard.js"),
    },
    Asset {
        name: "dashboard.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("../assets/dashboard.css"),
    },
    Asset {
        name: "uPlot.iife.min.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("../assets/uPlot.min.css"),
    },
    Asset {
        name: "LICENSE-uPlot",
        mime: "text/plain; charset=utf-8",
        body: include_bytes!("../assets/LICENSE-uPlot"),
    },
];

/// What the page may load: only this server's files and API (uPlot sets
/// inline styles on its elements, hence `'unsafe-inline'` for styles).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes: `/` (and `/index.html`) and `/assets/{file}`.
/// Public; merged into the manager's router beside the REST API.
pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/assets/{file}", get(asset))
}

fn respond(mime: &'static str, body: &'static [u8]) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    // Small files; a new binary must show its own page at once.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

async fn index() -> Response {
    let mut resp = respond("text/html; charset=utf-8", INDEX);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => respond(a.mime, a.body),
        None => (StatusCode::NOT_FOUND, "no such file\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str) -> (StatusCode, String, Vec<u8>) {
        let resp = router()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let mime = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .unwrap()
            .to_vec();
        (status, mime, body)
    }

    #[tokio::test]
    async fn serves_the_page_and_every_asset_it_names() {
        let (status, mime, body) = get("/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(mime.starts_with("text/html"), "{mime}");
        let page = String::from_utf8(body).unwrap();
        // Every file the page loads is embedded, and nothing comes from
        // another host.
        let mut named = 0;
        for part in page.split("/assets/").skip(1) {
            let file = part.split('"').next().unwrap();
            let (status, _, body) = get(&format!("/assets/{file}")).await;
            assert_eq!(status, StatusCode::OK, "{file}");
            assert!(!body.is_empty(), "{file}");
            named += 1;
        }
        assert!(named >= 4, "{page}");
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(page.contains("id=\"history-chart\""));
        let (status, mime, body) = get("/assets/uPlot.iife.min.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(mime.starts_with("text/javascript"));
        assert!(String::from_utf8_lossy(&body[..60]).contains("uPlot (v1.6.32)"));
    }

    #[tokio::test]
    async fn unknown_files_are_404() {
        assert_eq!(get("/assets/nope.js").await.0, StatusCode::NOT_FOUND);
        assert_eq!(get("/assets/../Cargo.toml").await.0, StatusCode::NOT_FOUND);
    }
}
