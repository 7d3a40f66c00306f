//! The Nexmark events as both engines read them: [`Person`], [`Auction`] and [`Bid`], each
//! wrapped in an [`Event`] in the layout of the Nexmark project's Kafka table
//! (`nexmark-flink/src/main/resources/queries/ddl_kafka.sql`): one JSON object per line with
//! `event_type` (0 person, 1 auction, 2 bid) and the one non-null nested row.
//!
//! Times are epoch milliseconds in Rust and `TIMESTAMP(3)` strings in the files
//! (`yyyy-MM-dd HH:mm:ss.SSS`, UTC, Flink's JSON format's default `SQL` timestamp standard), so
//! that Flink's `json` format reads them as they are.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A new user of the auction site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// The person's id (from 1000 on).
    pub id: u64,
    /// First and last name.
    pub name: String,
    /// An email address.
    pub email_address: String,
    /// Four groups of four digits.
    pub credit_card: String,
    /// A US city.
    pub city: String,
    /// A US state (two letters).
    pub state: String,
    /// When the person registered (event time).
    #[serde(with = "sql_timestamp")]
    pub date_time: i64,
    /// Padding up to the configured average size.
    pub extra: String,
}

/// A new auction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Auction {
    /// The auction's id (from 1000 on).
    pub id: u64,
    /// A short name.
    pub item_name: String,
    /// A longer description.
    pub description: String,
    /// The starting price.
    pub initial_bid: u64,
    /// The reserve price.
    pub reserve: u64,
    /// When the auction opened (event time).
    #[serde(with = "sql_timestamp")]
    pub date_time: i64,
    /// When the auction closes.
    #[serde(with = "sql_timestamp")]
    pub expires: i64,
    /// The person selling.
    pub seller: u64,
    /// The category (10 to 14).
    pub category: u64,
    /// Padding up to the configured average size.
    pub extra: String,
}

/// A bid on an auction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bid {
    /// The auction bid on.
    pub auction: u64,
    /// The person bidding.
    pub bidder: u64,
    /// The price, in cents.
    pub price: u64,
    /// Where the bid came from.
    pub channel: String,
    /// The page it was made on.
    pub url: String,
    /// When the bid was made (event time).
    #[serde(with = "sql_timestamp")]
    pub date_time: i64,
    /// Padding up to the configured average size.
    pub extra: String,
}

/// One line of the events file: exactly one of `person`, `auction`, `bid` is present.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// 0 person, 1 auction, 2 bid.
    pub event_type: u8,
    /// The person, when `event_type` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<Person>,
    /// The auction, when `event_type` is 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auction: Option<Auction>,
    /// The bid, when `event_type` is 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bid: Option<Bid>,
}

impl Event {
    /// A person event.
    pub fn person(p: Person) -> Self {
        Event {
            event_type: 0,
            person: Some(p),
            auction: None,
            bid: None,
        }
    }

    /// An auction event.
    pub fn auction(a: Auction) -> Self {
        Event {
            event_type: 1,
            person: None,
            auction: Some(a),
            bid: None,
        }
    }

    /// A bid event.
    pub fn bid(b: Bid) -> Self {
        Event {
            event_type: 2,
            person: None,
            auction: None,
            bid: Some(b),
        }
    }

    /// The event's time: the `dateTime` of its row (the `dateTime` column of the Kafka table).
    pub fn date_time(&self) -> i64 {
        match (&self.person, &self.auction, &self.bid) {
            (Some(p), _, _) => p.date_time,
            (_, Some(a), _) => a.date_time,
            (_, _, Some(b)) => b.date_time,
            _ => i64::MIN,
        }
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) → days since 1970-01-01, the inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Epoch milliseconds as `yyyy-MM-dd HH:mm:ss.SSS` (UTC).
pub fn format_timestamp(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// `yyyy-MM-dd HH:mm:ss[.S{1,9}]` (or with `T`) as epoch milliseconds (UTC).
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut ms = 0;
    if b.len() > 20 && b[19] == b'.' {
        // The first three digits of the fraction, as milliseconds (`.5` is 500).
        let digits = &b[20..b.len().min(23)];
        let mut scale = 100;
        for &d in digits {
            if !d.is_ascii_digit() {
                return None;
            }
            ms += i64::from(d - b'0') * scale;
            scale /= 10;
        }
    }
    let days = days_from_civil(y, u32::try_from(mo).ok()?, u32::try_from(d).ok()?);
    Some(days * 86_400_000 + h * 3_600_000 + mi * 60_000 + sec * 1000 + ms)
}

/// serde for an epoch-millisecond `i64` written as a `TIMESTAMP(3)` string.
pub mod sql_timestamp {
    use super::*;

    /// Writes `ms` as `yyyy-MM-dd HH:mm:ss.SSS`.
    pub fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_timestamp(*ms))
    }

    /// Reads `yyyy-MM-dd HH:mm:ss.SSS`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        parse_timestamp(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not a TIMESTAMP(3): {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_in_flinks_sql_format() {
        assert_eq!(format_timestamp(0), "1970-01-01 00:00:00.000");
        assert_eq!(
            format_timestamp(1_767_225_600_123),
            "2026-01-01 00:00:00.123"
        );
        for ms in [
            0,
            1,
            999,
            86_399_999,
            951_782_400_000,
            1_767_225_600_123,
            -1,
        ] {
            assert_eq!(parse_timestamp(&format_timestamp(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            parse_timestamp("2026-01-01T00:00:01.5"),
            Some(1_767_225_601_500)
        );
        assert_eq!(
            parse_timestamp("2026-01-01 00:00:01"),
            Some(1_767_225_601_000)
        );
        assert_eq!(parse_timestamp("nope"), None);
    }

    #[test]
    fn events_use_the_kafka_tables_layout() {
        let e = Event::bid(Bid {
            auction: 1000,
            bidder: 2001,
            price: 42,
            channel: "Google".into(),
            url: "u".into(),
            date_time: 1_767_225_600_000,
            extra: String::new(),
        });
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"event_type":2,"bid":{"auction":1000,"bidder":2001,"price":42,"channel":"Google","url":"u","dateTime":"2026-01-01 00:00:00.000","extra":""}}"#
        );
        let back: Event = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.date_time(), 1_767_225_600_000);
    }
}
