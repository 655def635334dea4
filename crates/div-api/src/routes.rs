//! The contract's routes, written once.
//!
//! [`Route`] is every route of the control plane's API: its method, its path template, and
//! the types of its request body and of its answer; each also has a [`TypedRoute`] const
//! (`routes::CREATE_VOLUME`) through which those types cannot be mixed up. The client builds
//! its paths from it (`calls.rs`); div-server's router finds a request's route with
//! [`Route::find`] and answers each in one exhaustive `match`, so a route added here and not
//! served there does not compile; the in-memory fake of div-test-support counts its calls by
//! route; and tests hold the table equal to `docs/api/openapi.yaml` (routes, request and
//! answer schemas) and check that the client calls every route at its template.
//! [`dashboard`] is the same for the dashboard's own API.
//!
//! ```
//! use div_api::routes::{self, Route};
//!
//! assert_eq!(routes::GET_RUN.path(&["run k4t9"]), "/v1/runs/run%20k4t9");
//! let found = Route::find("POST", &["v1", "runs", "r_1", "stop"]).expect("a route");
//! assert_eq!((found.route, found.param("run")), (Route::StopRun, "r_1"));
//! ```

use std::fmt;
use std::marker::PhantomData;

use crate::models::*;

/// The header carrying a run creation's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// No body: a request without one, or an answer without one (`204`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nothing;

/// Bytes, `application/octet-stream`: a blob, a pack of blobs ([`crate::pack_frame`]), a
/// volume's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Octets;

/// The log stream, `application/vnd.div.log` ([`crate::logframe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFrames;

/// One JSON object of type `T` a line, `application/x-ndjson`.
pub struct Ndjson<T>(PhantomData<T>);

impl<T> fmt::Debug for Ndjson<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ndjson")
    }
}

/// What a table of routes ([`Route`], [`dashboard::DashboardRoute`]) says of each route.
pub trait RouteTable: Copy + fmt::Debug + 'static {
    /// Every route of the table, in its order.
    const ALL: &'static [Self];
    /// `GET`, `POST`, `PUT` or `DELETE`.
    fn method(self) -> &'static str;
    /// The path, with `{name}` for each segment a request fills in: `/v1/runs/{run}`.
    fn template(self) -> &'static str;
    /// The request body's type, as the table writes it (`CreateVolume`, `Nothing`).
    fn request(self) -> &'static str;
    /// The answer's type, as the table writes it (`Volume`, `Ndjson<PullEvent>`).
    fn response(self) -> &'static str;
}

/// A route with the types of its request body (`Req`) and of its answer (`Resp`).
pub struct TypedRoute<Req, Resp, T = Route> {
    /// The route.
    pub route: T,
    types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp, T: RouteTable> TypedRoute<Req, Resp, T> {
    const fn new(route: T) -> Self {
        TypedRoute {
            route,
            types: PhantomData,
        }
    }

    /// Its method.
    pub fn method(&self) -> &'static str {
        self.route.method()
    }

    /// Its path with `args` in its `{…}` segments, in order, each percent-encoded.
    pub fn path(&self, args: &[&str]) -> String {
        fill(self.route.template(), args)
    }
}

impl<Req, Resp, T: fmt::Debug> fmt::Debug for TypedRoute<Req, Resp, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.route.fmt(f)
    }
}

/// A request's route, found by [`Route::find`] (or [`dashboard::DashboardRoute::find`]), with
/// the segments that filled its template's `{…}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<'a, T = Route> {
    pub route: T,
    params: Vec<(&'static str, &'a str)>,
}

impl<'a, T> Found<'a, T> {
    /// The segment that filled `{name}`; empty when the template has no such name (the
    /// router asks only for the names of the route it matched).
    pub fn param(&self, name: &str) -> &'a str {
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v)
    }
}

/// The route of `table` that answers `method` at `segments` (the request's path without its
/// leading and trailing `/`, split at `/` and each segment percent-decoded), with its
/// parameters; `None` when none does. A `{…}` matches any segment, an empty one included (the
/// route then refuses it as it refuses any bad name).
pub fn find<'a, T: RouteTable>(method: &str, segments: &[&'a str]) -> Option<Found<'a, T>> {
    T::ALL.iter().find_map(|&route| {
        if route.method() != method {
            return None;
        }
        let template: Vec<&'static str> = route.template().trim_matches('/').split('/').collect();
        if template.len() != segments.len() {
            return None;
        }
        let mut params = Vec::new();
        for (want, got) in template.iter().zip(segments) {
            match want.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                Some(name) => params.push((name, *got)),
                None if want == got => {}
                None => return None,
            }
        }
        Some(Found { route, params })
    })
}

