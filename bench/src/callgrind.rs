//! Instructions per record: each side's process under valgrind's callgrind, on a short and a
//! longer prefix of the same events, so that what does not depend on the records (process start,
//! imports, clients, teardown) cancels out:
//! `(instructions(long) - instructions(short)) / (records(long) - records(short))`.
//!
//! Callgrind counts the instructions the process executes in user space, all its threads
//! together (the kernel's work for its system calls is not counted, on either side). The count
//! does not depend on the machine's load, unlike CPU time. Under callgrind a process runs about
//! 50 times slower; the deadlines are stretched to match.

use std::ffi::OsString;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::sides::{BoxError, Run, run_side, write_events};
use crate::streams::StreamSource;
use crate::{Side, Workload};

/// Each invocation's deadline under callgrind, ms (30 s without it).
pub const LAMBDA_TIMEOUT_MS: u64 = 600_000;

/// What callgrind counted: `benchmarks.json`'s `instructions`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Instructions {
    /// `valgrind --version`.
    pub valgrind: String,
    /// Batches of the short and of the long run (the first batches of the workload).
    pub batches: [usize; 2],
    /// Records of the short and of the long run.
    pub records: [u64; 2],
    /// Each side's counts.
    pub sides: Vec<SideInstructions>,
}

/// One side's instruction counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SideInstructions {
    /// [`Side::key`].
    pub side: String,
    /// Instructions of the whole process, short and long run.
    pub instructions: [u64; 2],
    /// Wall time of each run under callgrind, s.
    pub seconds: [f64; 2],
}

impl Instructions {
    /// Instructions per record of `side`, when it was measured.
    pub fn per_record(&self, side: Side) -> Option<f64> {
        let s = self.sides.iter().find(|s| s.side == side.key())?;
        let records = self.records[1].checked_sub(self.records[0])?;
        let instructions = s.instructions[1] as f64 - s.instructions[0] as f64;
        (records > 0).then(|| instructions / records as f64)
    }
}

/// The total instructions (`Ir`) of a callgrind output file: its `summary:` line, or else the
/// sum of its parts' `totals:` lines.
pub fn total_instructions(callgrind_out: &str) -> Option<u64> {
    let first_number = |line: &str, prefix: &str| {
        line.strip_prefix(prefix)?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    };
    if let Some(summary) = callgrind_out
        .lines()
        .find_map(|l| first_number(l, "summary:"))
    {
        return Some(summary);
    }
    callgrind_out
        .lines()
        .filter_map(|l| first_number(l, "totals:"))
        .reduce(|a, b| a + b)
}

/// `valgrind --version`, when valgrind is installed.
pub fn valgrind_version() -> Option<String> {
    let out = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Runs each of `sides` twice under callgrind against `endpoint`, on the first `batches[0]` and
/// the first `batches[1]` events of `workload` (a standard queue's, or `stream`'s), with new
/// tables created through `dynamodb`; files go into `dir`.
pub async fn measure(
    sides: &[Side],
    endpoint: &str,
    workload: &Workload,
    stream: Option<StreamSource>,
    batches: [usize; 2],
    dynamodb: &aws_sdk_dynamodb::Client,
    dir: &Path,
) -> Result<Instructions, BoxError> {
    let valgrind = valgrind_version().ok_or(
        "valgrind is not installed (Debian: apt-get install valgrind); \
         or pass --no-callgrind to skip the instruction counts",
    )?;
    let batches = batches.map(|n| n.clamp(1, workload.events.len()));
    if batches[0] >= batches[1] {
        return Err(format!(
            "callgrind needs a short run shorter than the long one: {batches:?} batches of {}",
            workload.events.len()
        )
        .into());
    }
    let name = stream.map_or("sqs", StreamSource::key);
    let events = batches.map(|n| dir.join(format!("events-callgrind-{name}-{n}.json")));
    for (n, path) in batches.iter().zip(&events) {
        write_events(path, &workload.events[..*n])?;
    }
    let mut result = Instructions {
        valgrind,
        batches,
        ..Instructions::default()
    };
    for &side in sides {
        let mut counted = SideInstructions {
            side: side.key().into(),
            ..SideInstructions::default()
        };
        for i in 0..2 {
            eprintln!(
                "bench: callgrind, {name}, {}, {} batches ...",
                side.label(),
                batches[i]
            );
            let out = dir.join(format!(
                "callgrind-{name}-{}-{}.out",
                side.key(),
                batches[i]
            ));
            let mut file_flag = OsString::from("--callgrind-out-file=");
            file_flag.push(&out);
            let run = Run {
                under: vec![
                    "valgrind".into(),
                    "-q".into(),
                    "--tool=callgrind".into(),
                    file_flag,
                ],
                lambda_timeout_ms: LAMBDA_TIMEOUT_MS,
                stream,
                ..Run::new(endpoint, &events[i], false)
            };
            let t = Instant::now();
            let side_result = run_side(side, &run, dynamodb, dir).await?;
            counted.seconds[i] = t.elapsed().as_secs_f64();
            let text = std::fs::read_to_string(&out)
                .map_err(|e| format!("cannot read {}: {e}", out.display()))?;
            counted.instructions[i] = total_instructions(&text)
                .ok_or_else(|| format!("{}: no summary or totals line", out.display()))?;
            if result.records[i] != 0 && result.records[i] != side_result.records {
                return Err(format!(
                    "the {} side processed {} records of the {} batches, the others {}",
                    side.key(),
                    side_result.records,
                    batches[i],
                    result.records[i]
                )
                .into());
            }
            result.records[i] = side_result.records;
        }
        result.sides.push(counted);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_read_from_the_summary_or_the_parts() {
        let out = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\nevents: Ir\n\
                   summary: 1189584322\n\nfl=(1) a.c\nfn=(1) main\n3 12\n\ntotals: 1189584322\n";
        assert_eq!(total_instructions(out), Some(1_189_584_322));
        let parts = "events: Ir\npart: 1\ntotals: 100\npart: 2\ntotals: 50\n";
        assert_eq!(total_instructions(parts), Some(150));
        assert_eq!(total_instructions("events: Ir\n"), None);
    }

    #[test]
    fn the_start_and_the_end_cancel_out() {
        let counts = Instructions {
            batches: [5, 25],
            records: [50, 250],
            sides: vec![SideInstructions {
                side: Side::Transactional.key().into(),
                // 1,000,000 to start and stop, 2,000 per record.
                instructions: [1_100_000, 1_500_000],
                seconds: [1.0, 2.0],
            }],
            ..Instructions::default()
        };
        assert_eq!(counts.per_record(Side::Transactional), Some(2000.0));
        assert_eq!(counts.per_record(Side::Powertools), None);
    }
}
