//! The dashboard on the team's listener (docs/team.md): the same pages and API as the owner's,
//! for the org's members, each with their own token and role.
//!
//! - **Sign-in.** A member types their token once into the sign-in page, whose script sends
//!   it in the body of `POST /api/session` (never in a URL: a `?token=` here opens nothing).
//!   A good token begins a session: a fresh random token kept as the cookie `__Host-div_session`
//!   (`HttpOnly`, `SameSite=Strict`, `Secure`, `Path=/`; `div_session` without `Secure` on a
//!   loopback listener without TLS), which the server keeps only as a hash. Bad tokens count
//!   against the address as on the API (`slowdown`).
//! - **Every request** with the cookie is its member's, looked up again each time: once the
//!   member is revoked, the session answers 401 as a bad token does. Each route needs the
//!   right `auth::dashboard_rule` says; stopping another member's run needs what `div stop`
//!   needs.
//! - **Cross-site requests.** A change (`POST`, `DELETE`) needs the cookie, which
//!   `SameSite=Strict` keeps off any request another site starts, and an `Origin` that is the
//!   dashboard's own (`https://` and the request's `Host`): 403 otherwise.
//! - **Signing out** (`DELETE /api/session`) ends the session on the server, and clears the
//!   cookie. Sessions last while the server runs, at most [`MAX_SESSIONS`] of them.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use div_api::SignIn;
use div_api::routes::dashboard::{self as routes, DashboardRoute};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::headers::{cookie_token, refuse, secure};
use super::{answer, assets};
use crate::http::audited::audited;
use crate::http::auth::{self, Audit};
use crate::http::error::{ErrorCode, HttpError};
use crate::http::slowdown::Slowdown;
use crate::http::wire::{self, Resp, blocking, fail, header, query, read_json};
use crate::members::{self, Actor, token};
use crate::server::Server;

/// The most sessions kept; past it, the oldest ends.
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// The team's dashboard sessions: each the hash of its cookie's token, and its member's id.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    inner: Mutex<SessionMap>,
}

#[derive(Debug, Default)]
struct SessionMap {
    members: HashMap<String, i64>,
    order: VecDeque<String>,
}

impl Sessions {
    fn begin(&self, hash: String, member: i64) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while s.members.len() >= MAX_SESSIONS {
            match s.order.pop_front() {
                Some(old) => {
                    s.members.remove(&old);
                }
                None => break,
            }
        }
        s.members.insert(hash.clone(), member);
        s.order.push_back(hash);
    }

    fn member(&self, hash: &str) -> Option<i64> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.members.get(hash).copied()
    }

    fn end(&self, hash: &str) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.members.remove(hash);
        s.order.retain(|h| h != hash);
    }
}

/// The session cookie's name: `__Host-` over TLS, which a browser keeps only when it is
/// `Secure`, for this host alone, at `/`.
fn cookie_name(tls: bool) -> &'static str {
    if tls {
        "__Host-div_session"
    } else {
        "div_session"
    }
}

/// The `Set-Cookie` of a session (`None`: the one that clears it).
fn set_cookie(tls: bool, value: Option<&str>) -> String {
    let secure = if tls { "; Secure" } else { "" };
    match value {
        Some(v) => format!(
            "{}={v}; HttpOnly; SameSite=Strict; Path=/{secure}",
            cookie_name(tls)
        ),
        None => format!(
            "{}=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/{secure}",
            cookie_name(tls)
        ),
    }
}

/// The team's listener, as its dashboard needs it.
#[derive(Debug)]
pub(crate) struct Listener<'a> {
    pub(crate) server: &'a Arc<Server>,
    pub(crate) slowdown: &'a Slowdown,
    pub(crate) sessions: &'a Sessions,
    pub(crate) peer: SocketAddr,
    /// Whether it serves TLS.
    pub(crate) tls: bool,
}

