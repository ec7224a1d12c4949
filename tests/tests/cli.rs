//! The demo and the consumer as a user runs them: `--help` lists the options and the exit
//! codes, and a bad command line exits 2 naming what is wrong, before any endpoint is needed
//! (`AWS_ENDPOINT_URL` is removed).

use std::process::{Command, Output};

const DEMO: &str = env!("CARGO_BIN_EXE_demo");
const CONSUMER: &str = env!("CARGO_BIN_EXE_consumer");

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn assert_usage_error(program: &str, args: &[&str], names: &[&str]) {
    let out = run(program, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for name in names {
        assert!(
            err.contains(name),
            "{args:?}: stderr lacks {name:?}:\n{err}"
        );
    }
}

fn help(program: &str) -> String {
    let out = run(program, &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Exit codes:"), "{help}");
    for code in ["  0  ", "  1  ", "  2  "] {
        assert!(
            help.contains(code),
            "{program} --help lacks exit code {code:?}:\n{help}"
        );
    }
    help
}

#[test]
fn demo_help_names_the_payments_argument_and_its_default() {
    let help = help(DEMO);
    assert!(help.contains("[PAYMENTS]"), "{help}");
    assert!(help.contains("[default: 200]"), "{help}");
}

#[test]
fn demo_refuses_a_count_that_is_not_a_positive_number() {
    assert_usage_error(DEMO, &["0"], &["'0'", "PAYMENTS"]);
    assert_usage_error(DEMO, &["two-hundred"], &["'two-hundred'", "PAYMENTS"]);
    assert_usage_error(DEMO, &["10", "20"], &["'20'"]);
}

#[test]
fn consumer_help_lists_its_options() {
    let help = help(CONSUMER);
    for option in [
        "--prefix <P>",
        "--timeout-secs <T>",
        "--visibility-timeout-secs <V>",
        "--param <NAME=VALUE>",
    ] {
        assert!(help.contains(option), "lacks {option}:\n{help}");
    }
}

#[test]
fn consumer_refuses_a_bad_command_line() {
    assert_usage_error(CONSUMER, &[], &["--prefix <P>", "required"]);
    assert_usage_error(
        CONSUMER,
        &["--prefix", "p-", "--timeout-secs", "0"],
        &["--timeout-secs", "'0'"],
    );
    assert_usage_error(CONSUMER, &["--prefix", "p-", "--param", "X"], &["--param"]);
}
