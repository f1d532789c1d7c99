//! The time jobs and requests are stamped by. It is the system's, unless the environment names a
//! clock file (`GW_TEST_CLOCK_FILE`): then the time is what that file says (Unix seconds,
//! fractions allowed), frozen until the file changes, so a test can move time past the webhook
//! relay's retry schedule, or through a day of hourly usage sync, and see exact times. Never set
//! in production; the process says so in its log when it is. Read by: the webhook relay, the
//! audit rollups' and usage sync's notion of a completed hour, and the proxy's `created_at`.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

pub const ENV: &str = "GW_TEST_CLOCK_FILE";

#[derive(Debug, Clone, Default)]
pub struct Clock {
    file: Option<PathBuf>,
}

impl Clock {
    pub fn from_env() -> Self {
        let file = std::env::var_os(ENV).map(PathBuf::from);
        if let Some(f) = &file {
            log::warn!("{ENV} is set: the clock reads {} (a test clock)", f.display());
        }
        Clock { file }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.file.as_ref().and_then(|f| read(f)).unwrap_or_else(Utc::now)
    }
}

static PROCESS: std::sync::LazyLock<Clock> = std::sync::LazyLock::new(Clock::from_env);

/// The process's clock (see the module's note): the system's time unless a test set a file.
pub fn now() -> DateTime<Utc> {
    PROCESS.now()
}

fn read(file: &std::path::Path) -> Option<DateTime<Utc>> {
    let text = std::fs::read_to_string(file).ok()?;
    let secs: f64 = text.trim().parse().ok()?;
    DateTime::from_timestamp_millis((secs * 1000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_file_sets_the_time_and_the_system_clock_is_the_fallback() {
        let dir = std::env::temp_dir().join(format!("gw-clock-{}", uuid::Uuid::new_v4()));
        let clock = Clock { file: Some(dir.clone()) };
        let before = Utc::now();
        assert!(clock.now() >= before, "no file: the system's time");
        std::fs::write(&dir, "1795000000.25\n").unwrap();
        assert_eq!(clock.now().timestamp_millis(), 1_795_000_000_250);
        std::fs::write(&dir, "not a time").unwrap();
        assert!(clock.now() >= before);
        std::fs::remove_file(&dir).unwrap();
    }
}