impl Listener<'_> {
    /// A request on the team's listener outside `/v1/`: the dashboard.
    pub(crate) async fn serve(&self, req: Request<Incoming>) -> Resp {
        secure(self.answer(req).await)
    }

    async fn answer(&self, req: Request<Incoming>) -> Resp {
        if req.method() == Method::GET
            && let Some(name) = req.uri().path().strip_prefix("/assets/")
        {
            return assets::asset(name)
                .unwrap_or_else(|| fail(HttpError::not_found(format!("no asset `{name}`"))));
        }
        let change = req.method() != Method::GET && req.method() != Method::HEAD;
        if change && !same_origin(&req, self.tls) {
            return refuse(
                StatusCode::FORBIDDEN,
                "a change needs a request from the dashboard's own page (its `Origin`)",
            );
        }
        let path = req.uri().path().to_owned();
        let from = format!("dashboard {}", self.peer.ip());
        if req.method() == Method::POST && path == "/api/session" {
            return self.sign_in(req, from).await;
        }
        let hash = cookie_token(&req, cookie_name(self.tls)).map(|t| token::hash(&t));
        let actor = match &hash {
            Some(hash) => self.session_actor(hash, &from).await,
            None => Ok(None),
        };
        let actor = match actor {
            Ok(Some(actor)) => actor,
            Ok(None) => return signed_out(&path),
            Err(e) => return fail(e),
        };
        if req.method() == Method::DELETE && path == "/api/session" {
            if let Some(hash) = &hash {
                self.sessions.end(hash);
            }
            return self.sign_out(&actor).await;
        }
        let q = query(&req);
        answer::route(self.server, &actor, req, &q)
            .await
            .unwrap_or_else(fail)
    }

    /// The member of the session whose cookie hashes to `hash`; `None` for no session, or
    /// one whose member was revoked since (the session then ends).
    async fn session_actor(&self, hash: &str, from: &str) -> Result<Option<Actor>, HttpError> {
        let Some(id) = self.sessions.member(hash) else {
            return Ok(None);
        };
        let from = from.to_owned();
        let actor = blocking(self.server, move |s| {
            members::still_live(&s.store, id, &from)
        })
        .await?;
        if actor.is_none() {
            self.sessions.end(hash);
        }
        Ok(actor)
    }

    /// `POST /api/session`: a member's token in the body begins a session.
    async fn sign_in(&self, req: Request<Incoming>, from: String) -> Resp {
        let body: SignIn = match read_json(req).await {
            Ok(b) => b,
            Err(e) => return fail(e),
        };
        let actor =
            auth::member_of_token(self.server, self.slowdown, body.token, self.peer.ip(), from)
                .await;
        let (actor, member) = match actor {
            Ok(a) => match a.member {
                Some(id) => (a, id),
                None => return fail(auth::no_member()),
            },
            Err(e) => return fail(e),
        };
        let session = match token::random_hex(32) {
            Ok(t) => t,
            Err(e) => {
                return fail(HttpError::internal(format!(
                    "could not read /dev/urandom for a session: {e}"
                )));
            }
        };
        self.sessions.begin(token::hash(&session), member);
        let me = answer::who(&actor);
        let resp = with_cookie(
            wire::answer(&routes::SIGN_IN, 200, &me),
            self.tls,
            Some(&session),
        );
        match DashboardRoute::find("POST", &["api", "session"]) {
            Some(found) => {
                let rule = auth::dashboard_rule(found.route);
                audited(self.server, &actor, rule.audit, &found, resp).await
            }
            None => resp,
        }
    }

    /// `DELETE /api/session`: the session is over; its cookie is cleared.
    async fn sign_out(&self, actor: &Actor) -> Resp {
        let resp = with_cookie(
            Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::new(Bytes::new()).boxed())
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed())),
            self.tls,
            None,
        );
        match DashboardRoute::find("DELETE", &["api", "session"]) {
            Some(found) => {
                let audit = auth::dashboard_rule(found.route).audit;
                debug_assert_ne!(audit, Audit::No);
                audited(self.server, actor, audit, &found, resp).await
            }
            None => resp,
        }
    }
}

/// Whether a change comes from the dashboard's own page: its `Origin` is this listener's
/// scheme and the request's `Host`.
fn same_origin(req: &Request<Incoming>, tls: bool) -> bool {
    let scheme = if tls { "https" } else { "http" };
    match (header(req, "origin"), header(req, "host")) {
        (Some(origin), Some(host)) => origin == format!("{scheme}://{host}"),
        _ => false,
    }
}

/// Without a session: the sign-in page for a page, 401 for the dashboard's API.
fn signed_out(path: &str) -> Resp {
    if path.starts_with("/api/") {
        return fail(HttpError::new(
            ErrorCode::Unauthorized,
            "sign in with a member's token first (the dashboard's sign-in page)",
        ));
    }
    wire::full(401, "text/html; charset=utf-8", assets::SIGN_IN)
}

fn with_cookie(mut resp: Resp, tls: bool, value: Option<&str>) -> Resp {
    if let Ok(v) = http::HeaderValue::from_str(&set_cookie(tls, value)) {
        resp.headers_mut().insert("set-cookie", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::{Sessions, set_cookie};

    #[test]
    fn the_cookie_is_httponly_strict_and_secure_over_tls() {
        assert_eq!(
            set_cookie(true, Some("abc")),
            "__Host-div_session=abc; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
        assert_eq!(
            set_cookie(false, None),
            "div_session=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/"
        );
    }

    #[test]
    fn a_session_ends_when_signed_out() {
        let sessions = Sessions::default();
        sessions.begin("h1".into(), 1);
        sessions.begin("h2".into(), 2);
        assert_eq!(sessions.member("h1"), Some(1));
        sessions.end("h1");
        assert_eq!(sessions.member("h1"), None);
        assert_eq!(sessions.member("h2"), Some(2));
    }
}
