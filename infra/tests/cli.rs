//! The harness's programs as a user runs them: `--help` lists every option and the exit codes,
//! and a bad command line exits 2 naming what is wrong. None of these needs an endpoint: the
//! command line is checked before anything is contacted (`AWS_ENDPOINT_URL` is removed, so
//! that a mistake cannot reach one either).

use std::process::{Command, Output};

/// Runs `program` with `args`, without `AWS_ENDPOINT_URL`.
fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `--help` exits 0 and prints every option in `options` and the exit codes.
fn assert_help(program: &str, options: &[&str]) {
    let out = run(program, &["--help"]);
    let help = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{help}{}", stderr(&out));
    for option in options.iter().chain(&["--help", "--version"]) {
        assert!(
            help.contains(option),
            "{program} --help lacks {option}:\n{help}"
        );
    }
    assert!(help.contains("Exit codes:"), "{help}");
    for code in ["  0  ", "  1  ", "  2  "] {
        assert!(
            help.contains(code),
            "{program} --help lacks exit code {code:?}:\n{help}"
        );
    }
}

/// Exits 2, and stderr names every one of `names`; nothing on stdout.
fn assert_usage_error(program: &str, args: &[&str], names: &[&str]) {
    let out = run(program, args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for name in names {
        assert!(
            err.contains(name),
            "{args:?}: stderr lacks {name:?}:\n{err}"
        );
    }
    assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
}

const PROVISION: &str = env!("CARGO_BIN_EXE_provision");

#[test]
fn provision_help_lists_its_options_and_exit_codes() {
    assert_help(
        PROVISION,
        &[
            "--template <PATH>",
            "--prefix <P>",
            "--suffix <S>",
            "--param <NAME=VALUE>",
            "--function <NAME>",
            "--format <FORMAT>",
            "shell",
            "dotenv",
            "json",
            "--verify",
        ],
    );
}

#[test]
fn provision_refuses_a_bad_command_line() {
    assert_usage_error(PROVISION, &["--format", "yaml"], &["'yaml'", "--format"]);
    assert_usage_error(
        PROVISION,
        &["--param", "MaxAttempts"],
        &["--param", "MaxAttempts"],
    );
    assert_usage_error(PROVISION, &["--prefix"], &["--prefix"]);
    assert_usage_error(PROVISION, &["--bogus"], &["--bogus"]);
}
