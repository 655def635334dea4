//! `div run`, `div logs` and `div stop` against a wiremock control plane.
//!
//! By subject: `refusals.rs` (what is refused before anything is created), `request.rs` (what
//! the request carries), `output.rs` (what `div run` prints and exits with), `logs_stop.rs`
//! (`div logs`, `div stop`); here, what they share.

mod logs_stop;
mod output;
mod refusals;
mod request;

use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::World;

/// A refusal: exit 200, the message, and nothing created.
async fn refused(args: &[&str]) -> String {
    let world = World::new().await;
    let done = world.div(args).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert_eq!(done.stdout, "");
    world.assert_nothing_created().await;
    done.stderr
}

/// What a Slurm-backed control plane says of `--gpus 12`.
const NOT_WHOLE_NODES: &str =
    "`--gpus 12`: past 8 GPUs a run takes whole nodes of 8 GPUs; ask for `--gpus 8` or `--gpus 16`";

/// Mount `POST {route}` answering `NOT_WHOLE_NODES` as a refusal.
async fn refusing(world: &World, route: &str) {
    Mock::given(method("POST"))
        .and(path(route))
        .respond_with(div_test_support::mock::error_response(
            422,
            "invalid",
            NOT_WHOLE_NODES,
            serde_json::Value::Null,
        ))
        .with_priority(1)
        .mount(&world.server)
        .await;
}
