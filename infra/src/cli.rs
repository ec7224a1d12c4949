//! Command-line pieces shared by the harness's programs (`provision`, and
//! the end-to-end crate's `demo` and `consumer`): the template options every program that reads
//! `template.yaml` takes, and value parsers that name what is wrong with a value.
//!
//! Each program is a [`clap`] derive parser; clap prints `--help` (exit code 0) and, for a bad
//! command line, an error naming the argument (exit code 2). The programs' `after_help` lists
//! their exit codes.
//!
//! ```
//! use clap::Parser;
//! use local_aws::cli::TemplateArgs;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     template: TemplateArgs,
//! }
//!
//! let cli = Cli::try_parse_from(["prog", "--prefix", "dev-", "--param", "MaxAttempts=3"]).unwrap();
//! let options = cli.template.options();
//! assert_eq!(options.naming.prefix_str(), "dev-");
//! assert_eq!(options.parameters["MaxAttempts"], "3");
//!
//! let err = Cli::try_parse_from(["prog", "--param", "MaxAttempts"]).err().unwrap();
//! assert_eq!(err.exit_code(), 2);
//! assert!(err.to_string().contains("--param <NAME=VALUE>"));
//! ```

use std::fmt::Display;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::template::{Naming, Template, TemplateOptions};

/// Where a program finds the template and how it names the resources: the options of
/// `provision`, shared by every program that looks resources up by logical id.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TemplateArgs {
    /// The SAM template to read [default: the project's template.yaml]
    #[arg(long, value_name = "PATH")]
    pub template: Option<PathBuf>,
    /// Put P in front of every queue and table name (as `provision --prefix P` did)
    #[arg(long, value_name = "P", default_value = "", allow_hyphen_values = true)]
    pub prefix: String,
    /// Put S after every queue and table name, before `.fifo` (as `provision --suffix S` did)
    #[arg(long, value_name = "S", default_value = "", allow_hyphen_values = true)]
    pub suffix: String,
    /// Give the template parameter NAME the value VALUE instead of its default (repeatable)
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, String)>,
}

impl TemplateArgs {
    /// The template options these arguments give.
    pub fn options(&self) -> TemplateOptions {
        let naming = Naming::prefix(self.prefix.clone()).with_suffix(self.suffix.clone());
        self.params
            .iter()
            .fold(TemplateOptions::default().naming(naming), |o, (k, v)| {
                o.parameter(k, v)
            })
    }

    /// The template path: `--template`, else the project's.
    pub fn path(&self) -> PathBuf {
        self.template.clone().unwrap_or_else(Template::project_path)
    }
}

/// The exit code of a program's run: the code it chose, or, after printing the error on stderr
/// as `PROGRAM: error`, 1 (exit code 2 is clap's, for a bad command line).
///
/// ```
/// use std::process::ExitCode;
///
/// let failed: Result<ExitCode, String> = Err("no endpoint".into());
/// assert_eq!(local_aws::cli::exit_code("provision", failed), ExitCode::FAILURE);
/// assert_eq!(local_aws::cli::exit_code("provision", Ok::<_, String>(ExitCode::SUCCESS)), ExitCode::SUCCESS);
/// ```
pub fn exit_code(program: &str, result: Result<ExitCode, impl Display>) -> ExitCode {
    result.unwrap_or_else(|error| {
        eprintln!("{program}: {error}");
        ExitCode::FAILURE
    })
}

/// Parses `NAME=VALUE` (the value may be empty and may hold `=`; the name may not be empty).
///
/// ```
/// use local_aws::cli::parse_param;
///
/// assert_eq!(parse_param("FailPayments=a=b").unwrap(), ("FailPayments".into(), "a=b".into()));
/// assert_eq!(parse_param("FailPayments=").unwrap().1, "");
/// assert!(parse_param("FailPayments").unwrap_err().contains("NAME=VALUE"));
/// assert!(parse_param("=3").is_err());
/// ```
pub fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some(("", _)) => Err(format!("{text:?} has no parameter name before '='")),
        Some((name, value)) => Ok((name.to_owned(), value.to_owned())),
        None => Err(format!("{text:?} is not NAME=VALUE (no '=')")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        template: TemplateArgs,
    }

    #[test]
    fn the_arguments_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_the_project_template_without_naming() {
        let cli = Cli::try_parse_from(["prog"]).unwrap();
        assert_eq!(cli.template.path(), Template::project_path());
        let options = cli.template.options();
        assert_eq!(options.naming.prefix_str(), "");
        assert!(options.parameters.is_empty());
    }

    #[test]
    fn a_repeated_param_keeps_the_last_value() {
        let cli = Cli::try_parse_from([
            "prog", "--param", "A=1", "--param", "B=x=y", "--param", "A=2",
        ])
        .unwrap();
        let options = cli.template.options();
        assert_eq!(options.parameters["A"], "2");
        assert_eq!(options.parameters["B"], "x=y");
    }

    #[test]
    fn a_param_without_a_name_is_refused_naming_the_flag() {
        let err = Cli::try_parse_from(["prog", "--param", "=1"])
            .err()
            .unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("--param"), "{err}");
    }
}
