//! The dashboard (DESIGN §12): a page and its assets, built into the binary — no build step,
//! nothing to install. The page asks for the API token and keeps it in the browser session;
//! everything it shows comes from the same API as the CLI's. `$FTDRIVE_DASHBOARD_DIR` serves
//! the files from a directory instead (while working on them).

use actix_web::{web, HttpResponse};
use std::path::PathBuf;

/// (name, content type, contents).
const ASSETS: [(&str, &str, &str); 3] = [
    ("index.html", "text/html; charset=utf-8", include_str!("dashboard/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("dashboard/app.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("dashboard/style.css")),
];

/// The page's own files only: scripts and styles from this origin, no inline code.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(|| asset("index.html")))
        .route("/dashboard/{file}", web::get().to(|file: web::Path<String>| asset_owned(file.into_inner())));
}

async fn asset_owned(name: String) -> HttpResponse {
    asset(&name).await
}

async fn asset(name: &str) -> HttpResponse {
    let Some((_, kind, embedded)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return HttpResponse::NotFound().json(serde_json::json!({"error": format!("no dashboard file `{name}`")}));
    };
    #[allow(clippy::disallowed_methods)]
    let body = match std::env::var_os("FTDRIVE_DASHBOARD_DIR") {
        Some(dir) => std::fs::read_to_string(PathBuf::from(dir).join(name)).unwrap_or_else(|_| embedded.to_string()),
        None => embedded.to_string(),
    };
    HttpResponse::Ok()
        .content_type(*kind)
        .insert_header(("content-security-policy", POLICY))
        .insert_header(("x-content-type-options", "nosniff"))
        .insert_header(("cache-control", "no-cache"))
        .body(body)
}
