//! Money per member: an admin gives a member a monthly limit; at it, the member's running run
//! is stopped by the org with a last line naming the limit, and its new runs are refused,
//! while another member's runs go on.

use div_test_support::wait_until;

use super::Team;
use crate::support::text;

#[test]
fn a_members_monthly_limit_stops_their_runs_and_refuses_new_ones() {
    let team = Team::start();
    let alice = team.member("alice", &team.add("alice", "member"));
    let bob = team.member("bob", &team.add("bob", "member"));
    alice.ok(&[
        "run",
        "--gpu",
        "cpu",
        "--name",
        "alices",
        "--detach",
        "train.py::main",
    ]);
    bob.ok(&[
        "run",
        "--gpu",
        "cpu",
        "--name",
        "bobs",
        "--detach",
        "train.py::main",
    ]);
    let running = |m: &super::Member<'_>, name: &str| {
        let runs: serde_json::Value =
            serde_json::from_str(&m.ok(&["runs", "--all", "--json"])).expect("json");
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name).cloned())
            .unwrap_or_default()
    };
    wait_until("alice's run starts", super::PATIENCE, || {
        let r = running(&alice, "alices");
        if r["status"] == "running" {
            Ok(())
        } else {
            Err(r)
        }
    });

    // Nothing spent this month is already at a limit of $0.00.
    let set = team.admin(&["server", "users", "set", "alice", "--monthly-limit", "0"]);
    assert_eq!(set.status.code(), Some(0), "{}", text(&set.stderr));
    assert!(
        text(&set.stderr).contains("`alice`: a monthly limit of $0.00"),
        "{}",
        text(&set.stderr)
    );
    let listed = team.admin_ok(&["server", "users", "ls"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("alice ") && l.contains("$0.00")),
        "{listed}"
    );

    wait_until("alice's run is stopped by the org", super::PATIENCE, || {
        let r = running(&alice, "alices");
        if r["status"] == "stopped_by_org" {
            Ok(())
        } else {
            Err(r)
        }
    });
    let logs = alice.div(&["logs", "alices"]);
    let last = text(&logs.stderr);
    assert!(
        last.contains("alices was stopped by the org after")
            && last.contains(": `alice`'s monthly limit of $0.00 reached — "),
        "the last line names the limit: {last}"
    );
    // Hers are refused; Bob's run goes on, and he places another.
    let refused = alice.div(&["run", "--gpu", "cpu", "--name", "again", "train.py::main"]);
    let said = text(&refused.stderr);
    assert_ne!(refused.status.code(), Some(0), "{said}");
    assert!(
        said.contains("`alice`'s monthly limit of $0.00 is reached: $0.00 spent in"),
        "{said}"
    );
    assert_eq!(running(&bob, "bobs")["status"], "running");
    bob.ok(&[
        "run", "--gpu", "cpu", "--name", "bobs-too", "--detach", "--", "true",
    ]);

    // The admin lifts it, and her runs place again.
    team.admin_ok(&["server", "users", "set", "alice", "--monthly-limit", "none"]);
    alice.ok(&[
        "run", "--gpu", "cpu", "--name", "again", "--detach", "--", "true",
    ]);
    let log = super::audit(&team);
    assert!(
        log.iter()
            .any(|(m, a, t)| m == "owner" && a == "member.limit" && t == "alice"),
        "{log:?}"
    );
}
