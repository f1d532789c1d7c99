//! Budget periods: UTC calendar days, ISO weeks (from Monday), months, or all time.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Week,
    Month,
    Total,
}

/// One period: its name in counter keys and events, and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodWindow {
    /// `2026-11-23`, `2026-W48`, `2026-11` or `total`.
    pub id: String,
    pub start: Option<DateTime<Utc>>,
    /// When the next period begins (`None`: never).
    pub end: Option<DateTime<Utc>>,
}

impl Period {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "day" => Period::Day,
            "week" => Period::Week,
            "month" => Period::Month,
            "total" => Period::Total,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Total => "total",
        }
    }

    /// The period `at` falls in.
    pub fn window(self, at: DateTime<Utc>) -> PeriodWindow {
        let day = at.date_naive();
        let midnight = |d: NaiveDate| Utc.from_utc_datetime(&d.and_time(chrono::NaiveTime::MIN));
        match self {
            Period::Day => PeriodWindow {
                id: day.format("%Y-%m-%d").to_string(),
                start: Some(midnight(day)),
                end: Some(midnight(day) + Duration::days(1)),
            },
            Period::Week => {
                let monday = day - Duration::days(i64::from(day.weekday().num_days_from_monday()));
                let week = day.iso_week();
                PeriodWindow {
                    id: format!("{}-W{:02}", week.year(), week.week()),
                    start: Some(midnight(monday)),
                    end: Some(midnight(monday) + Duration::days(7)),
                }
            }
            Period::Month => {
                let first = NaiveDate::from_ymd_opt(day.year(), day.month(), 1).unwrap_or(day);
                let next = if day.month() == 12 {
                    NaiveDate::from_ymd_opt(day.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(day.year(), day.month() + 1, 1)
                }
                .unwrap_or(first);
                PeriodWindow {
                    id: first.format("%Y-%m").to_string(),
                    start: Some(midnight(first)),
                    end: Some(midnight(next)),
                }
            }
            Period::Total => PeriodWindow { id: "total".into(), start: None, end: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn periods_roll_over_on_utc_calendar_boundaries() {
        let w = Period::Day.window(at("2026-11-23T23:59:59.999Z"));
        assert_eq!(w.id, "2026-11-23");
        assert_eq!(w.end, Some(at("2026-11-24T00:00:00Z")));
        assert_eq!(Period::Day.window(at("2026-11-24T00:00:00Z")).id, "2026-11-24");

        // 2026-11-23 is a Monday; ISO week 48.
        let w = Period::Week.window(at("2026-11-29T12:00:00Z"));
        assert_eq!(w.id, "2026-W48");
        assert_eq!(w.start, Some(at("2026-11-23T00:00:00Z")));
        assert_eq!(w.end, Some(at("2026-11-30T00:00:00Z")));
        // The ISO year of the first days of January can be the previous one.
        assert_eq!(Period::Week.window(at("2027-01-01T00:00:00Z")).id, "2026-W53");

        let w = Period::Month.window(at("2026-12-31T10:00:00Z"));
        assert_eq!(w.id, "2026-12");
        assert_eq!(w.end, Some(at("2027-01-01T00:00:00Z")));
        assert_eq!(Period::Month.window(at("2027-02-28T10:00:00Z")).end, Some(at("2027-03-01T00:00:00Z")));

        let w = Period::Total.window(at("2026-11-23T00:00:00Z"));
        assert_eq!((w.id.as_str(), w.end), ("total", None));
        for p in ["day", "week", "month", "total"] {
            assert_eq!(Period::parse(p).map(Period::as_str), Some(p));
        }
        assert_eq!(Period::parse("year"), None);
    }
}
