//! One test of the running test binary, alone in a child process: a fake is per-process state
//! configured from the environment at init, so a test that sets `FAKE_*` variables runs its
//! body in a process of its own (the test binary again, filtered to that test). For tests
//! only; a failure panics, which is the test's report.

use std::process::Command;

use crate::Fake;

/// Whether this process is such a child (`marker`, the variable [`run_alone`] sets, is set):
/// then the test runs its body instead of spawning.
pub fn is_child(marker: &str) -> bool {
    std::env::var_os(marker).is_some()
}

/// Runs test `test` of the running test binary alone in a child process with `marker` set,
/// every variable of this process whose name starts with one of `clear` removed, and what
/// `setup` adds (the fake's variables, a loader path). Returns the child's stdout; panics with
/// the child's output when it fails or ran no test (a misspelt name would pass silently).
pub fn run_alone(
    marker: &str,
    test: &str,
    clear: &[&str],
    setup: impl FnOnce(&mut Command),
) -> String {
    let exe =
        std::env::current_exe().unwrap_or_else(|e| panic!("the running test binary's path: {e}"));
    let mut cmd = Command::new(exe);
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k != marker && clear.iter().any(|p| k.starts_with(p)))
        {
            cmd.env_remove(k);
        }
    }
    setup(&mut cmd);
    let out = cmd
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(marker, "1")
        .output()
        .unwrap_or_else(|e| panic!("running {test} in a child: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {test} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains("1 passed"), "child ran no test:\n{stdout}");
    stdout
}

/// A test's body with `fake` configured by `env`: in the child ([`is_child`]) runs `body`;
/// in the test process builds the fakes (`cargo test` builds no cdylib; a child only reads
/// [`Fake::path`]) and runs test `test` alone in a child ([`run_alone`]) with `env` and no
/// other variable of this process named with one of `clear`'s prefixes.
pub fn in_child(
    fake: Fake,
    marker: &str,
    test: &str,
    clear: &[&str],
    env: &[(&str, &str)],
    body: impl FnOnce(),
) {
    if is_child(marker) {
        body();
        return;
    }
    fake.build()
        .unwrap_or_else(|e| panic!("building {}: {e}", fake.package()));
    run_alone(marker, test, clear, |c| {
        c.envs(env.iter().copied());
    });
}

/// Defines test `$name` whose body runs in a child process with the `FAKE_*` variables listed,
/// through the caller's `in_child(test, env, body)` (which calls [`run_alone`]).
#[macro_export]
macro_rules! child_test {
    ($name:ident, [$(($k:expr, $v:expr)),* $(,)?], $body:block) => {
        #[test]
        fn $name() {
            in_child(stringify!($name), &[$(($k, $v)),*], || $body);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKER: &str = "FAKE_SUPPORT_TEST_CHILD";

    #[test]
    fn the_child_sees_the_marker_and_only_the_variables_it_is_given() {
        if is_child(MARKER) {
            assert_eq!(std::env::var("FAKE_SUPPORT_GIVEN").as_deref(), Ok("yes"));
            assert!(std::env::var_os("CARGO_PKG_NAME").is_none());
            println!("CHILD-SAW-IT");
            return;
        }
        // Cargo sets it for the tests it runs; the child is run without it.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let stdout = run_alone(
            MARKER,
            "child::tests::the_child_sees_the_marker_and_only_the_variables_it_is_given",
            &["CARGO_PKG_"],
            |c| {
                c.env("FAKE_SUPPORT_GIVEN", "yes");
            },
        );
        assert!(stdout.contains("CHILD-SAW-IT"), "{stdout}");
    }

    /// The child fails (it returns where the test expects a panic), so the parent panics.
    #[test]
    #[should_panic(expected = "child child::tests::a_failing_child_fails_the_test failed")]
    fn a_failing_child_fails_the_test() {
        if is_child(MARKER) {
            return;
        }
        run_alone(
            MARKER,
            "child::tests::a_failing_child_fails_the_test",
            &[],
            |_| {},
        );
    }

    #[test]
    #[should_panic(expected = "child ran no test")]
    fn a_name_that_runs_no_test_fails() {
        if is_child(MARKER) {
            return;
        }
        run_alone(MARKER, "child::tests::no_such_test", &[], |_| {});
    }
}