/// `template` with `args` in its `{…}` segments, in order, each percent-encoded.
fn fill(template: &str, args: &[&str]) -> String {
    let mut args = args.iter();
    let mut out = String::with_capacity(template.len() + 16);
    for (i, part) in template.trim_start_matches('/').split('/').enumerate() {
        if i > 0 || template.starts_with('/') {
            out.push('/');
        }
        if part.starts_with('{') {
            let arg = args.next();
            debug_assert!(arg.is_some(), "`{template}` needs more than {i} arguments");
            out.push_str(&segment(arg.copied().unwrap_or_default()));
        } else {
            out.push_str(part);
        }
    }
    debug_assert!(args.next().is_none(), "`{template}` takes fewer arguments");
    out
}

/// Percent-encode a path segment: everything but unreserved characters.
pub fn segment(text: &str) -> String {
    encode(text, b"-._~")
}

/// Percent-encode a query value, keeping `/` readable.
pub fn query_value(text: &str) -> String {
    encode(text, b"-._~/")
}

fn encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A table of routes: an enum of them implementing [`RouteTable`], its `find`, and a
/// [`TypedRoute`] const for each. A line is `Variant = CONST: METHOD "template", Req => Resp;`.
macro_rules! routes {
    (
        $(#[$meta:meta])*
        pub enum $table:ident {
            $(
                $(#[$doc:meta])*
                $variant:ident = $typed:ident: $method:ident $template:literal, $req:ty => $resp:ty;
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $table {
            $( $(#[$doc])* $variant, )+
        }

        impl $crate::routes::RouteTable for $table {
            const ALL: &'static [$table] = &[$($table::$variant),+];
            fn method(self) -> &'static str {
                match self { $($table::$variant => stringify!($method)),+ }
            }
            fn template(self) -> &'static str {
                match self { $($table::$variant => $template),+ }
            }
            fn request(self) -> &'static str {
                match self { $($table::$variant => stringify!($req)),+ }
            }
            fn response(self) -> &'static str {
                match self { $($table::$variant => stringify!($resp)),+ }
            }
        }

        impl $table {
            /// Every route of the table, in its order.
            pub const ALL: &'static [$table] = <$table as $crate::routes::RouteTable>::ALL;

            /// Its method.
            pub fn method(self) -> &'static str {
                $crate::routes::RouteTable::method(self)
            }

            /// Its path template.
            pub fn template(self) -> &'static str {
                $crate::routes::RouteTable::template(self)
            }

            /// Its path with `args` in its `{…}` segments, in order, each percent-encoded.
            pub fn path(self, args: &[&str]) -> String {
                $crate::routes::fill(self.template(), args)
            }

            /// The route that answers `method` at `segments` (see [`find`]).
            pub fn find<'a>(
                method: &str,
                segments: &[&'a str],
            ) -> Option<$crate::routes::Found<'a, $table>> {
                $crate::routes::find(method, segments)
            }
        }

        $(
            $(#[$doc])*
            pub const $typed: $crate::routes::TypedRoute<$req, $resp, $table> =
                $crate::routes::TypedRoute::new($table::$variant);
        )+
    };
}

