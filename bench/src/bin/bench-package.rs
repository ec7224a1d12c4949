//! bench-package: each function's deploy package (its zip at deflate level 9) and its init under a
//! Lambda Runtime API, beside Powertools' (see [`bench::package`]). `make bench` runs it after the
//! benchmark; it writes `package.json` and the figures between the package markers of
//! `benchmarks.md` in `--out`.

use std::path::PathBuf;

use bench::package::{
    PACKAGE_END, PACKAGE_START, Package, PackageReport, files_under, function_init,
    powertools_init, render, zip_size,
};
use clap::Parser;
use local_aws::Clients;
use local_aws::template::{Naming, Template, TemplateOptions};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Measures each function's package and init, and Powertools'.
#[derive(Debug, Parser)]
#[command(
    name = "bench-package",
    after_help = "Needs the functions' release binaries (`cargo build --release -p <function>`), \
the benchmark's Python venv (`bench/powertools/setup.sh`) and a local endpoint in \
AWS_ENDPOINT_URL (run it under `infra/local-aws/local-aws run --`).\n\nExit status:\n  0  done\n  \
1  a measurement failed\n  2  bad command line (clap's usage error)"
)]
struct Options {
    /// Where the functions' binaries are.
    #[arg(long, value_name = "DIR", default_value = "target/release")]
    bin_dir: PathBuf,
    /// Inits per package.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// The Python of the benchmark's venv (with aws-lambda-powertools).
    #[arg(long, value_name = "PYTHON", default_value = ".venv-bench/bin/python")]
    python: PathBuf,
    /// Where `package.json` and `benchmarks.md` are.
    #[arg(long, value_name = "DIR", default_value = "docs")]
    out: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let options = Options::parse();
    let sdk = local_aws::local_sdk_config().await?;
    let clients = Clients::new(&sdk);
    let template =
        Template::load_project(&TemplateOptions::default().naming(Naming::unique("pkg")))?;
    let resources = local_aws::provision::provision(&clients, &template).await?;

    let mut functions = Vec::new();
    for f in template.functions.values() {
        let name = f.binary.as_deref().unwrap_or(&f.name);
        let binary = options.bin_dir.join(name);
        let bytes = std::fs::read(&binary).map_err(|e| {
            format!(
                "{}: {e} (build it with `cargo build --release -p <its crate> --bins`)",
                binary.display()
            )
        })?;
        let bootstrap = [("bootstrap".to_owned(), bytes.clone())];
        let (zip_bytes, zip9_bytes) = (zip_size(&bootstrap, 6)?, zip_size(&bootstrap, 9)?);
        let env = resources.lambda_env(f)?;
        let mut init_ms = Vec::new();
        for _ in 0..options.runs {
            init_ms.push(function_init(&binary, &env).await?.as_secs_f64() * 1000.0);
        }
        eprintln!("bench-package: {name}: {zip_bytes} bytes zipped, init {init_ms:.1?} ms");
        functions.push(Package {
            name: name.to_owned(),
            unzipped_bytes: bytes.len() as u64,
            zip_bytes,
            zip9_bytes,
            init_ms,
        });
    }

    let script = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/powertools/bench.py"));
    let site_packages = site_packages(&options.python)?;
    let mut files = vec![("bench.py".to_owned(), std::fs::read(&script)?)];
    files.extend(files_under(
        &site_packages,
        &site_packages.join("aws_lambda_powertools"),
    )?);
    let typing = site_packages.join("typing_extensions.py");
    files.push(("typing_extensions.py".into(), std::fs::read(&typing)?));
    let mut init_ms = Vec::new();
    for _ in 0..options.runs.div_ceil(2) {
        init_ms.push(
            powertools_init(&options.python, &script)
                .await?
                .as_secs_f64()
                * 1000.0,
        );
    }
    let powertools = Package {
        name: format!("Powertools (Python {})", python_version(&options.python)?),
        unzipped_bytes: files.iter().map(|(_, c)| c.len() as u64).sum(),
        zip_bytes: zip_size(&files, 6)?,
        zip9_bytes: zip_size(&files, 9)?,
        init_ms,
    };

    let profile = options
        .bin_dir
        .file_name()
        .map_or_else(|| "the".into(), |n| n.to_string_lossy().into_owned());
    let report = PackageReport {
        machine: bench::machine(),
        binaries: format!(
            "The {profile} binaries, built for {} (Lambda runs the template's arm64)",
            std::env::consts::ARCH
        ),
        runs: options.runs as usize,
        functions,
        powertools,
    };
    std::fs::create_dir_all(&options.out)?;
    std::fs::write(
        options.out.join("package.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let figures = render(&report);
    bench::render::embed_between(
        &options.out.join("benchmarks.md"),
        PACKAGE_START,
        PACKAGE_END,
        &figures,
    )?;
    println!("{figures}");
    Ok(())
}

/// `python`'s version.
fn python_version(python: &std::path::Path) -> Result<String, BoxError> {
    let output = std::process::Command::new(python)
        .args(["-c", "import platform; print(platform.python_version())"])
        .output()?;
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}

/// The venv's `site-packages`, where `python` finds `aws_lambda_powertools`.
fn site_packages(python: &std::path::Path) -> Result<PathBuf, BoxError> {
    let output = std::process::Command::new(python)
        .args([
            "-c",
            "import aws_lambda_powertools, os; \
             print(os.path.dirname(os.path.dirname(aws_lambda_powertools.__file__)))",
        ])
        .output()
        .map_err(|e| format!("{}: {e} (run bench/powertools/setup.sh)", python.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} cannot import aws_lambda_powertools: {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(PathBuf::from(String::from_utf8(output.stdout)?.trim()))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Options;

    #[test]
    fn the_command_line_is_consistent() {
        Options::command().debug_assert();
    }

    #[test]
    fn a_bad_run_count_is_refused_naming_it() {
        let error = Options::try_parse_from(["bench-package", "--runs", "0"]).unwrap_err();
        assert!(error.to_string().contains("--runs"), "{error}");
    }
}
