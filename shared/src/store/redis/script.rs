//! The backend's Lua scripts, and running one in one round trip.
//!
//! Each script is sent as `EVALSHA` by its SHA-1; a server that does not know it (restarted,
//! failed over, `SCRIPT FLUSH`ed) answers `NOSCRIPT`, and the script is sent whole with `EVAL`,
//! which also caches it there. [`super::RedisBackend::load_scripts`] loads them all up front, so
//! that the first call of each costs one round trip too.

use std::sync::LazyLock;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::count::RequestCounter;

/// One Lua script: its name (the operation it is counted and reported as), source and SHA-1.
#[derive(Debug)]
pub(super) struct Script {
    pub(super) name: &'static str,
    pub(super) source: &'static str,
    sha: String,
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Self {
        Self {
            name,
            source,
            sha: ::redis::Script::new(source).get_hash().to_owned(),
        }
    }

    /// Runs the script on `key` with `args`: `EVALSHA`, then `EVAL` if the server does not know
    /// it. Each round trip is counted under the script's name.
    pub(super) async fn run<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        counter: Option<&RequestCounter>,
        key: &str,
        args: &[&str],
    ) -> Result<Value, RedisError> {
        let count = || {
            if let Some(counter) = counter {
                counter.add(self.name);
            }
        };
        count();
        match self
            .command("EVALSHA", &self.sha, key, args)
            .query_async(connection)
            .await
        {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(
                    script = self.name,
                    "the Redis server does not know the script: sending it whole"
                );
                count();
                self.command("EVAL", self.source, key, args)
                    .query_async(connection)
                    .await
            }
            other => other,
        }
    }

    fn command(&self, verb: &str, script: &str, key: &str, args: &[&str]) -> Cmd {
        let mut cmd = ::redis::cmd(verb);
        cmd.arg(script).arg(1).arg(key);
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    }
}

/// The scripts of [`super::RedisBackend`], one per atomic operation.
#[derive(Debug)]
pub(super) struct Scripts {
    /// [`Backend::put`](crate::store::Backend::put).
    pub(super) acquire: Script,
    /// [`Update::Complete`](crate::store::Update::Complete).
    pub(super) complete: Script,
    /// [`Update::Fail`](crate::store::Update::Fail).
    pub(super) fail: Script,
    /// [`Update::ResetAttempts`](crate::store::Update::ResetAttempts).
    pub(super) reset_attempts: Script,
}

impl Scripts {
    pub(super) fn all(&self) -> [&Script; 4] {
        [
            &self.acquire,
            &self.complete,
            &self.fail,
            &self.reset_attempts,
        ]
    }
}

/// The scripts, hashed once per process.
pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new("acquire", include_str!("acquire.lua")),
    complete: Script::new(
        "complete",
        concat!(include_str!("fenced.lua"), include_str!("complete.lua")),
    ),
    fail: Script::new(
        "fail",
        concat!(include_str!("fenced.lua"), include_str!("fail.lua")),
    ),
    reset_attempts: Script::new("reset_attempts", include_str!("reset_attempts.lua")),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::fields::FIELDS;

    #[test]
    fn the_scripts_use_the_field_names_the_backend_reads() {
        let sources: String = SCRIPTS.all().iter().map(|s| s.source).collect();
        for field in FIELDS {
            assert!(
                sources.contains(&format!("'{field}'")),
                "no script writes or reads `{field}`"
            );
        }
    }

    #[test]
    fn each_script_has_its_own_sha() {
        let mut shas: Vec<&str> = SCRIPTS.all().iter().map(|s| s.sha.as_str()).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), 4);
        assert!(shas.iter().all(|s| s.len() == 40));
    }
}
