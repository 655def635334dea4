//! Two members and a viewer on one control plane: who sees what, who is refused what (each
//! refusal naming the right), revocation on the API and the dashboard, and the audit log of
//! every change with its member.

use div_test_support::wait_until;

use super::{PATIENCE, Team, audit, request, runs_as, status};
use crate::support::text;

#[test]
fn two_members_and_a_viewer_each_do_what_their_role_allows() {
    let team = Team::start();
    let alice = team.member("alice", &team.add("alice", "member"));
    let bob = team.member("bob", &team.add("bob", "member"));
    let carol = team.member("carol", &team.add("carol", "viewer"));

    // Alice places a run.
    let placed = alice.ok(&[
        "run",
        "--gpu",
        "cpu",
        "--name",
        "alices-run",
        "--detach",
        "train.py::main",
    ]);
    assert_eq!(placed.trim(), "alices-run");

    // Bob sees it, with who placed it, in the table and in the JSON.
    let listed = bob.ok(&["runs", "--all"]);
    let header = listed.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("NAME") && header.contains(" BY "),
        "{listed}"
    );
    let row = listed
        .lines()
        .find(|l| l.starts_with("alices-run"))
        .unwrap_or_default();
    assert!(row.contains(" alice "), "{listed}");
    let runs: serde_json::Value =
        serde_json::from_str(&bob.ok(&["runs", "--all", "--json"])).expect("json");
    assert_eq!(runs[0]["placed_by"], "alice", "{runs}");
    let mine = bob.div(&["runs", "--all", "--mine"]);
    assert_eq!(mine.status.code(), Some(0));
    assert_eq!(text(&mine.stdout), "");
    assert!(
        text(&mine.stderr).contains("no runs placed by `bob`"),
        "{}",
        text(&mine.stderr)
    );
    assert!(
        alice
            .ok(&["runs", "--all", "--mine"])
            .contains("alices-run")
    );

    // Bob may not stop it: the refusal names the right, and a hint says what would be right.
    let refused = bob.div(&["stop", "alices-run"]);
    let said = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(202), "{said}");
    assert!(
        said.starts_with("error: could not stop the run\n"),
        "{said}"
    );
    assert!(
        said.contains("caused by: `bob` (member) may not stop another member's run: that needs the right `stop_any_run`, which the `admin` role has; `alices-run` was placed by `alice`"),
        "{said}"
    );
    assert!(said.contains("\nhint: ask `alice` or an admin"), "{said}");
    assert_eq!(
        bob.ok(&["runs", "--all", "--json"])
            .matches("\"running\"")
            .count()
            + bob
                .ok(&["runs", "--all", "--json"])
                .matches("\"queued\"")
                .count(),
        1,
        "still going"
    );

    // The admin (the server's owner) stops it.
    let stopped = team.admin(&["stop", "alices-run"]);
    assert_eq!(stopped.status.code(), Some(0), "{}", text(&stopped.stderr));
    assert!(
        text(&stopped.stderr).contains("alices-run was canceled"),
        "{}",
        text(&stopped.stderr)
    );

    // Carol, a viewer, is refused `div run` before anything is created or uploaded.
    let volumes_before = team.admin_ok(&["storage", "ls"]);
    let refused = carol.div(&[
        "run",
        "--gpu",
        "cpu",
        "--name",
        "carols-run",
        "train.py::main",
    ]);
    let said = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(202), "{said}");
    assert!(
        said.contains("caused by: `carol` (viewer) may not place runs: that needs the right `place_runs`, which the `member` and `admin` roles have"),
        "{said}"
    );
    assert!(said.contains("\nhint: ask an admin of this control plane for a token with the `member` role or above (yours is `viewer`)"), "{said}");
    assert!(!said.contains("→"), "nothing was shipped: {said}");
    assert_eq!(
        team.admin_ok(&["storage", "ls"]),
        volumes_before,
        "no volume was made"
    );
    // She reads what she may.
    assert!(carol.ok(&["runs", "--all"]).contains("alices-run"));
    // The run was placed detached: its first line comes when it has started.
    div_test_support::wait_until(
        "alice's run's first line, read by carol",
        std::time::Duration::from_secs(60),
        || {
            let log = carol.ok(&["logs", "alices-run"]);
            if log.contains("training") {
                Ok(())
            } else {
                Err(log)
            }
        },
    );
    let refused = carol.div(&["secrets", "ls"]);
    assert_eq!(
        refused.status.code(),
        Some(202),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        text(&refused.stderr).contains("the right `list_secrets`"),
        "{}",
        text(&refused.stderr)
    );

    revoked_on_the_api_and_the_dashboard(&team, &bob);

    // Every change, with who made it; no viewer's and no refused one.
    let log = audit(&team);
    let has = |member: &str, action: &str, target: &str| {
        log.iter()
            .any(|(m, a, t)| m == member && a == action && t == target)
    };
    for name in ["alice", "bob", "carol"] {
        assert!(has("owner", "member.add", name), "{log:?}");
    }
    assert!(has("alice", "volume.create", "vision-code"), "{log:?}");
    assert!(
        log.iter().any(|(m, a, t)| m == "alice"
            && a == "volume.commit"
            && t.starts_with("vision-code/code/")),
        "{log:?}"
    );
    assert!(has("alice", "run.place", "alices-run"), "{log:?}");
    assert!(has("owner", "run.stop", "alices-run"), "{log:?}");
    assert!(has("owner", "member.revoke", "bob"), "{log:?}");
    assert!(has("bob", "session.sign_in", "bob"), "{log:?}");
    assert!(
        log.iter().all(|(m, ..)| m != "carol"),
        "a viewer changed nothing: {log:?}"
    );
    assert!(
        !log.iter().any(|(m, a, _)| m == "bob" && a == "run.stop"),
        "{log:?}"
    );
    let table = team.admin_ok(&["server", "audit"]);
    assert!(table.starts_with("WHEN"), "{table}");
    let place = table
        .lines()
        .find(|l| l.contains("run.place"))
        .unwrap_or_default();
    assert!(
        place.contains("alice") && place.contains("127.0.0.1"),
        "from where: {table}"
    );
}