routes! {
    /// A route of the control plane's API (`docs/api/openapi.yaml`).
    pub enum Route {
        /// Whether the control plane is up, and its version.
        Health = HEALTH: GET "/v1/health", Nothing => Health;
        /// SKUs, prices and limits.
        Catalogue = CATALOGUE: GET "/v1/catalogue", Nothing => Catalogue;
        /// Every volume.
        ListVolumes = LIST_VOLUMES: GET "/v1/volumes", Nothing => VolumeList;
        /// Make a volume (idempotent).
        CreateVolume = CREATE_VOLUME: POST "/v1/volumes", CreateVolume => Volume;
        /// Remove a volume and everything in it.
        DeleteVolume = DELETE_VOLUME: DELETE "/v1/volumes/{name}", Nothing => Nothing;
        /// Which blobs a volume lacks.
        MissingBlobs = MISSING_BLOBS:
            POST "/v1/volumes/{name}/blobs/missing", MissingBlobsRequest => MissingBlobs;
        /// A blob's bytes from `?offset=` of `?total=`.
        UploadBlob = UPLOAD_BLOB: PUT "/v1/volumes/{name}/blobs/{hash}", Octets => Nothing;
        /// Several small whole blobs in one body (`?stage=` for a staged tree).
        UploadPack = UPLOAD_PACK: POST "/v1/volumes/{name}/blobs/pack", Octets => PackStored;
        /// Commit a tree of sent blobs.
        CommitTree = COMMIT_TREE: POST "/v1/volumes/{name}/trees", CommitTree => CommittedTree;
        /// Stage a tree, written as its blobs arrive.
        StageTree = STAGE_TREE: POST "/v1/volumes/{name}/stages", CommitTree => StagedTree;
        /// Commit a staged tree.
        CommitStage = COMMIT_STAGE:
            POST "/v1/volumes/{name}/stages/{stage}/commit", Nothing => CommittedTree;
        /// The tree held at `?path=`, when it is the one with `?digest=`.
        TreeHeld = TREE_HELD: GET "/v1/volumes/{name}/trees", Nothing => CommittedTree;
        /// What is under `?path=` in a volume.
        ListTree = LIST_TREE: GET "/v1/volumes/{name}/tree", Nothing => VolumeEntryList;
        /// The file at `?path=` in a volume, with `range`.
        ReadFile = READ_FILE: GET "/v1/volumes/{name}/file", Nothing => Octets;
        /// The control plane's image cache.
        ListImages = LIST_IMAGES: GET "/v1/images", Nothing => ImageCache;
        /// Pull an image into the cache, its progress streamed.
        PullImage = PULL_IMAGE: POST "/v1/images/pull", PullImage => Ndjson<PullEvent>;
        /// Remove every cached image no queued or running run uses.
        PruneImages = PRUNE_IMAGES: POST "/v1/images/prune", PruneImages => PrunedImages;
        /// Whether a run would be placed, creating nothing.
        ValidateRun = VALIDATE_RUN: POST "/v1/runs/validate", CreateRun => RunValidated;
        /// Place a run (with an idempotency key).
        CreateRun = CREATE_RUN: POST "/v1/runs", CreateRun => Run;
        /// Runs, newest first.
        ListRuns = LIST_RUNS: GET "/v1/runs", Nothing => RunList;
        /// A run by id or name.
        GetRun = GET_RUN: GET "/v1/runs/{run}", Nothing => Run;
        /// Stop a run.
        StopRun = STOP_RUN: POST "/v1/runs/{run}/stop", Nothing => Run;
        /// A run's log, as frames.
        Log = LOG: GET "/v1/runs/{run}/log", Nothing => LogFrames;
        /// A run's result and verdicts.
        Result = RESULT: GET "/v1/runs/{run}/result", Nothing => RunResult;
        /// A run's telemetry points after `?after=`.
        Telemetry = TELEMETRY: GET "/v1/runs/{run}/telemetry", Nothing => Telemetry;
        /// Open the local control plane's dashboard.
        OpenDashboard = OPEN_DASHBOARD: POST "/v1/dashboard", Nothing => DashboardLink;
        /// Secrets' names.
        ListSecrets = LIST_SECRETS: GET "/v1/secrets", Nothing => SecretList;
        /// Set a secret.
        SetSecret = SET_SECRET: PUT "/v1/secrets/{name}", SetSecret => SecretInfo;
        /// Remove a secret.
        DeleteSecret = DELETE_SECRET: DELETE "/v1/secrets/{name}", Nothing => Nothing;
        /// Every model, with its latest version.
        ListModels = LIST_MODELS: GET "/v1/models", Nothing => ModelList;
        /// A model: its versions and their evaluations.
        GetModel = GET_MODEL: GET "/v1/models/{name}", Nothing => Model;
        /// A new version of a model, from a volume's tree or folder (the same as the latest:
        /// answered as it is, 200).
        PushModel = PUSH_MODEL: POST "/v1/models/{name}/versions", PushModel => ModelVersion;
        /// Remove a model, every version (refused while an evaluation runs against one).
        DeleteModel = DELETE_MODEL: DELETE "/v1/models/{name}", Nothing => Nothing;
        /// Remove one version (refused while an evaluation runs against it).
        DeleteModelVersion = DELETE_MODEL_VERSION:
            DELETE "/v1/models/{name}/versions/{version}", Nothing => Nothing;
        /// Evaluations, newest first (`?model=`, `?version=`).
        ListEvaluations = LIST_EVALUATIONS: GET "/v1/evaluations", Nothing => EvaluationList;
        /// An evaluation by id.
        GetEvaluation = GET_EVALUATION: GET "/v1/evaluations/{id}", Nothing => Evaluation;
        /// Who the control plane takes the caller for (docs/team.md).
        WhoAmI = WHOAMI: GET "/v1/whoami", Nothing => WhoAmI;
        /// The org's members, revoked ones included.
        ListMembers = LIST_MEMBERS: GET "/v1/members", Nothing => MemberList;
        /// Add a member, or a service token: its token, shown this once.
        CreateMember = CREATE_MEMBER: POST "/v1/members", CreateMember => MemberCreated;
        /// Revoke a member's token, at once.
        RevokeMember = REVOKE_MEMBER: DELETE "/v1/members/{name}", Nothing => Member;
        /// A member's monthly usage limit.
        SetMemberLimit = SET_MEMBER_LIMIT:
            PUT "/v1/members/{name}/limit", MemberLimit => Member;
        /// The Slurm account a member's runs are charged to.
        SetMemberSlurmAccount = SET_MEMBER_SLURM_ACCOUNT:
            PUT "/v1/members/{name}/slurm-account", MemberSlurmAccount => Member;
        /// The org's monthly usage limit.
        SetOrgLimit = SET_ORG_LIMIT: PUT "/v1/org/limit", OrgLimit => OrgLimit;
        /// The audit log, newest first: no route changes it.
        Audit = AUDIT: GET "/v1/audit", Nothing => AuditList;
    }
}

