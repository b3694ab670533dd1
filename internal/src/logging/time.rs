//! The text format's timestamp ([`LogTime`]): what tracing-subscriber's `SystemTime` writes
//! (RFC 3339 in UTC with microseconds, `2026-12-02T07:47:32.123456Z`), with the date and time of
//! day formatted once per second per thread instead of on every line (~2,400
//! instructions of every access line).

use std::cell::Cell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// The text format's [`FormatTime`] (module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogTime;

/// `YYYY-MM-DDTHH:MM:SS.` of one second since the epoch.
type Prefix = [u8; 20];

thread_local!(static CACHE: Cell<(u64, Prefix)> = const { Cell::new((u64::MAX, [0; 20])) });

impl FormatTime for LogTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write_time(w, SystemTime::now())
    }
}

/// Writes `t` as the module docs say. A time before the epoch or past the year 9999 is left to
/// tracing-subscriber's own formatting of the current time (it never happens on a real clock).
fn write_time(w: &mut impl fmt::Write, t: SystemTime) -> fmt::Result {
    let Ok(d) = t.duration_since(UNIX_EPOCH) else {
        return fallback(w);
    };
    let secs = d.as_secs();
    if secs >= 253_402_300_800 {
        return fallback(w);
    }
    let prefix = CACHE.with(|c| {
        let (at, p) = c.get();
        if at == secs {
            return p;
        }
        let p = prefix(secs);
        c.set((secs, p));
        p
    });
    let mut micros = [b'0'; 7];
    let mut n = d.subsec_micros();
    for b in micros[..6].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    micros[6] = b'Z';
    // Both are ASCII digits and punctuation.
    w.write_str(std::str::from_utf8(&prefix).map_err(|_| fmt::Error)?)?;
    w.write_str(std::str::from_utf8(&micros).map_err(|_| fmt::Error)?)
}

fn fallback(w: &mut impl fmt::Write) -> fmt::Result {
    let mut s = String::new();
    tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut s))?;
    w.write_str(&s)
}

/// `YYYY-MM-DDTHH:MM:SS.` of `secs` since the epoch (before the year 10000), by the proleptic
/// Gregorian calendar (H. Hinnant's `civil_from_days`).
fn prefix(secs: u64) -> Prefix {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let mut p = *b"0000-00-00T00:00:00.";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for b in p[at..at + width].iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, hour);
    put(14, 2, minute);
    put(17, 2, second);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, micros: u32) -> String {
        let mut s = String::new();
        let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros.into());
        write_time(&mut s, t).expect("formats");
        s
    }

    #[test]
    fn dates_follow_the_calendar_and_micros_are_six_digits() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_709_164_800, 999_999), "2024-02-29T00:00:00.999999Z");
        assert_eq!(at(1_764_660_452, 123_456), "2025-12-02T07:27:32.123456Z");
        assert_eq!(at(4_102_444_799, 10), "2099-12-31T23:59:59.000010Z");
        // The cached second gives way to the next one.
        assert_eq!(at(4_102_444_800, 0), "2100-01-01T00:00:00.000000Z");
    }

    #[test]
    fn the_current_time_reads_as_tracing_subscribers() {
        let mut ours = String::new();
        LogTime
            .format_time(&mut Writer::new(&mut ours))
            .expect("formats");
        let mut theirs = String::new();
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut Writer::new(&mut theirs))
            .expect("formats");
        assert_eq!(ours.len(), theirs.len());
        // The same minute (a second boundary may pass between the two calls).
        assert_eq!(ours[..16], theirs[..16]);
    }
}