/// Bob, signed in to the dashboard and using the API, is revoked: the next request with his
/// token, and with his dashboard session, is refused 401.
fn revoked_on_the_api_and_the_dashboard(team: &Team, bob: &super::Member<'_>) {
    let token = {
        let config =
            std::fs::read_to_string(team.tmp.path().join("members/bob/.config/div/config.json"))
                .expect("bob's config");
        let value: serde_json::Value = serde_json::from_str(&config).expect("json");
        value["token"].as_str().expect("a token").to_owned()
    };
    let origin = format!("https://localhost:{}", team.port);
    let signed_in = request(
        team,
        "POST",
        "/api/session",
        &[("Origin", &origin), ("Content-Type", "application/json")],
        &serde_json::json!({ "token": token }).to_string(),
    );
    assert_eq!(status(&signed_in), 200, "{signed_in}");
    let cookie = signed_in
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    assert!(cookie.starts_with("__Host-div_session="), "{cookie}");
    let runs = request(team, "GET", "/api/runs", &[("Cookie", &cookie)], "");
    assert_eq!(status(&runs), 200, "{runs}");
    assert!(bob.ok(&["runs", "--all"]).contains("alices-run"));

    team.admin_ok(&["server", "users", "revoke", "bob"]);
    let refused = bob.div(&["runs", "--all"]);
    let said = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(202), "{said}");
    assert!(
        said.contains("the token is not a member's of this control plane, or it was revoked"),
        "{said}"
    );
    assert!(said.contains("hint: the token was refused"), "{said}");
    let after = request(team, "GET", "/api/runs", &[("Cookie", &cookie)], "");
    assert_eq!(status(&after), 401, "{after}");
    let page = request(team, "GET", "/", &[("Cookie", &cookie)], "");
    assert_eq!(status(&page), 401, "{page}");
    assert!(page.contains("Sign in"), "the sign-in page: {page}");
    let listed = team.admin_ok(&["server", "users", "ls"]);
    let row = listed
        .lines()
        .find(|l| l.starts_with("bob "))
        .unwrap_or_default();
    assert!(row.contains("revoked"), "{listed}");
    let alice_row = listed
        .lines()
        .find(|l| l.starts_with("alice "))
        .unwrap_or_default();
    assert!(
        alice_row.contains("active") && !alice_row.contains("never"),
        "last used: {listed}"
    );
    wait_until("nothing of bob's answers", PATIENCE, || {
        let again = runs_as(team, &token);
        if status(&again) == 401 {
            Ok(())
        } else {
            Err(again)
        }
    });
}