/// The dashboard's own API: what its pages ask the local control plane's dashboard listener
/// (`docs/dashboard.md`), never `/v1`. Its pages (`/`, `/runs/{run}`, `/models`,
/// `/models/{name}`) and assets are not
/// routes of an API and are not here.
pub mod dashboard {
    use serde_json::Value;

    use super::{Nothing, Octets};
    use crate::models::{Model, ModelList, Run, RunList, SignIn, WhoAmI};

    routes! {
        /// A route of the dashboard's API.
        pub enum DashboardRoute {
            /// Runs, newest first (as `GET /v1/runs`).
            ListRuns = LIST_RUNS: GET "/api/runs", Nothing => RunList;
            /// A run with its result, the command that replays it and when it was signalled.
            GetRun = GET_RUN: GET "/api/runs/{run}", Nothing => Value;
            /// Stop a run (as `POST /v1/runs/{run}/stop`).
            StopRun = STOP_RUN: POST "/api/runs/{run}/stop", Nothing => Run;
            /// A part of a run's log (`range`), or all of it to save (`?download`).
            Log = LOG: GET "/api/runs/{run}/log", Nothing => Octets;
            /// A run's charts, laid out by its `telemetry.toml`.
            Charts = CHARTS: GET "/api/runs/{run}/charts", Nothing => Value;
            /// Models, each with its latest version (as `GET /v1/models`).
            ListModels = LIST_MODELS: GET "/api/models", Nothing => ModelList;
            /// A model's versions and evaluations (as `GET /v1/models/{name}`).
            GetModel = GET_MODEL: GET "/api/models/{name}", Nothing => Model;
            /// Who is signed in, and what they may do (docs/team.md).
            Session = SESSION: GET "/api/session", Nothing => WhoAmI;
            /// Sign in with a member's token: the session's cookie is set.
            SignIn = SIGN_IN: POST "/api/session", SignIn => WhoAmI;
            /// Sign out: the session ends, and its cookie with it.
            SignOut = SIGN_OUT: DELETE "/api/session", Nothing => Nothing;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_segments_and_queries() {
        assert_eq!(segment("run-k4t9"), "run-k4t9");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(query_value("code/x y"), "code/x%20y");
        assert_eq!(query_value("a&b=c"), "a%26b%3Dc");
    }

    #[test]
    fn paths_are_filled_in_order_and_found_again() {
        assert_eq!(HEALTH.path(&[]), "/v1/health");
        assert_eq!(
            COMMIT_STAGE.path(&["code", "s 1"]),
            "/v1/volumes/code/stages/s%201/commit"
        );
        for &route in Route::ALL {
            let names: Vec<&str> = route
                .template()
                .split('/')
                .filter(|s| s.starts_with('{'))
                .collect();
            let args: Vec<String> = (0..names.len()).map(|i| format!("a{i}")).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let path = route.path(&args);
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            let found = Route::find(route.method(), &segments).expect("found");
            assert_eq!(found.route, route, "{path}");
            for (name, arg) in names.iter().zip(&args) {
                assert_eq!(found.param(name.trim_matches(['{', '}'])), *arg, "{path}");
            }
        }
    }

    /// No request could be answered by two routes: for any two of one method and length, some
    /// segment is a different literal in each.
    #[test]
    fn no_two_routes_answer_one_request() {
        fn check<T: RouteTable + PartialEq>() {
            for (i, &a) in T::ALL.iter().enumerate() {
                for &b in &T::ALL[i + 1..] {
                    let split = |r: T| r.template().split('/').collect::<Vec<_>>();
                    let (sa, sb) = (split(a), split(b));
                    let distinct = a.method() != b.method()
                        || sa.len() != sb.len()
                        || sa
                            .iter()
                            .zip(&sb)
                            .any(|(x, y)| !x.starts_with('{') && !y.starts_with('{') && x != y);
                    assert!(distinct, "{a:?} and {b:?} answer the same requests");
                }
            }
        }
        check::<Route>();
        check::<dashboard::DashboardRoute>();
    }

    #[test]
    fn a_request_of_no_route_is_none() {
        assert_eq!(Route::find("GET", &["v1", "nothing"]), None);
        assert_eq!(Route::find("DELETE", &["v1", "runs", "r_1"]), None);
        assert_eq!(
            Route::find("GET", &["v1", "runs", "validate"]).map(|f| f.route),
            Some(Route::GetRun),
            "a run may be called `validate`; only `POST` validates"
        );
    }
}
